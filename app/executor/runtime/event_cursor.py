"""`EventCursor`: how far the controller has read each node's event rows, kept so that no event is lost
and none is taken twice when the controller dies or cannot store a batch.

Contract (used by `CeleryRuntime` only):
- `position` is what to read after (`ClusterView.events_since`); `advance` moves it past each row read.
- Two marks are persisted through the `ClusterView`: "handled" (every event the controller has finished
  with) and "returned" (the last batch handed over). `returned()` is called when a batch goes to the
  controller, `ack()` when the controller asks for the next one (so it handled the last).
- A runtime started over a saved cursor reads again from "handled": the rows between "handled" and
  "returned" may have been stored by a controller that died while handling them, so they are
  `uncertain`, and the caller skips their reports that are already stored. `redeliver()` makes the
  same window uncertain and reads it again within one runtime (the batch was not stored).
- Saving is best effort: a failed save keeps the previous marks, which only widens the window read again.
"""

from __future__ import annotations

import contextlib

from quanta.executor.runtime.cluster import ClusterView


class EventCursor:
    def __init__(self, cluster: ClusterView):
        self._cluster = cluster
        saved = cluster.load_cursor()
        self._handled: dict[str, int] = dict(saved.get("handled", {}))
        returned: dict[str, int] = dict(saved.get("returned", {}))
        # Events after "handled" may not have been stored by a controller that died while handling them:
        # read them again, and skip the reports of that window that were stored.
        self._uncertain = {n: (self._handled.get(n, 0), s) for n, s in returned.items() if s > self._handled.get(n, 0)}
        self.position: dict[str, int] = dict(self._handled)
        self._returned = dict(self._handled)

    def advance(self, node: str, seq: int) -> None:
        self.position[node] = max(self.position.get(node, 0), seq)

    def uncertain(self, node: str, seq: int) -> bool:
        """Whether row `seq` of `node` may already have been handled (its reports may be stored)."""
        lo, hi = self._uncertain.get(node, (0, 0))
        return lo < seq <= hi

    def returned(self) -> None:
        """Everything read so far is handed to the controller as one batch."""
        self._returned = dict(self.position)
        self._save()

    def ack(self) -> None:
        """The controller handles each batch before it polls again (or calls `redeliver`): everything
        returned is handled."""
        if self._handled != self._returned:
            self._handled = dict(self._returned)
            self._save()

    def redeliver(self) -> None:
        """The last batch was not handled durably: read it again from the "handled" mark on the next
        poll, skipping its reports that did get stored (as after a controller restart)."""
        if self._handled == self._returned:
            return
        for n, s in self._returned.items():
            lo = self._handled.get(n, 0)
            if s > lo:
                prev = self._uncertain.get(n)
                self._uncertain[n] = (min(lo, prev[0]) if prev else lo, max(s, prev[1]) if prev else s)
        # The stored cursor keeps "returned" as it is: a runtime restarted now skips the same reports.
        self.position = dict(self._handled)
        self._returned = dict(self._handled)

    def _save(self) -> None:
        with contextlib.suppress(Exception):
            self._cluster.save_cursor({"handled": self._handled, "returned": self._returned})
