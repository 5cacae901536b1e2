"""`make_engine`: a SQLAlchemy engine for a database URL, as every part of Quanta opens one (the store,
distributed mode's tables, the migrations).

SQLite (a file; the default) is created readable by its owner only and runs in WAL mode, so readers do
not block the writer; PostgreSQL URLs (`postgresql://`) use the psycopg 3 driver.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import create_engine

from quanta.db.url import sqlite_file

DEFAULT_URL = "sqlite:///quanta.db"


def sqlite_path(url: str) -> str | None:
    """The file of a SQLite URL, without the URL's query (None: not SQLite, or an in-memory database)."""
    return sqlite_file(url) or None


def _create_private(path: Path) -> None:
    """Create the database file readable by its owner only (0600) unless it exists. SQLite gives its
    -wal and -shm files the database file's mode."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def postgres_url(url: str) -> str:
    """`postgresql://...` with the psycopg 3 driver named (SQLAlchemy's default driver is psycopg2)."""
    if url.startswith("postgresql://"):
        return "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return url


def make_engine(url: str, *, connect_timeout_s: int | None = None) -> Engine:
    """An engine for `url`. `connect_timeout_s` (PostgreSQL only): fail that fast when the server is
    unreachable (node agents, whose lease clock keeps running)."""
    if url.startswith("sqlite"):
        path = sqlite_path(url)
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            _create_private(Path(path))
        # The API's request threads (40), its event streams' and the controller's all hold a connection at
        # once under load: a file's connections are cheap, so none waits for one (the default pool holds
        # 15). An in-memory database keeps SQLAlchemy's pool of one connection per thread.
        pool: dict[str, Any] = {"pool_size": 16, "max_overflow": 48} if path else {}
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **pool)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _: Any) -> None:  # readers do not block the writer
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    args = {} if connect_timeout_s is None else {"connect_args": {"connect_timeout": connect_timeout_s}}
    return create_engine(postgres_url(url), pool_pre_ping=True, **args)
