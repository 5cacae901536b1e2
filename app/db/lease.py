"""One controller per database: the leader lease.

Two controllers on one database would both start the same queued search, number its trials twice and
clear each other's commands. Every command that runs a controller (`quanta run`, `quanta serve`,
`quanta controller`) takes this lease first and keeps it for its whole life:

- PostgreSQL: a session-level advisory lock (`pg_try_advisory_lock`) on a connection of its own, held
  open (autocommit, so it never sits in a transaction) until the controller ends. The lock is
  per database. It goes when the connection goes: `held()` says whether it is still ours, and the
  controller loops check it (`ensure()` takes it again after a dropped connection, or raises if another
  controller took it meanwhile).
- SQLite: an exclusive `flock` on a lock file beside the database (`quanta.db.lock` for `quanta.db`),
  which holds the holder's pid and host for the error message. The kernel drops it when the process
  ends, however it ends. In-memory databases are private to their process and need none.

A second controller on the same database gets `LeaseHeld`, whose message names the database and the
holder; `acquire(wait_s=...)` instead waits up to that long (a standby: `quanta controller --standby`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import IO, Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from quanta.db.url import redact, sqlite_file

log = logging.getLogger("quanta.lease")

# The advisory lock's two int4 keys: "QUAN" and 1 (the controller). They show in pg_locks as
# classid / objid (objsubid 2 marks the two-key form).
PG_KEY = (0x5155414E, 1)


class LeaseHeld(RuntimeError):
    """Another controller holds the database's lease."""


def _who() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()}"


class ControllerLease:
    """The right to run the controller on the database at `url`. `acquire()`, keep it, `release()`
    (or use it as a context manager). Not shared between threads: one controller holds it."""

    def __init__(self, url: str):
        self.url = url
        self._file: IO[str] | None = None
        self._engine: Engine | None = None
        self._conn: Connection | None = None
        self._held = False
        if url.startswith("sqlite"):
            path = sqlite_file(url) or None
            self.kind = "sqlite" if path is not None else "memory"
            self.lock_path = Path(f"{path}.lock") if path is not None else None
        elif url.startswith("postgresql"):
            self.kind = "postgresql"
            self.lock_path = None
        else:
            raise ValueError(f"database URL {redact(url)}: no leader lease for this kind of database")

    # ---- taking and giving up ------------------------------------------------------------------

    def acquire(self, wait_s: float = 0.0, *, every_s: float = 1.0, stop: threading.Event | None = None) -> None:
        """Take the lease, trying for up to `wait_s` seconds (0: once; `float('inf')`: until it is free or
        `stop` is set). Raises `LeaseHeld`, naming the holder, when it stays taken."""
        deadline = time.monotonic() + wait_s
        while True:
            holder = self._try()
            if holder is None:
                self._held = True
                log.info("controller lease taken on %s", redact(self.url))
                return
            left = deadline - time.monotonic()
            if left <= 0 or (stop is not None and stop.is_set()):
                self._close_pg()
                raise LeaseHeld(
                    f"another controller runs on database {redact(self.url)} ({holder}); one controller "
                    "per database: stop it, or use another database (--db)"
                )
            if stop is not None:
                stop.wait(min(every_s, left))
            else:
                time.sleep(min(every_s, left))

    def held(self) -> bool:
        """True while the lease is still ours (for PostgreSQL: the lock's connection is alive and holds it)."""
        if not self._held:
            return False
        if self.kind != "postgresql":
            return True
        try:
            assert self._conn is not None
            row = self._conn.execute(
                text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
                    "AND classid = :a AND objid = :b AND objsubid = 2 AND granted"
                ),
                {"a": PG_KEY[0], "b": PG_KEY[1]},
            ).scalar_one()
            return bool(row)
        except Exception:
            return False

    def ensure(self) -> None:
        """Keep holding the lease: when it was lost (its PostgreSQL connection dropped), take it again at
        once or raise `LeaseHeld` (another controller took over meanwhile: this one must stop)."""
        if self.held():
            return
        log.warning("controller lease on %s was lost; taking it again", redact(self.url))
        self._close_pg()
        self._held = False
        self.acquire()

    def release(self) -> None:
        self._held = False
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.truncate(0)
                fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
        self._close_pg()

    def __enter__(self) -> ControllerLease:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # ---- the two kinds -------------------------------------------------------------------------

    def _try(self) -> str | None:
        """Try once. None when taken; otherwise who holds it (for the message)."""
        if self.kind == "memory":
            return None
        if self.kind == "sqlite":
            return self._try_file()
        return self._try_pg()

    def _try_file(self) -> str | None:
        assert self.lock_path is not None
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.lock_path, "a+")  # noqa: SIM115  (kept open while the lease is held)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "holder unknown"
            fh.close()
            return f"{holder}; lock file {self.lock_path}"
        fh.seek(0)
        fh.truncate(0)
        fh.write(_who() + "\n")
        fh.flush()
        self._file = fh
        return None

    def _try_pg(self) -> str | None:
        if self._engine is None:
            url = self.url
            if url.startswith("postgresql://"):
                url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
            name = f"quanta-controller {_who()}"[:63]
            self._engine = create_engine(url, poolclass=NullPool, connect_args={"application_name": name})
        if self._conn is None:
            self._conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        got = self._conn.execute(text("SELECT pg_try_advisory_lock(:a, :b)"), {"a": PG_KEY[0], "b": PG_KEY[1]})
        if got.scalar_one():
            return None
        row = self._conn.execute(
            text(
                "SELECT a.application_name, a.client_addr FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.classid = :a AND l.objid = :b AND l.objsubid = 2 AND l.granted"
            ),
            {"a": PG_KEY[0], "b": PG_KEY[1]},
        ).first()
        if row is None:
            return "holder unknown"
        return f"{row[0] or 'a client'} from {row[1] or 'a local socket'}"

    def _close_pg(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()  # closing the session releases its advisory locks
            self._conn = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
