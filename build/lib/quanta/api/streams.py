"""Caps on concurrent `/events` streams: each open stream holds a slot, per token and in all, so one
client (or one leaked token) cannot hold every connection and worker thread of the server. A request
beyond a cap gets 429 at once. Slots are counted in this process (one `quanta serve`)."""

from __future__ import annotations

import hashlib
import threading
from collections import Counter


class StreamSlots:
    """Counts open streams per token and in all; `take` and `give_back` are thread-safe."""

    def __init__(self, total: int, per_token: int):
        self.total = total
        self.per_token = per_token
        self._lock = threading.Lock()
        self._open: Counter[str] = Counter()

    @staticmethod
    def key(token: str | None) -> str:
        """The token's key (its digest: the token itself is not kept)."""
        return hashlib.sha256((token or "").encode()).hexdigest()[:16]

    def take(self, key: str) -> str | None:
        """Hold a slot for `key`; None when taken, else why not (for the 429)."""
        with self._lock:
            if sum(self._open.values()) >= self.total:
                return f"too many open event streams (at most {self.total} in all)"
            if self._open[key] >= self.per_token:
                return f"too many open event streams for this token (at most {self.per_token})"
            self._open[key] += 1
            return None

    def give_back(self, key: str) -> None:
        with self._lock:
            self._open[key] -= 1
            if self._open[key] <= 0:
                del self._open[key]

    def open(self) -> int:
        with self._lock:
            return sum(self._open.values())
