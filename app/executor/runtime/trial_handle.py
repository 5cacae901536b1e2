"""`TrialHandle`: what a `LocalRuntime` knows about one trial's process on this node.

A handle is created when the runtime asks the template to fork the trial, and is marked `exited` (never
removed) when its process ends. Its fields are read and written by the thread that applies actions and
by the reader thread (`MessageReader`); a change that both may make at once is made under the runtime's
lock, by whoever changes it. `state` goes starting -> running <-> parking -> parked, and ends in
stopping -> exited (or straight to exited, when the process dies).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any


@dataclass
class TrialHandle:
    trial_id: int
    devices: tuple[str, ...]
    state: str = "starting"  # starting | running | parking | parked | stopping | exited
    conn: Connection | None = None
    pid: int | None = None
    steps: int = 0
    device_seconds: float = 0.0
    run_since: float | None = None  # monotonic time it was told to compute
    parked: threading.Event = field(default_factory=threading.Event)
    suspend_sent: float = 0.0
    done: dict[str, Any] | None = None
    lost_at: float | None = None  # connection closed without "done": waiting for the exit code
    exit_info: dict[str, Any] | None = None
    elastic: bool = False
    migrating: bool = False
    # "resumed" replies still to come for moves made without a park (announced when made, see
    # LocalRuntime._move_running)
    moves_in_place: int = 0
    pending: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # commands before hello
    over_memory: str | None = None  # why the memory watchdog killed it
    forks: set[int] = field(default_factory=set)  # trials waiting for its state (`Fork`)
    adopting: bool = False  # an `Adopt` sent, its answer not in yet

    @property
    def running(self) -> bool:
        return self.state in ("starting", "running", "parking")

    def accrue(self) -> None:
        """Add the device time since it was last told to compute, and stop the clock."""
        if self.run_since is not None:
            self.device_seconds += (time.monotonic() - self.run_since) * len(self.devices)
            self.run_since = None

    def send(self, kind: str, msg: dict[str, Any]) -> None:
        """Send a command to the trial's process, or keep it for when the process says hello."""
        if self.conn is None:  # not connected yet: the child picks commands up once it says hello
            self.pending.append((kind, msg))
            return
        with contextlib.suppress(OSError):  # the reader sees the closed connection and reports the exit
            self.conn.send((kind, msg))
