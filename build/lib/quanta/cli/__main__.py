"""`python -m quanta.cli`: the `quanta` command."""

from quanta.cli import main

main()
