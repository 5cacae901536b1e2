"""The `quanta` command: every subcommand lives in this package, one module per group, and nothing
outside it imports it (the SDK and the API need no typer).

    run.py            quanta run: one search on this machine, in the foreground
    serve.py          quanta serve: the REST API, the dashboard and the controller in one process
    distributed.py    quanta controller, quanta worker: a cluster's controller and its node agents
    remote.py         quanta submit, status, logs, stop: a running server, through the SDK client
    lifecycle.py      quanta resume, delete, tag: a search in a database or on a running server; what an
                      interrupted run prints
    fork.py           quanta fork: a new trial from a trial's state, with new mutable values (SDK client)
    users.py          quanta users ..., quanta tokens ...: written straight into the service's database
    db.py             quanta db upgrade, quanta db current: the database's schema version
    export.py         quanta export: a search's trials as csv, json or parquet
    simulate.py       quanta simulate, quanta simulate-search: traces and searches in simulated time
    share_options.py  the share layer's knobs and users' weights as serve/controller options
    output.py         exit codes, errors, files written atomically
    prestart.py       a cold `quanta run`'s trial template, launched before everything else

Heavy modules (torch, the database, the API) are imported inside the commands that use them, so
`quanta --help` stays fast. The wiring the commands call (the controller loop, the runtime factory)
is in `quanta.service`; a stored search resumed or deleted where no controller runs, in
`quanta.stored_search`."""

from __future__ import annotations

import sys
from typing import Annotated

from quanta.cli.prestart import start_early

# First, before the imports below: a cold `quanta run`'s trial template imports torch meanwhile.
start_early(sys.argv)

import typer  # noqa: E402

from quanta.cli import db, distributed, export, fork, lifecycle, remote, run, serve, simulate, users  # noqa: E402

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Quanta: Gandiva-style hyperparameter search.")


def version() -> str:
    """The installed distribution's version (`quanta --version`), or a note when Quanta runs from a
    source tree that was never installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("quanta")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e . in the repository)"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"quanta {version()}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option("--version", help="print Quanta's version and exit", callback=_show_version, is_eager=True),
    ] = False,
) -> None:
    """Quanta: Gandiva-style hyperparameter search."""


app.command("run")(run.run)
app.command("serve")(serve.serve)
app.command("submit")(remote.submit)
app.command("controller")(distributed.controller)
app.command("worker")(distributed.worker)
app.command("simulate")(simulate.simulate)
app.command("simulate-search")(simulate.simulate_search)
app.add_typer(users.users_app, name="users")
app.add_typer(users.tokens_app, name="tokens")
app.add_typer(db.db_app, name="db")
app.command("export")(export.export)
app.command("resume")(lifecycle.resume)
app.command("delete")(lifecycle.delete)
app.command("tag")(lifecycle.tag)
app.command("fork")(fork.fork)
for _name, _command in remote.COMMANDS.items():
    app.command(_name)(_command)


def main() -> None:
    app()
