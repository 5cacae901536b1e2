"""`python -m app.cli`: the `quanta` command."""

from app.cli import main

main()
