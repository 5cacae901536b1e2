"""`TrialExits`: the exits of a node's trial processes, and why the node itself ended any of them.

Contract (used by `NodeAgent`: its pump thread takes the exits, the task threads wait for them):
- `ending(tid, why)` records that the node is ending the trial's process for a reason of its own
  ("handoff": a cross-node move, "stale": the trial was assigned again elsewhere, "lease": the node lost
  its heartbeat) and returns an event that is set when that process's exit is taken, or set already
  when its exit was taken since it started (`forget`): no other exit is to come, and the reason is
  dropped. `mark(tid, why)` records the reason without waiting. `fenced(tid)`: such an end is under way.
- `took(tid, status)` is called for every `Exited` the pump takes: it returns the node's reason for
  that end (None: the process ended by itself or by the controller's order), wakes whoever waits for
  it, and keeps its status, so that a question asked just after the exit still gets its answer
  (`status`, `recent`), until `prune` drops it a minute later or `forget` (a new process starts).
"""

from __future__ import annotations

import threading
import time

_KEEP_S = 60.0  # how long a taken exit answers `status` and `recent`


class TrialExits:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._why: dict[int, str] = {}  # trial -> why this node ends it: handoff | stale | lease
        self._waiters: dict[int, list[threading.Event]] = {}
        self._seen: dict[int, tuple[float, str]] = {}  # trial -> when its Exited was taken (monotonic), its status

    def mark(self, tid: int, why: str) -> None:
        with self._lock:
            self._why[tid] = why

    def ending(self, tid: int, why: str) -> threading.Event:
        waiter = threading.Event()
        with self._lock:
            if tid in self._seen:
                # Its process ended and the exit was taken after the caller saw it resident (two ends of
                # one process, e.g. the fence check's and a stale run's): waiting would last the whole
                # timeout, with the node's apply lock held.
                self._why.pop(tid, None)
                waiter.set()
                return waiter
            self._why[tid] = why
            self._waiters.setdefault(tid, []).append(waiter)
        return waiter

    def fenced(self, tid: int) -> bool:
        return tid in self._why

    def took(self, tid: int, status: str) -> str | None:
        with self._lock:
            why = self._why.pop(tid, None)
            waiters = self._waiters.pop(tid, [])
            self._seen[tid] = (time.monotonic(), status)
        for w in waiters:
            w.set()
        return why

    def status(self, tid: int, wait_s: float) -> str | None:
        """The status trial `tid`'s process last ended with (None: none seen), waiting up to `wait_s` for
        an exit the runtime has seen and the pump has not taken yet."""
        waiter = threading.Event()
        with self._lock:
            if tid in self._seen:
                return self._seen[tid][1]
            self._waiters.setdefault(tid, []).append(waiter)
        waiter.wait(wait_s)
        with self._lock:
            waiting = self._waiters.get(tid, [])
            if waiter in waiting:
                waiting.remove(waiter)
            seen = self._seen.get(tid)
        return seen[1] if seen is not None else None

    def recent(self, tid: int) -> bool:
        return tid in self._seen

    def forget(self, tid: int) -> None:
        with self._lock:
            self._seen.pop(tid, None)

    def prune(self) -> None:
        now = time.monotonic()
        with self._lock:
            self._seen = {t: x for t, x in self._seen.items() if now - x[0] < _KEEP_S}
