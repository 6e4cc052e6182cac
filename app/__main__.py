"""``python -m app worker -l info`` — the Faust convention."""

from app.loop import choose_event_loop, install_stack_dump

choose_event_loop()  # before Faust is imported
install_stack_dump()

from app.main import main  # noqa: E402

main()
