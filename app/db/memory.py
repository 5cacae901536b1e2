"""`MemoryStore`: the `Store` interface kept in process memory, for the simulator and tests.

Same methods, signatures and return shapes as `quanta.db.store.Store` (the SQLModel row classes,
constructed without a session), but no database: every call is a dict or list operation, so a
simulated trace of 15,000 jobs does not pay for a transaction per fact. `tests/unit/test_store_contract.py`
runs the same assertions against both.

Differences that do not change what callers see:
- rows are returned by reference (the SQL store returns detached copies); callers must not mutate them;
- `save_policy_state` keeps the value it is given and does the JSON round trip (tuples become lists)
  when it is read back, not when it is written: the controller writes it every plan and reads it once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from quanta.db.errors import Conflict
from quanta.db.models import (
    FIRST_ADMIN,
    ClusterView,
    ConfigChangeRow,
    ForkRow,
    IntentRow,
    LatencyRow,
    PairRow,
    QuantumRow,
    ReportRow,
    SearchRow,
    TrialRow,
    UserRow,
)
from quanta.db.protocol import PolicyRecord, TrialFigures
from quanta.db.reports import Key, merge_report, report_key
from quanta.db.users import checked_new, checked_update, name_taken, taken_message
from quanta.status import SearchStatus, TrialStatus

_MEASUREMENTS = (ReportRow, QuantumRow, LatencyRow, PairRow)


class MemoryStore:
    """In-memory `Store`. `keep_measurements=False` drops quantum/latency/pair rows (the simulator's
    bulk facts) after counting them, for runs where only the trials' final figures matter; the
    controller, seeing that attribute, does not build those rows at all."""

    url = "memory://"

    def __init__(self, *, keep_measurements: bool = True):
        self.keep_measurements = keep_measurements
        self._searches: dict[int, SearchRow] = {}
        self._trials: dict[int, TrialRow] = {}
        self._trials_by_search: dict[int, list[TrialRow]] = {}
        self._trial_commands: set[int] = set()
        self._rows: dict[type, list[Any]] = {cls: [] for cls in _MEASUREMENTS}
        self._report_keys: dict[Key, ReportRow] = {}  # one report per (trial, step, attempt), as `Store`
        self._ids: dict[type, int] = {cls: 0 for cls in (*_MEASUREMENTS, SearchRow, TrialRow, IntentRow, UserRow)}
        self._users: dict[str, UserRow] = {}
        self.counts: dict[str, int] = {cls.__name__: 0 for cls in _MEASUREMENTS}
        self._intents: list[IntentRow] = []
        self._round_no = 0
        self._policy_state: Mapping[str, Any] = {}
        self._judge_state: Mapping[str, Any] = {}
        self._cluster_view: ClusterView | None = None
        self.add_user(FIRST_ADMIN, 0.0, role="admin")
        self._warm: dict[int, list[dict[str, Any]]] = {}
        self._forks: dict[int, ForkRow] = {}
        self._changes: list[ConfigChangeRow] = []

    def _next_id(self, cls: type) -> int:
        self._ids.setdefault(cls, 0)
        self._ids[cls] += 1
        return self._ids[cls]

    # ---- searches ------------------------------------------------------------------------------

    def create_search(
        self, name: str, spec: dict[str, Any], at: float, owner: str = FIRST_ADMIN, *, owner_id: int | None = None
    ) -> SearchRow:
        search_id = self._next_id(SearchRow)
        if owner_id is None and owner in self._users:
            owner_id = self._users[owner].id
        row = SearchRow(id=search_id, name=name, spec=spec, status=SearchStatus.QUEUED, created_at=at)
        row.owner, row.owner_id = owner, owner_id
        self._searches[search_id] = row
        return row

    def search(self, search_id: int) -> SearchRow | None:
        return self._searches.get(search_id)

    def searches(self, statuses: Sequence[str] | None = None) -> list[SearchRow]:
        rows = [self._searches[i] for i in sorted(self._searches)]
        return [r for r in rows if r.status in statuses] if statuses else rows

    def update_search(self, search_id: int, **fields: Any) -> SearchRow:
        row = self._searches.get(search_id)
        if row is None:
            raise KeyError(f"search {search_id} not found")
        for k, v in fields.items():
            setattr(row, k, v)
        return row

    def claim_search(self, search_id: int, at: float) -> bool:
        row = self._searches.get(search_id)
        if row is None or row.status != SearchStatus.QUEUED:
            return False
        row.status, row.started_at, row.command = SearchStatus.RUNNING, at, None
        return True

    def searches_needing_controller(self) -> list[SearchRow]:
        if not self._searches:
            return []
        return [
            self._searches[i]
            for i in sorted(self._searches)
            if self._searches[i].status == SearchStatus.QUEUED or self._searches[i].command is not None
        ]

    def trials_with_commands(self) -> list[TrialRow]:
        if not self._trial_commands:
            return []
        return [self._trials[i] for i in sorted(self._trial_commands)]

    # ---- users ---------------------------------------------------------------------------------

    def add_user(
        self,
        name: str,
        at: float,
        role: str = "member",
        weight: float = 1.0,
        max_alive_trials: int = 0,
        max_devices: int = 0,
    ) -> UserRow:
        data = checked_new(name, role, weight, max_alive_trials, max_devices)
        same = name_taken(name, self._users)
        if same is not None:
            raise Conflict(taken_message(name, same))
        row = UserRow(id=self._next_id(UserRow), **data, created_at=at)
        self._users[name] = row
        return row

    def user(self, name: str) -> UserRow | None:
        return self._users.get(name)

    def users(self) -> list[UserRow]:
        return sorted(self._users.values(), key=lambda u: u.id or 0)

    def update_user(self, name: str, **fields: Any) -> UserRow:
        values = checked_update(fields)
        if name == FIRST_ADMIN and values.get("role", "admin") != "admin":
            raise Conflict(f"user {name} is the first admin (QUANTA_TOKEN's user) and stays an admin")
        row = self._users.get(name)
        if row is None:
            raise KeyError(f"user {name} not found")
        for k, v in values.items():
            setattr(row, k, v)
        return row

    def user_weights(self) -> dict[str, float]:
        return {u.name: u.weight for u in self.users()}

    # ---- trials --------------------------------------------------------------------------------

    def add_trial(self, search_id: int, number: int, params: dict, vals: dict, at: float) -> TrialRow:
        trial_id = self._next_id(TrialRow)
        row = TrialRow(id=trial_id, search_id=search_id, number=number, params=params, vals=vals, created_at=at)
        self._trials[trial_id] = row
        self._trials_by_search.setdefault(search_id, []).append(row)
        search = self._searches.get(search_id)
        if search is not None:
            search.trials_created = max(search.trials_created, number + 1)
        return row

    def trial(self, trial_id: int) -> TrialRow | None:
        return self._trials.get(trial_id)

    def trials(self, search_id: int) -> list[TrialRow]:
        return sorted(self._trials_by_search.get(search_id, []), key=lambda r: r.number)

    def update_trial(self, trial_id: int, **fields: Any) -> None:
        row = self._trials.get(trial_id)
        if row is None:
            raise KeyError(f"trial {trial_id} not found")
        for k, v in fields.items():
            setattr(row, k, v)
        if "command" in fields:
            if fields["command"] is None:
                self._trial_commands.discard(trial_id)
            else:
                self._trial_commands.add(trial_id)

    # ---- measurements --------------------------------------------------------------------------

    def update_progress(self, rows: Sequence[tuple[int, int, float]]) -> None:
        for trial_id, steps, device_seconds in rows:
            row = self._trials.get(trial_id)
            if row is not None:
                row.steps, row.device_seconds = steps, device_seconds

    def add_rows(
        self,
        rows: Iterable[ReportRow | QuantumRow | LatencyRow | PairRow],
        trials: Sequence[TrialFigures] = (),
        searches: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> None:
        """As `Store.add_rows`: a report of a (trial, step, attempt) held already is merged into it."""
        for trial_id, metric, best, steps in trials:
            trial = self._trials.get(trial_id)
            if trial is not None:
                trial.metric, trial.best_metric, trial.steps = metric, best, steps
        for search_id, fields in (searches or {}).items():
            search = self._searches.get(search_id)
            if search is not None:
                for k, v in fields.items():
                    setattr(search, k, v)
        for row in rows:
            cls = type(row)
            self.counts[cls.__name__] += 1
            if not self.keep_measurements and cls is not ReportRow:
                continue
            if cls is ReportRow:
                assert isinstance(row, ReportRow)
                held = self._report_keys.get(report_key(row))
                if held is not None:
                    merge_report(held, row)
                    continue
                self._report_keys[report_key(row)] = row
            row.id = self._next_id(cls)
            self._rows[cls].append(row)

    def reports(self, trial_id: int) -> list[ReportRow]:
        return [r for r in self._rows[ReportRow] if r.trial_id == trial_id]

    def search_reports(self, search_id: int) -> list[ReportRow]:
        return [r for r in self._rows[ReportRow] if r.search_id == search_id]

    def quanta(self, search_id: int | None = None, trial_id: int | None = None) -> list[QuantumRow]:
        return [
            r
            for r in self._rows[QuantumRow]
            if (search_id is None or r.search_id == search_id) and (trial_id is None or r.trial_id == trial_id)
        ]

    def latencies(self, kind: str | None = None) -> list[LatencyRow]:
        return [r for r in self._rows[LatencyRow] if not kind or r.kind == kind]

    def pairs(self) -> list[PairRow]:
        return list(self._rows[PairRow])

    # ---- controller state ----------------------------------------------------------------------

    def record_intent(
        self, round_no: int, at: float, actions: list[dict[str, Any]], policy: PolicyRecord | None = None
    ) -> None:
        self._intents.append(IntentRow(id=self._next_id(IntentRow), round_no=round_no, at=at, actions=actions))
        self._round_no = round_no
        if policy is not None:
            self.save_policy_state(*policy)
        if not self.keep_measurements and len(self._intents) > 1:
            del self._intents[0]  # only the last intent is ever read back

    def last_intent(self) -> IntentRow | None:
        return self._intents[-1] if self._intents else None

    def round_no(self) -> int:
        return self._round_no

    def save_round_no(self, round_no: int) -> None:
        self._round_no = round_no

    def policy_state(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._policy_state))

    def judge_state(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._judge_state))

    def save_policy_state(self, policy: str, state: Mapping[str, Any], judge: Mapping[str, Any] | None = None) -> None:
        self._policy_state = state
        self._judge_state = judge or {}

    def cluster_view(self) -> ClusterView | None:
        return self._cluster_view

    def publish_cluster_view(self, view: ClusterView) -> None:
        self._cluster_view = view

    # ---- warm start ----------------------------------------------------------------------------

    def save_warm_start(self, search_id: int, items: list[dict[str, Any]]) -> None:
        self._warm[search_id] = json.loads(json.dumps(items))  # a copy, as the SQL store keeps

    def warm_start(self, search_id: int) -> list[dict[str, Any]] | None:
        items = self._warm.get(search_id)
        return None if items is None else json.loads(json.dumps(items))

    # ---- forks and lineage (as `quanta.db.lineage.LineageQueries`) --------------------------------------

    def add_fork_request(
        self, parent_id: int, values: Mapping[str, Any], steps: int | None, at: float, requested_by: int | None = None
    ) -> ForkRow:
        parent = self._trials.get(parent_id)
        if parent is None:
            raise KeyError(f"trial {parent_id} not found")
        row = ForkRow(
            id=self._next_id(ForkRow),
            search_id=parent.search_id,
            parent_id=parent_id,
            values=dict(values),
            steps=steps,
            requested_at=at,
            requested_by=requested_by,
        )
        self._forks[row.id] = row  # type: ignore[index]  # just set
        return row

    def fork_requests(self, statuses: Sequence[str]) -> list[ForkRow]:
        return [self._forks[i] for i in sorted(self._forks) if self._forks[i].status in statuses]

    def start_fork(
        self, fork_id: int, number: int, params: dict[str, Any], vals: dict[str, Any], max_steps: int | None, at: float
    ) -> TrialRow:
        fork = self._forks.get(fork_id)
        if fork is None:
            raise KeyError(f"fork {fork_id} not found")
        row = self.add_trial(fork.search_id, number, params, vals, at)
        row.parent_id, row.max_steps = fork.parent_id, max_steps
        fork.child_id, fork.status = row.id, "copying"
        return row

    def finish_fork(self, fork_id: int, step: int, at: float, max_steps: int | None) -> None:
        fork = self._forks.get(fork_id)
        if fork is None or fork.child_id is None:
            raise KeyError(f"fork {fork_id} has no trial")
        child = self._trials[fork.child_id]
        child.fork_step = child.checkpoint_step = child.steps = step
        child.max_steps = max_steps
        fork.status, fork.finished_at = "done", at
        if fork.values:
            self._changes.append(
                ConfigChangeRow(
                    id=self._next_id(ConfigChangeRow),
                    search_id=fork.search_id,
                    trial_id=fork.child_id,
                    step=step,
                    at=at,
                    values=dict(fork.values),
                    cause="fork",
                    source_id=fork.parent_id,
                )
            )

    def fail_fork(self, fork_id: int, error: str, at: float) -> None:
        fork = self._forks.get(fork_id)
        if fork is None:
            return
        fork.status, fork.error, fork.finished_at = "failed", error[:2000], at
        child = self._trials.get(fork.child_id) if fork.child_id is not None else None
        if child is not None:
            child.status, child.error, child.finished_at = TrialStatus.FAILED, f"fork failed: {error}"[:2000], at

    def add_exploit(self, target_id: int, source_id: int, values: Mapping[str, Any], at: float) -> ForkRow:
        target = self._trials.get(target_id)
        if target is None:
            raise KeyError(f"trial {target_id} not found")
        row = ForkRow(
            id=self._next_id(ForkRow),
            search_id=target.search_id,
            parent_id=source_id,
            child_id=target_id,
            values=dict(values),
            status="exploit-staging",
            requested_at=at,
        )
        self._forks[row.id] = row  # type: ignore[index]  # just set
        return row

    def stage_exploit(self, fork_id: int, step: int) -> None:
        row = self._forks.get(fork_id)
        if row is None:
            raise KeyError(f"exploit {fork_id} not found")
        row.status, row.steps = "exploit-staged", step

    def finish_exploit(self, fork_id: int, params: dict[str, Any], at: float) -> None:
        row = self._forks.get(fork_id)
        if row is None or row.child_id is None or row.steps is None:
            raise KeyError(f"exploit {fork_id} is not staged")
        self.record_config_change(
            row.child_id, row.steps, at, row.values or {}, params, "exploit", source_id=row.parent_id, restored=True
        )
        row.status, row.finished_at = "exploited", at

    def abandon_exploit(self, fork_id: int, error: str, at: float) -> None:
        row = self._forks.get(fork_id)
        if row is not None:
            row.status, row.error, row.finished_at = "exploit-abandoned", error[:2000], at

    def record_config_change(
        self,
        trial_id: int,
        step: int,
        at: float,
        values: Mapping[str, Any],
        params: dict[str, Any],
        cause: str = "set",
        source_id: int | None = None,
        restored: bool = False,
    ) -> None:
        trial = self._trials.get(trial_id)
        if trial is None:
            raise KeyError(f"trial {trial_id} not found")
        trial.params = params
        if restored:
            trial.steps = trial.checkpoint_step = step
        self._changes.append(
            ConfigChangeRow(
                id=self._next_id(ConfigChangeRow),
                search_id=trial.search_id,
                trial_id=trial_id,
                step=step,
                at=at,
                values=dict(values),
                cause=cause,
                source_id=source_id,
            )
        )

    def config_changes(self, trial_id: int) -> list[ConfigChangeRow]:
        return [c for c in self._changes if c.trial_id == trial_id]
