"""Alembic's environment for Quanta's schema. `quanta.db.migrate.upgrade` hands it an open connection
inside a locked transaction (`config.attributes["connection"]`); the `alembic` command line (configured
in pyproject.toml's [tool.alembic], for writing revisions) connects to `-x db=URL` (default
`sqlite:///quanta.db`).

`target_metadata` is every table the models declare, for `alembic revision --autogenerate`.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlmodel import SQLModel

import quanta.db.models  # noqa: F401  # registers every table
from quanta.db.engine import DEFAULT_URL, make_engine, postgres_url

config = context.config
target_metadata = SQLModel.metadata


def _configure(**kw: Any) -> None:
    context.configure(
        target_metadata=target_metadata,
        transactional_ddl=True,  # SQLite's DDL is transactional too: one upgrade, one transaction
        compare_type=True,
        **kw,
    )


def run() -> None:
    given = config.attributes.get("connection")
    if given is not None:
        _configure(connection=given, render_as_batch=given.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()
        return
    url = context.get_x_argument(as_dictionary=True).get("db", DEFAULT_URL)
    if context.is_offline_mode():
        _configure(url=postgres_url(url), literal_binds=True, render_as_batch=url.startswith("sqlite"))
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(url)
    with engine.connect() as conn:
        _configure(connection=conn, render_as_batch=conn.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()
        conn.commit()
    engine.dispose()


run()
