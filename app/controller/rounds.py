"""`Rounds`: numbers the controller's rounds of actions and records each round's intent before the
runtime carries it out.

Contract: `record(now, actions, policy)` takes the next round number (rounds never repeat, across
restarts too: the counter is persisted), stores the round's actions as intent (with the policy's state
when given, in the same write) and returns the number, which the caller passes to `Runtime.apply`. A
round is recorded before it is applied, so after a crash the store says what was asked even if the
runtime never did it.
"""

from __future__ import annotations

from collections.abc import Sequence

from quanta.db.protocol import ControllerStore, PolicyRecord
from quanta.executor.actions import Action


class Rounds:
    def __init__(self, store: ControllerStore) -> None:
        self._store = store
        self.round_no = store.round_no()

    def record(self, now: float, actions: Sequence[Action], policy: PolicyRecord | None = None) -> int:
        self.round_no += 1
        self._store.record_intent(self.round_no, now, [a.to_dict() for a in actions], policy)  # the number too
        return self.round_no
