"""`quanta db ...`: the database's schema version (app/db/migrate.py, Alembic's revisions in
app/db/migrations).

`quanta db upgrade` migrates a SQLite or PostgreSQL database to the newest revision, which `quanta serve`,
`quanta controller` and `quanta run` also do when they open it: run it on its own to upgrade before
starting a new release, or to see what an upgrade does. `quanta db current` prints the database's
revision. Exit codes: 0 done (`current`: the database is at the newest revision), 1 (`current`) behind
it, 2 the database cannot be opened or migrated."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from quanta.cli.output import fail

EXIT_BEHIND = 1

db_app = typer.Typer(no_args_is_help=True, help="The database's schema: upgrade it, show its revision.")

Db = Annotated[str, typer.Option("--db", help="the service's database URL", envvar="QUANTA_DB_URL")]


@db_app.command("upgrade")
def upgrade_command(db: Db = "sqlite:///quanta.db") -> None:
    """Migrate the database to the newest schema revision, keeping every row (an empty database gets the
    whole schema; one written before revisions existed is brought up from the first)."""
    from quanta.db.migrate import head_revision, upgrade

    try:
        applied = upgrade(db)
    except Exception as exc:
        raise fail(f"cannot upgrade database {db}: {exc}") from None
    if applied:
        typer.echo(f"{db}: applied {', '.join(applied)}; now at {head_revision()}")
    else:
        typer.echo(f"{db}: at {head_revision()} (the newest revision): nothing to do")


@db_app.command("current")
def current_command(db: Db = "sqlite:///quanta.db") -> None:
    """Print the database's schema revision and whether it is the newest (exit 1 when it is not)."""
    from quanta.db.engine import make_engine, sqlite_path
    from quanta.db.migrate import current_revision, head_revision

    path = sqlite_path(db)
    if db.startswith("sqlite") and (path is None or not Path(path).exists()):
        raise fail(f"no database file at {db}")
    try:
        engine = make_engine(db)
        revision = current_revision(engine)
        engine.dispose()
    except Exception as exc:
        raise fail(f"cannot open database {db}: {exc}") from None
    head = head_revision()
    if revision == head:
        typer.echo(f"{revision} (the newest revision)")
        return
    shown = revision or "unversioned (empty, or written before revisions existed)"
    typer.echo(f"{shown}; the newest is {head}: run `quanta db upgrade --db {db}`")
    raise typer.Exit(EXIT_BEHIND)
