"""``python -m app worker -l info`` — the Faust convention."""

from app.loop import choose_event_loop

choose_event_loop()  # before Faust is imported

from app.main import main  # noqa: E402

main()
