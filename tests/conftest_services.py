"""Real Redis and PostgreSQL servers for tests and benchmarks, on free loopback ports in temporary
directories, gone when stopped. `make test` installs the Debian packages (redis-server, postgresql);
without them the fixtures skip with the reason.

PostgreSQL's `initdb` refuses to run as root: as root the cluster is created and run as the `postgres`
user (`runuser`), in a directory that user owns.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


class RedisServer:
    """`redis-server` without persistence: a restart loses every queued message, like a crash."""

    def __init__(self, port: int | None = None):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise FileNotFoundError("redis-server is not installed (make system-deps)")
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        assert self.binary is not None
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_port(self.port, 10, self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


def pg_bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PostgresServer:
    """A throwaway PostgreSQL cluster (fsync off: tests and benchmarks, not durability)."""

    def __init__(self, port: int | None = None):
        self.bindir = pg_bindir()
        if self.bindir is None:
            raise FileNotFoundError("PostgreSQL server binaries (initdb, pg_ctl) are not installed (make system-deps)")
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="quanta-pg-"))
        self.data = self.root / "data"
        self.user = "quanta"
        self._as: list[str] = []
        if os.geteuid() == 0:
            os.chown(self.root, _uid("postgres"), -1)
            self._as = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self.root)

    def start(self) -> PostgresServer:
        if not self.data.exists():
            self._run(
                str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", self.user, "-E", "UTF8",
                "--no-sync",
            )  # fmt: skip
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        log = str(self.root / "log")
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", log, "-w", "start")
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = name or f"t_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def halt(self) -> None:
        """Stop the server as a crash would (connections cut), keeping its data: `start()` brings it back."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def _uid(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_uid


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


def postgres_fixture() -> Iterator[PostgresServer]:
    """Body of a PostgreSQL fixture: a server of the tests' own for the fixture's scope, or a skip saying
    why none can run here. Register it as `name = pytest.fixture(scope=..., name="...")(postgres_fixture)`."""
    import pytest

    why = services_missing()
    if why:
        pytest.skip(why)
    with postgres_server() as server:
        yield server


def services_missing() -> str | None:
    """Why the services cannot run here (None when they can)."""
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (make system-deps)"
    if pg_bindir() is None:
        return "PostgreSQL server binaries are not installed (make system-deps)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: initdb refuses root"
    if os.geteuid() == 0:
        try:
            _uid("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run PostgreSQL as"
    return None
