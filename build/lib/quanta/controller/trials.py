"""`TrialIndex`: every trial the controller holds, the alive ones in arrival order, and what changed
about them since the last snapshot.

Contract: `add` indexes a trial (alive unless final); `finalized` takes a trial out of the alive set;
`touch` notes that something about a trial changed (an event, an action). The snapshot builder alone
consumes the change log (`take_changes`). Alive trials stay in arrival order (created_at, id) as long as
they are indexed in that order, which they are unless a restart reloads them otherwise; the snapshot
then tells the policy it may skip its sort (`in_arrival_order`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from quanta.controller.state import TrialState


@dataclass
class Changes:
    """What happened to trials since the last snapshot: `touched` (an event or an action), `added`
    (indexed, in order) and `gone` (finalised, their views and pair rates are dropped)."""

    touched: set[int]
    added: list[int]
    gone: list[int]


class TrialIndex:
    def __init__(self) -> None:
        self.by_id: dict[int, TrialState] = {}  # every trial of active searches, and every job
        self.alive: dict[int, TrialState] = {}  # not final, in the order they were indexed
        self.in_arrival_order = True
        self._last_key: tuple[float, int] = (-math.inf, -1)
        self._touched: set[int] = set()
        self._added: list[int] = []
        self._gone: list[int] = []

    def get(self, trial_id: int) -> TrialState | None:
        return self.by_id.get(trial_id)

    def add(self, ts: TrialState) -> None:
        self.by_id[ts.id] = ts
        if not ts.status.final:
            key = (ts.created_at, ts.id)
            if self.alive and self.in_arrival_order and key < self._last_key:
                self.in_arrival_order = False  # from now on snapshots let the policy sort
            self._last_key = max(self._last_key, key)
            self.alive[ts.id] = ts
            self._touched.add(ts.id)
            self._added.append(ts.id)

    def touch(self, trial_id: int) -> None:
        self._touched.add(trial_id)

    def finalized(self, ts: TrialState) -> None:
        """`ts` has just become final: it is no longer alive and never reaches a snapshot again."""
        self.alive.pop(ts.id, None)
        self._gone.append(ts.id)

    def forget(self, trial_ids: Iterable[int]) -> None:
        """Drop trials whose rows were deleted (a deleted search's)."""
        for tid in trial_ids:
            self.by_id.pop(tid, None)

    def take_changes(self) -> Changes:
        """The change log since the last call, which starts a new one."""
        changes = Changes(self._touched, self._added, self._gone)
        self._touched, self._added, self._gone = set(), [], []
        return changes
