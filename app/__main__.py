"""``python -m app worker -l info`` — the Faust convention."""

from app.main import main

main()
