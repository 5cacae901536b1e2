"""`PolicyChoice`: which policy plans for the cluster, with which quantum, and the state it carries
from one plan to the next.

Contract: `current(governing)` is the fixed policy if one was given, else the policy the governing
search's spec names (one instance per policy name, built on first use), else None; `quantum(governing)`
likewise (1 s when no search governs). `state` is the policy state the next snapshot carries and
`judge_state` the judge's (both restored from the store after a restart); `remember(policy, plan,
judge_state)` keeps and stores both, in one write.
"""

from __future__ import annotations

from typing import Any

from app.controller.state import SearchState
from app.db.protocol import ControllerStore
from app.executor.policy import policy_for
from app.executor.policy.types import Plan, Policy


class PolicyChoice:
    def __init__(self, store: ControllerStore, policy: Policy | None, quantum_s: float | None):
        self._store = store
        self._fixed_policy = policy
        self._fixed_quantum = quantum_s
        self._policies: dict[str, Policy] = {}
        self.state: dict[str, Any] = store.policy_state()
        self.judge_state: dict[str, Any] = store.judge_state()
        self.last: Policy | None = policy  # the policy of the last plan (the tick sets it)

    def current(self, governing: SearchState | None) -> Policy | None:
        if self._fixed_policy is not None:
            return self._fixed_policy
        if governing is None:
            return None
        name = governing.spec.scheduler.policy
        if name not in self._policies:
            self._policies[name] = policy_for(governing.spec.scheduler)
        return self._policies[name]

    def quantum(self, governing: SearchState | None) -> float:
        if self._fixed_quantum is not None:
            return self._fixed_quantum
        return governing.spec.scheduler.quantum_s if governing else 1.0

    def remember(self, policy: Policy, plan: Plan, judge_state: dict[str, Any]) -> None:
        self.state = dict(plan.state)
        self.judge_state = judge_state
        self._store.save_policy_state(policy.name, self.state, judge=judge_state)
