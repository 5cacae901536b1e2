"""The schema's versions: Alembic migrations (app/db/migrations/versions), run through Alembic's API.

`upgrade(engine)` brings a database to the newest revision (head): an empty one gets the whole schema
at once (the models' tables, stamped with head), and one written before the schema was versioned (no
`alembic_version` table, but tables) is brought up from the first revision, whose steps create only what
is missing and keep every row. `Store()` and `DbCluster()`
call it when they open a database; `quanta db upgrade` does it on its own.

All of an upgrade is one transaction, taken exclusively: on SQLite `BEGIN EXCLUSIVE` (SQLite's DDL is
transactional; the driver is told to leave transactions to SQLAlchemy), on PostgreSQL with an advisory
transaction lock. Two processes opening an old database at once therefore migrate it once (the second
waits, then finds it at head), and a migration that fails leaves the database as it was.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Table, create_engine, event, inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool
from sqlmodel import SQLModel

from quanta.db.engine import make_engine
from quanta.db.models import TABLES

log = logging.getLogger("quanta.db")

SCRIPTS = Path(__file__).resolve().parent / "migrations"
# The advisory lock that serializes migrations on PostgreSQL: "QUAN" and 2 (the controller's lease is 1).
PG_MIGRATION_KEY = (0x5155414E, 2)


class UnknownRevision(RuntimeError):
    """The database is at a revision this Quanta does not have: a newer release wrote it."""


def alembic_config() -> Config:
    """Alembic's configuration, built in code: the scripts ship inside the package."""
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPTS))
    return cfg


@functools.cache
def scripts() -> ScriptDirectory:
    """The revisions (read once per process)."""
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    """The newest revision (one head: revisions form a line)."""
    head = scripts().get_current_head()
    assert head is not None, f"no migrations in {SCRIPTS}"
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None: unversioned, i.e. empty or written before migrations)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def revisions_between(start: str | None, end: str) -> list[str]:
    """The revisions an upgrade from `start` (None: nothing) to `end` applies, oldest first."""
    return [r.revision for r in reversed(list(scripts().iterate_revisions(end, start or "base")))]


@contextlib.contextmanager
def _exclusive(engine: Engine) -> Iterator[Connection]:
    """A connection inside one transaction that no other migration runs beside (see the module doc)."""
    url = engine.url
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        own = create_engine(url, poolclass=NullPool, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(own, "connect")
        def _no_driver_transactions(dbapi_conn: Any, _: Any) -> None:  # pysqlite's own BEGINs skip DDL
            dbapi_conn.isolation_level = None

        @event.listens_for(own, "begin")
        def _begin_exclusive(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN EXCLUSIVE")

        try:
            with own.begin() as conn:
                yield conn
        finally:
            own.dispose()
        return
    with engine.begin() as conn:
        if url.get_backend_name() == "postgresql":
            a, b = PG_MIGRATION_KEY
            conn.execute(text("SELECT pg_advisory_xact_lock(:a, :b)"), {"a": a, "b": b})
        yield conn


def upgrade(engine: Engine | str, target: str = "head") -> list[str]:
    """Migrate the database to `target` (default: the newest revision). Returns the revisions applied,
    oldest first ([] when it was there already: one query). `UnknownRevision` when a newer release has
    migrated the database past what this one knows (nothing is changed)."""
    if isinstance(engine, str):
        engine = make_engine(engine)
    goal = head_revision() if target == "head" else target
    now = current_revision(engine)
    if now == goal:
        return []
    if now is not None and now not in {r.revision for r in scripts().walk_revisions()}:
        raise UnknownRevision(
            f"database {engine.url.render_as_string()} is at schema revision {now}, which this Quanta does not "
            f"know (its newest is {head_revision()}): a newer release wrote it; run that release"
        )
    with _exclusive(engine) as conn:
        start = MigrationContext.configure(conn).get_current_revision()  # after the lock: another may have done it
        if start == goal:
            return []
        if start is None and goal == head_revision() and not inspect(conn).get_table_names():
            # An empty database: the tables as the models declare them, which is what the revisions
            # build (tests/unit/test_migrations.py compares the two), at a fraction of the cost.
            tables: list[Table] = [t.__table__ for t in TABLES]  # type: ignore[union-attr]  # SQLModel tables have it
            SQLModel.metadata.create_all(conn, tables=tables, checkfirst=False)
            MigrationContext.configure(conn).stamp(scripts(), goal)
        else:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, target)
    applied = revisions_between(start, goal)
    log.info("database %s: migrated from %s to %s", engine.url.render_as_string(), start or "unversioned", goal)
    return applied
