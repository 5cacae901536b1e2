"""`TemplateLink`: a `LocalRuntime`'s side of its template process (`template.py`), which forks the trials.

It owns the template's process, its connection and what the template was asked to warm. The accept
thread (`MessageReader`) hands it the template's connection (`connected`, then `mark_ready`); from then
on `send` (a fork, modules to warm) goes out, and before that `send` waits for it. The reader thread
reads the connection (`conn`) and passes the template's "warmed" answers here (`on_warmed`); "forked"
and "exited" concern trials and stay with the reader. `close` stops the template and removes its socket.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from quanta.executor.runtime.template import TemplateStart
from quanta.import_check import ImportProblem

log = logging.getLogger("quanta.runtime")


class TemplateLink:
    """The template started by `start` (already running: its warm-up overlaps the caller's start-up);
    `warm_modules`: what it must have imported before its first fork."""

    def __init__(self, start: TemplateStart, warm_modules: Sequence[str]):
        self.start = start
        self.process = start.process
        self.listener = start.listener  # where the template and the trials connect
        self._conn: Connection | None = None
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        self.warm_errors: dict[str, str | None] = {}
        self._import_failures: dict[str, dict[str, Any] | None] = {}  # by module: the import's failure
        self._warm_done = threading.Condition()  # notified as each module's "warmed" arrives
        self._warmed: set[str] = set(warm_modules) | set(start.warm_modules)
        # The template imports torch and warms its modules in the background; the first fork waits for
        # it (see send), so a caller can do its own start-up meanwhile. Modules a pre-started template
        # was not told about are warmed as soon as it connects.
        self._warm_on_connect = [m for m in warm_modules if m not in start.warm_modules]

    @property
    def conn(self) -> Connection | None:
        """The template's connection, once it has connected."""
        return self._conn

    def connected(self, conn: Connection) -> None:
        """The template connected on `conn` (its "template" hello read): ask it for the modules it still
        lacks, before any fork (forks wait for `mark_ready`)."""
        with self._lock:
            self._conn = conn
            if self._warm_on_connect:
                conn.send(("warm", {"modules": self._warm_on_connect}))

    def mark_ready(self) -> None:
        """Let forks go out: the accept thread calls it once the reader watches the template's connection."""
        self._ready.set()

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until the template process is up (torch imported, modules warmed)."""
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.1):
            if self.process.poll() is not None:
                raise RuntimeError(f"trial template process exited with code {self.process.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"trial template process did not start within {timeout:.0f} s")

    def send(self, kind: str, msg: dict[str, Any]) -> None:
        """Send a message to the template, once it is up (`wait_ready`)."""
        self.wait_ready()
        with self._lock:
            if self._conn is None:
                raise RuntimeError("trial template is not running")
            self._conn.send((kind, msg))

    def warm(self, modules: Sequence[str]) -> None:
        """Import these modules (and call their `prepare()`) in the template before forking trials."""
        new = [m for m in modules if m not in self._warmed]
        if new:
            self._warmed.update(new)
            self.send("warm", {"modules": new})

    def import_problem(self, module: str, timeout: float = 120.0) -> ImportProblem | None:
        """Wait until the template has imported `module` (warming it, as it does before any trial starts)
        and return why that import failed, or None: it imported (a `prepare()` that failed is only
        logged), or no answer came within `timeout` or the template is gone (the trials then report
        what happened). A module the template was not told about is warmed now."""
        deadline = time.monotonic() + timeout
        try:
            self.warm([module])
            self.wait_ready(timeout)
        except RuntimeError as exc:
            log.warning("cannot check that %s imports: %s", module, exc)
            return None
        with self._warm_done:
            while module not in self._import_failures:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed or self.process.poll() is not None:
                    return None
                self._warm_done.wait(min(left, 0.5))
            failure = self._import_failures[module]
        return ImportProblem.of(module, failure) if failure else None

    def on_warmed(self, msg: dict[str, Any]) -> None:
        """The template's answer for one module it was asked to warm."""
        with self._warm_done:
            self.warm_errors[msg["module"]] = msg["error"]
            self._import_failures[msg["module"]] = msg.get("import")
            self._warm_done.notify_all()
        if msg["error"]:  # a failed import is `import_problem`'s to report (quanta run stops on it)
            level = logging.INFO if msg.get("import") else logging.WARNING
            log.log(level, "warming %s failed: %s", msg["module"], msg["error"])

    def close(self) -> None:
        """Stop the template (and with it the trials it forked), close the listener, remove the socket."""
        self._closed = True
        if self._ready.is_set():  # it may have children: let it stop them
            with contextlib.suppress(Exception):
                self.send("shutdown", {})
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        else:  # still warming up, so no trial forked yet: do not wait for it
            self.process.kill()
        self.process.wait()
        with contextlib.suppress(OSError):
            self.listener.close()
        shutil.rmtree(self.start.tmp, ignore_errors=True)  # the socket (closing the listener may remove it)
