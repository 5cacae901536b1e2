"""`PolicyChoice`: which policy plans for the cluster, with which quantum, and the state it carries
from one plan to the next.

Contract: `current(governing)` is the fixed policy if one was given, else (some search is running) the
share layer (`quanta.executor.policy.share.SharePolicy`), which divides device time between users and
their running searches and lets each search's own policy (the one its spec names, one instance per
distinct scheduler block, built on first use) plan inside its share; trials outside any search are
planned by the governing search's policy. None when no search governs and none is fixed.
`quantum(governing)` is the fixed quantum, else the governing (oldest running) search's (1 s when no
search governs). `state` is the policy state the next snapshot carries and `judge_state` the judge's
(both restored from the store after a restart); `remember(policy, plan, judge_state)` keeps both, and
when either changed they are to be stored: with the round's intent (`take_unsaved`, the tick's
`Rounds.record`) or, for a plan with no actions, by `save()`. With the share layer each search's policy
state and the judge's state of its trials live inside the share layer's state (`Plan.state["groups"]`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from quanta.controller.state import SearchState
from quanta.db.protocol import ControllerStore, PolicyRecord
from quanta.executor.policy import policy_for
from quanta.executor.policy.knobs import PolicyKnobs, ShareKnobs
from quanta.executor.policy.share import SharePolicy
from quanta.executor.policy.types import Plan, Policy


class PolicyChoice:
    def __init__(
        self,
        store: ControllerStore,
        policy: Policy | None,
        quantum_s: float | None,
        searches: Mapping[int, SearchState] | None = None,
        share: ShareKnobs | None = None,
    ):
        self._store = store
        self._fixed_policy = policy
        self._fixed_quantum = quantum_s
        self._searches: Mapping[int, SearchState] = searches if searches is not None else {}
        self._policies: dict[str, Policy] = {}  # by scheduler block (JSON): searches alike share one
        self._share: SharePolicy | None = None
        self._share_knobs = share
        self.state: dict[str, Any] = store.policy_state()
        self.judge_state: dict[str, Any] = store.judge_state()
        self.last: Policy | None = policy  # the policy of the last plan (the tick sets it)
        self._saved: tuple[str, str, str] | None = None  # what `remember` last kept to store
        self._unsaved: PolicyRecord | None = None  # kept by `remember`, not stored yet

    def current(self, governing: SearchState | None) -> Policy | None:
        if self._fixed_policy is not None:
            return self._fixed_policy
        if governing is None:
            return None
        base = self._policy(governing.spec.scheduler)
        if self._share is None:
            self._share = SharePolicy(base, self._share_knobs, self._policy_of)
        self._share.base = base
        return self._share

    def _policy(self, knobs: PolicyKnobs) -> Policy:
        key = knobs.model_dump_json()
        if key not in self._policies:
            self._policies[key] = policy_for(knobs)
        return self._policies[key]

    def _policy_of(self, search_id: int) -> Policy | None:
        """The policy search `search_id`'s spec names (None for a search not held)."""
        s = self._searches.get(search_id)
        return self._policy(s.spec.scheduler) if s is not None else None

    def quantum(self, governing: SearchState | None) -> float:
        if self._fixed_quantum is not None:
            return self._fixed_quantum
        return governing.spec.scheduler.quantum_s if governing else 1.0

    def remember(self, policy: Policy, plan: Plan, judge_state: dict[str, Any]) -> None:
        self.state = dict(plan.state)
        self.judge_state = judge_state
        # Written only when it changed: most plans of a busy search carry the state of the one before.
        saved = (policy.name, json.dumps(self.state), json.dumps(judge_state))
        if saved != self._saved:
            self._unsaved = (policy.name, self.state, judge_state)
            self._saved = saved

    def take_unsaved(self) -> PolicyRecord | None:
        """The state `remember` kept and nothing stored yet (None: none); the caller stores it."""
        unsaved, self._unsaved = self._unsaved, None
        return unsaved

    def save(self) -> None:
        """Store the state `remember` kept, if nothing has stored it yet."""
        unsaved = self.take_unsaved()
        if unsaved is not None:
            self._store.save_policy_state(unsaved[0], unsaved[1], judge=unsaved[2])
