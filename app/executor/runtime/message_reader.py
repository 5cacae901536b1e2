"""`MessageReader`: a `LocalRuntime`'s two threads that take in what its processes say.

The accept thread takes each connection to the runtime's listener: the template's (handed to the
`TemplateLink`) and each trial's hello (its `TrialHandle` gets the connection and the commands kept for
it, and a `Started` event goes out). The reader thread waits on all of them and turns each message
into the handle's new state and an event on the runtime's queue: reports, profiles, parks, resumes,
checkpoints, forks, adoptions, config changes and, when a trial's connection closes, its `Exited` (with
the exit code or signal the template reports for a process that died without a final status). On each
turn it also runs the memory watchdog (`MemoryWatchdog.check`).

Device time is accounted here too: a trial accrues device seconds from the moment it is told to run
until it reports parked or exits (`TrialHandle.accrue`).

The handles, their lock and the event queue are the runtime's, lent to the reader; it adds nothing to
the handles (the runtime does, when it forks a trial) and keeps its own index of them by process id.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from multiprocessing.connection import Connection, wait
from typing import Any

from quanta.executor.actions import (
    Adopted,
    Checkpointed,
    Configured,
    Event,
    Exited,
    Forked,
    Parked,
    Profiled,
    Resumed,
    Started,
    reported,
)
from quanta.executor.runtime.memory_cap import MemoryWatchdog
from quanta.executor.runtime.template_link import TemplateLink
from quanta.executor.runtime.trial_handle import TrialHandle

log = logging.getLogger("quanta.runtime")

_SIGNALS = {9: "SIGKILL (killed; the OOM killer does this)", 11: "SIGSEGV (segmentation fault)", 6: "SIGABRT"}


class MessageReader:
    """Reads every connection of the processes behind `handles` and `template` and puts what they say on
    `events`. `start()` starts both threads; they end once `closing` is set and `wake()` is called."""

    def __init__(
        self,
        handles: dict[int, TrialHandle],
        lock: threading.RLock,
        events: queue.Queue[Event],
        template: TemplateLink,
        memory: MemoryWatchdog,
    ):
        self._handles = handles
        self._lock = lock
        self._events = events
        self._template = template
        self._memory = memory
        # Set when the runtime closes: a connection that closes from then on is the shutdown, not a crash.
        self.closing = False
        self._by_pid: dict[int, TrialHandle] = {}
        self._conns: list[Connection] = []
        # The reader waits on this pipe too, so a new connection (or closing) interrupts its wait.
        self._wake_r, self._wake_w = os.pipe()
        self._accept_thread = threading.Thread(target=self._accept_loop, name="quanta-accept", daemon=True)
        self._reader_thread = threading.Thread(target=self._reader_loop, name="quanta-reader", daemon=True)

    def start(self) -> None:
        self._accept_thread.start()
        self._reader_thread.start()

    def wake(self) -> None:
        """Interrupt the reader's wait (it ends if `closing` is set)."""
        os.write(self._wake_w, b"x")

    # ---- connections ---------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self.closing:
            try:
                conn = self._template.listener.accept()
            except (OSError, EOFError):
                if self.closing:
                    return
                continue
            except Exception:  # a bad handshake (wrong key): ignore that client
                continue
            try:
                kind, msg = conn.recv()
            except (EOFError, OSError):
                continue
            if kind == "template":
                self._template.connected(conn)
                with self._lock:
                    self._conns.append(conn)
                self._template.mark_ready()  # forks go out once the reader watches for their answers
            elif kind == "hello":
                self._on_hello(conn, msg)
            self.wake()

    def _on_hello(self, conn: Connection, msg: dict[str, Any]) -> None:
        now = time.monotonic()
        with self._lock:
            h = self._handles.get(msg["trial_id"])
            if h is None or h.state == "exited":
                conn.close()  # a stale child: its trial was stopped meanwhile
                return
            h.conn = conn
            h.pid = msg["pid"]
            self._by_pid[h.pid] = h
            self._conns.append(conn)
            pending, h.pending = h.pending, []
            if h.state == "starting":
                h.state = "running"
        start_ms = (now - msg["sent"]) * 1000 if msg.get("sent") else 0.0
        self._events.put(Started(h.trial_id, h.devices, start_ms, 0, time.time()))
        for kind, payload in pending:
            h.send(kind, payload)

    def _reader_loop(self) -> None:
        while not self.closing:
            with self._lock:
                conns = list(self._conns)
            try:
                ready = wait([*conns, self._wake_r], timeout=0.25)
            except OSError:
                ready = []
            for c in ready:
                if c == self._wake_r:
                    os.read(self._wake_r, 4096)
                    continue
                assert isinstance(c, Connection)
                self._drain(c)
            self._memory.check()
            self._expire_lost()

    def _drain(self, conn: Connection) -> None:
        try:
            while conn.poll():
                kind, msg = conn.recv()
                if conn is self._template.conn:
                    self._on_template(kind, msg)
                else:
                    self._on_trial(conn, kind, msg)
        except (EOFError, OSError):
            with self._lock:
                if conn in self._conns:
                    self._conns.remove(conn)
            if conn is self._template.conn:
                if not self.closing:
                    log.error("trial template process exited")
                return
            self._on_lost(conn)

    def _handle_of(self, conn: Connection) -> TrialHandle | None:
        with self._lock:
            for h in self._handles.values():
                if h.conn is conn:
                    return h
        return None

    # ---- messages ------------------------------------------------------------------------------

    def _on_template(self, kind: str, msg: dict[str, Any]) -> None:
        if kind == "forked":
            with self._lock:
                h = self._handles.get(msg["trial_id"])
                if h is not None and h.pid is None:
                    h.pid = msg["pid"]
                    self._by_pid[h.pid] = h
        elif kind == "exited":
            with self._lock:
                h = self._by_pid.get(msg["pid"])
                if h is not None:
                    h.exit_info = msg
                    if h.conn is None and h.state != "exited":
                        h.lost_at = time.monotonic()  # died before it ever connected
        elif kind == "warmed":
            self._template.on_warmed(msg)

    def _co_running(self, h: TrialHandle) -> tuple[int, ...]:
        with self._lock:
            return tuple(
                sorted(
                    o.trial_id
                    for o in self._handles.values()
                    if o is not h and o.running and o.state != "exited" and set(o.devices) & set(h.devices)
                )
            )

    def _on_trial(self, conn: Connection, kind: str, msg: dict[str, Any]) -> None:
        h = self._handle_of(conn)
        if h is None:
            return
        now = time.time()
        if kind == "report":
            h.steps = max(h.steps, msg["step"])
            replay, attempt = bool(msg.get("replay")), int(msg.get("attempt", 0))
            self._events.put(reported(h.trial_id, msg["step"], msg["metrics"], msg["at"], replay, attempt))
        elif kind == "profile":
            h.steps = msg["step"]
            h.elastic = bool(msg.get("elastic"))
            self._events.put(
                Profiled(
                    h.trial_id,
                    h.devices,
                    msg["steps"],
                    msg["seconds"],
                    msg["rss_mb"],
                    msg["at"],
                    msg["started_at"],
                    self._co_running(h),
                )
            )
        elif kind == "parked":
            h.accrue()
            h.steps = msg["step"]
            h.state = "parked"
            park_ms = (time.monotonic() - msg["sent"]) * 1000 if msg.get("sent") else 0.0
            h.parked.set()
            self._events.put(Parked(h.trial_id, msg["step"], park_ms, now, bool(msg.get("at_limit"))))
        elif kind == "resumed":
            with self._lock:
                in_place = h.moves_in_place > 0
                if in_place:
                    h.moves_in_place -= 1
                    if h.state != "parked":
                        return  # a move without a park: announced when it was made
                    # It parked itself (at its step limit) before the move reached it, and the move's
                    # message resumed it: it computes again, on the devices of the move.
                    h.state = "running"
                    h.run_since = time.monotonic()
                    h.parked.clear()
            resume_ms = (time.monotonic() - msg["sent"]) * 1000 if msg.get("sent") else 0.0
            self._events.put(Resumed(h.trial_id, h.devices, resume_ms, h.migrating, now))
        elif kind == "checkpointed":
            self._events.put(Checkpointed(h.trial_id, msg["step"], msg["path"], msg["at"]))
        elif kind == "forked":
            h.forks.discard(msg["into"])
            self._events.put(Forked(h.trial_id, msg["into"], msg["step"], msg["at"], msg.get("error")))
        elif kind == "adopted":
            with self._lock:
                h.adopting = False
                if msg.get("error") is None:
                    h.steps = msg["step"]
            committed = bool(msg.get("committed"))
            self._events.put(Adopted(h.trial_id, msg["step"], msg["at"], msg.get("error"), committed=committed))
        elif kind == "configured":
            self._events.put(Configured(h.trial_id, msg["step"], dict(msg["values"]), msg["at"]))
        elif kind == "done":
            h.done = msg
            h.steps = msg["steps"]

    # ---- ends ----------------------------------------------------------------------------------

    def _on_lost(self, conn: Connection) -> None:
        h = self._handle_of(conn)
        if h is None:
            return
        h.accrue()
        if h.done is not None:
            self._finish(h, h.done["status"], h.done.get("error"))
        else:
            h.lost_at = time.monotonic()  # wait briefly for the template to tell how it died

    def _expire_lost(self) -> None:
        with self._lock:
            lost = [h for h in self._handles.values() if h.lost_at is not None and h.state != "exited"]
        for h in lost:
            if h.over_memory:  # not a crash to restart from: it would grow past the limit again
                self._finish(h, "failed", h.over_memory)
                continue
            if h.exit_info is None and time.monotonic() - (h.lost_at or 0) < 2.0:
                continue
            info = h.exit_info or {}
            if info.get("signal"):
                sig = info["signal"]
                error = f"trial process died: signal {sig} {_SIGNALS.get(sig, '')}".strip()
            elif info.get("code") == 3:
                error = "trial process lost its controller connection"
            elif info:
                error = f"trial process exited with code {info.get('code')} without finishing"
            else:
                error = "trial process disappeared (connection closed without a final status)"
            self._finish(h, "crashed", error)

    def _finish(self, h: TrialHandle, status: str, error: str | None) -> None:
        with self._lock:
            if h.state == "exited":
                return
            h.accrue()
            h.state = "exited"
            h.lost_at = None
            h.parked.set()  # release an apply() waiting for it to park
            waiting, h.forks = sorted(h.forks), set()
            adopting, h.adopting = h.adopting, False
        if adopting:  # asked to adopt and ended before it answered: its checkpoint file is what is left
            why = f"trial {h.trial_id} ended ({status}) before it adopted the state"
            self._events.put(Adopted(h.trial_id, h.steps, time.time(), why, gone=True))
        for into in waiting:  # asked for its state and ended before it took it: its checkpoint is what is left
            why = f"trial {h.trial_id} ended ({status}) before its state was taken"
            self._events.put(Forked(h.trial_id, into, h.steps, time.time(), why, gone=True))
        self._events.put(Exited(h.trial_id, status, h.steps, error, time.time(), h.elastic, h.device_seconds))
