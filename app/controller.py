"""The controller: one tick = sync searches -> snapshot -> policy.plan -> reconcile -> record intent ->
runtime.apply; between ticks it turns runtime events into stored facts.

It holds a working copy of the active searches in memory (a cache: `load()` rebuilds it from the
store after a restart) and writes every fact through to the store. It knows nothing about which
runtime it drives (local processes, Celery nodes or the simulator's virtual clock).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.db.launch import search_launch
from app.db.models import ClusterView, DevicePlacement, LatencyRow, PairRates, PairRow, QuantumRow, ReportRow
from app.db.protocol import ControllerStore
from app.executor.actions import (
    Checkpointed,
    Event,
    Exited,
    Parked,
    Profiled,
    Reported,
    Residency,
    Resumed,
    Run,
    Started,
    Stop,
)
from app.executor.policy import policy_for
from app.executor.policy.knobs import MECHANISM
from app.executor.policy.types import (
    ARRIVAL_ORDER,
    ClusterSnapshot,
    Placement,
    Plan,
    Policy,
    SearchView,
    TrialStatus,
    TrialView,
)
from app.executor.reconcile import reconcile
from app.executor.runtime.base import Runtime, TrialLaunch
from app.search.searcher import HistoryItem, Searcher, make_searcher
from app.spec import SearchSpec, spec_from_stored

log = logging.getLogger("quanta.controller")

_EMA = 0.5  # weight of the newest rate sample in the running estimate


@dataclass
class TrialState:
    id: int
    search_id: int
    number: int
    params: dict[str, Any]
    vals: dict[str, Any]
    created_at: float
    status: TrialStatus = TrialStatus.QUEUED
    steps: int = 0
    metric: float | None = None
    best: float | None = None
    curve: list[tuple[int, float]] = field(default_factory=list)
    device_seconds_base: float = 0.0  # device time of earlier processes (before a restart)
    device_seconds: float = 0.0
    retries: int = 0
    resume: bool = False
    started_at: float | None = None
    finished_at: float | None = None
    rate_solo: float | None = None
    rate_packed: float | None = None
    memory_mb: float | None = None
    elastic: bool = False
    error: str | None = None
    devices: tuple[str, ...] = ()
    devices_needed: int = 1
    max_steps: int = 0
    kind: str = ""  # job type for trace jobs (simulator); empty for search trials
    trainable: str | None = None  # trace jobs run for real: their own trainable and config
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class SearchState:
    id: int
    spec: SearchSpec
    searcher: Searcher
    started_at: float
    status: str = "running"
    trials: dict[int, TrialState] = field(default_factory=dict)
    created: int = 0
    best_trial: int | None = None
    best: float | None = None
    reached_at: float | None = None

    def alive(self) -> list[TrialState]:
        return [t for t in self.trials.values() if not t.status.final]


class Controller:
    """Drives one runtime for all active searches (and trace jobs). Not thread-safe: call it from one
    thread. `policy`/`quantum_s` override the governing search's scheduler (the simulator sets them);
    otherwise the oldest running search's spec chooses the cluster's policy."""

    def __init__(
        self,
        store: ControllerStore,
        runtime: Runtime,
        *,
        workdir: str | Path = ".quanta",
        policy: Policy | None = None,
        quantum_s: float | None = None,
    ):
        self.store = store
        self.runtime = runtime
        self.workdir = Path(workdir)
        self.searches: dict[int, SearchState] = {}
        self.trials: dict[int, TrialState] = {}  # every trial of active searches, and every job
        self._alive: dict[int, TrialState] = {}
        self._fixed_policy = policy
        self._last_policy: Policy | None = policy
        self._fixed_quantum = quantum_s
        self._policies: dict[str, Policy] = {}
        self._policy_state: dict[str, Any] = store.policy_state()
        self.round_no = store.round_no()
        self._last_tick: float | None = None
        self._last_plan_at: float | None = None
        self._replan = True  # plan at the next tick even if the quantum has not passed
        self._wake = False
        self._pending_rows: list[Any] = []
        self._pair_latest: dict[tuple[int, int], float] = {}
        self.last_plan: Plan | None = None
        # How long one poll may block (seconds of the runtime's clock). The simulator lifts the cap.
        self.poll_cap_s = 0.5
        # Republish the cluster view at most this often (0 = every tick); the simulator has no viewer.
        self.publish_every_s = 0.0
        self._published_at = -math.inf
        # Reuse a trial's TrialView between snapshots while nothing about it changed (no event, no
        # action, not resident). Off by default; the simulator turns it on for clusters of thousands.
        self.cache_views = False
        self._views: dict[int, TrialView] = {}
        self._snapshot_residency: dict[int, Residency] = {}  # what the last snapshot saw
        self._keep_rows = store.keep_measurements
        # _alive is in arrival order (created_at, id) while trials are indexed in that order, which
        # they are unless a restart reloads them otherwise; snapshots then skip the policy's sort.
        self._alive_ordered = True
        self._alive_last: tuple[float, int] = (-math.inf, -1)
        self._dirty: set[int] = set()
        self._was_resident: set[int] = set()
        self._pair_keys: dict[int, set[tuple[int, int]]] = {}  # trial -> its keys in _pair_latest
        self._gone: list[int] = []  # trials finalised since the last snapshot (their pairs are dropped)

    # ---- searches ------------------------------------------------------------------------------

    def submit(self, spec: SearchSpec) -> int:
        """Persist a validated spec as a new search and start it. Returns the search id."""
        now = self.runtime.now()
        row = self.store.create_search(spec.name, spec.model_dump(mode="json"), now)
        assert row.id is not None
        self.store.update_search(row.id, status="running", started_at=now)
        self._activate(row.id, spec, now, history=[])
        return row.id

    def _activate(self, search_id: int, spec: SearchSpec, started_at: float, history: list[HistoryItem]) -> SearchState:
        state = SearchState(search_id, spec, make_searcher(spec, history), started_at)
        self.searches[search_id] = state
        self.runtime.warm([spec.module])
        self._wake = True
        return state

    def load(self) -> None:
        """Rebuild the working set from the store (after a restart): active searches continue, their
        searchers are rebuilt from stored history, and trials that were resident restart from their
        checkpoints (their processes died with the previous controller) unless the runtime still
        holds them (node agents outlive a controller in distributed mode)."""
        # Queued searches are left to _sync_store, which starts them like new ones.
        for row in self.store.searches(("running", "paused")):
            assert row.id is not None
            spec = spec_from_stored(row.spec)
            trials = self.store.trials(row.id)
            history = [
                HistoryItem(
                    t.number, t.vals, None if not _final(t.status) else _loss(spec, t.metric), t.status != "failed"
                )
                for t in trials
            ]
            s = self._activate(row.id, spec, row.started_at or row.created_at, history)
            s.status = row.status
            s.created = max([t.number + 1 for t in trials], default=0)
            s.best_trial, s.best, s.reached_at = row.best_trial_id, row.best_metric, row.reached_at
            resident = self.runtime.residency()
            for t in trials:
                assert t.id is not None
                ts = TrialState(t.id, row.id, t.number, t.params, t.vals, t.created_at, TrialStatus(t.status))
                ts.steps, ts.metric, ts.best, ts.retries = t.steps, t.metric, t.best_metric, t.retries
                ts.device_seconds_base = ts.device_seconds = t.device_seconds
                ts.started_at, ts.finished_at, ts.error = t.started_at, t.finished_at, t.error
                ts.curve = [(r.step, r.objective) for r in self.store.reports(t.id) if r.objective is not None]
                ts.resume = t.checkpoint_step is not None
                if ts.status == TrialStatus.RUNNING and t.id not in resident:
                    ts.status, ts.resume = TrialStatus.QUEUED, True
                    self.store.update_trial(t.id, status="queued")
                self._index(s, ts)

    def _index(self, s: SearchState | None, ts: TrialState) -> None:
        if s is not None:
            s.trials[ts.id] = ts
            ts.devices_needed = s.spec.resources.devices_per_trial
            ts.max_steps = s.spec.budget.max_steps
        self.trials[ts.id] = ts
        if not ts.status.final:
            key = (ts.created_at, ts.id)
            if self._alive and self._alive_ordered and key < self._alive_last:
                self._alive_ordered = False  # from now on snapshots let the policy sort
            self._alive_last = max(self._alive_last, key)
            self._alive[ts.id] = ts
            self._dirty.add(ts.id)
            if self.cache_views:
                self._views[ts.id] = None  # type: ignore[assignment]  # its place; the next snapshot fills it

    def add_job(
        self,
        kind: str,
        steps: int,
        devices_needed: int = 1,
        *,
        trainable: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> int:
        """Submit a job that is not part of a search (a trace job): it runs `steps` mini-batches on
        `devices_needed` devices and is placed by the same policy as search trials."""
        now = self.runtime.now()
        number = len(self.trials)
        row = self.store.add_trial(0, number, {"kind": kind}, {}, now)
        assert row.id is not None
        ts = TrialState(row.id, 0, number, {"kind": kind}, {}, now, kind=kind, trainable=trainable)
        ts.config = dict(config or {})
        self._index(None, ts)
        ts.devices_needed, ts.max_steps = devices_needed, steps
        self._wake = True
        return row.id

    def alive(self) -> list[TrialState]:
        return list(self._alive.values())

    def stop_search(self, search_id: int, status: str = "stopped", reason: str = "search stopped") -> None:
        s = self.searches.get(search_id)
        if s is None:
            return
        self._finish(s, status, reason)

    # ---- the tick ------------------------------------------------------------------------------

    def tick(self) -> Plan | None:
        now = self.runtime.now()
        self._last_tick = now
        woken = self._wake  # something changed since the last tick (a trial ended, a command, ...)
        self._wake = False
        self._sync_store(now)
        for s in list(self.searches.values()):
            self._sync(s, now)
        policy = self._policy()
        if policy is None:
            # No running search (e.g. the only one is paused): keep planning with the last policy so
            # resident trials of paused searches are parked.
            policy = self._last_policy
        if policy is None or (not self._alive and not self.runtime.residency()):
            return None
        # Ticks may come more often than quanta (the service ticks to pick up commands promptly): plan
        # again only when a quantum has passed or something changed, so quanta keep their length.
        quantum_due = self._last_plan_at is None or now - self._last_plan_at >= self._quantum() - 1e-3
        if not (quantum_due or woken or self._wake or self._replan or policy is not self._last_policy):
            return self.last_plan
        self._last_plan_at, self._replan = now, False
        self._last_policy = policy
        snapshot = self.snapshot(now)
        plan = policy.plan(snapshot)
        self._policy_state = dict(plan.state)
        self.store.save_policy_state(policy.name, self._policy_state)
        # Residency as the snapshot saw it (planning does not change it), trials we know only.
        residency: dict[int, tuple[str, ...]] = {}
        running: list[int] = []
        trials = self.trials
        for tid, r in self._snapshot_residency.items():
            if tid in trials:
                residency[tid] = r.devices
                if r.running:
                    running.append(tid)
        current = Placement(resident=residency, running=frozenset(running))
        for tid in plan.stop:  # queued trials are stopped here; resident ones by the runtime
            ts = self._trial(tid)
            if ts is not None and tid not in residency:
                self._final(ts, TrialStatus.KILLED, now, "stopped by policy")
        actions = [a for a in reconcile(current, plan) if self._trial(a.trial_id) is not None]
        for a in actions:
            if isinstance(a, Stop):
                ts = self._trial(a.trial_id)
                if ts is not None and not ts.status.final:
                    self._final(ts, TrialStatus.KILLED, now, "stopped by policy")
        self.last_plan = plan
        if now - self._published_at >= self.publish_every_s:
            self._published_at = now
            self._publish_cluster(snapshot, plan)
            # steps and device time of resident trials, so readers see them before the trial ends
            self.store.update_progress([(t.id, t.steps_done, t.device_seconds) for t in snapshot.trials if t.devices])
        if actions:
            self.round_no += 1
            self.store.record_intent(self.round_no, now, [a.to_dict() for a in actions])
            self.store.save_round_no(self.round_no)
            for a in actions:
                if isinstance(a, Run):
                    ts = self._trial(a.trial_id)
                    if ts is not None and ts.status == TrialStatus.QUEUED:
                        self._dirty.add(ts.id)
                        ts.status = TrialStatus.RUNNING
                        ts.started_at = ts.started_at or now
                        self.store.update_trial(ts.id, status="running", started_at=ts.started_at)
            self.runtime.apply(self.round_no, actions)
        return plan

    def _publish_cluster(self, snapshot: ClusterSnapshot, plan: Plan) -> None:
        """Store what runs where (read by the API's /cluster and the dashboard)."""
        resident = {t.id: t for t in snapshot.trials if t.devices}
        placed = plan.running()
        devices = tuple(
            DevicePlacement(
                d.id,
                d.node,
                d.kind,
                d.memory_mb,
                running=tuple(plan.placement.get(d.id, ())),
                parked=tuple(sorted(t.id for t in resident.values() if d.id in t.devices and t.id not in placed)),
            )
            for d in snapshot.devices
        )
        pairs = tuple(
            PairRates(
                a,
                b,
                ra,
                rb,
                solo_a=resident[a].rate_solo if a in resident else None,
                solo_b=resident[b].rate_solo if b in resident else None,
            )
            for (a, b), (ra, rb) in snapshot.pair_rates.items()
        )
        self.store.publish_cluster_view(ClusterView(snapshot.now, devices, pairs, tuple(plan.notes), self.round_no))

    def step(self, max_wait: float | None = None) -> None:
        """One tick, then handle events until the next tick is due (a quantum later, or sooner when
        a trial ends and frees a device)."""
        self.tick()
        quantum = self._quantum()
        due = (self._last_tick or self.runtime.now()) + (quantum if max_wait is None else min(quantum, max_wait))
        # Whatever woke us during the tick (new trials, stops) was planned in it already.
        self._wake = False
        while not self._wake and (self._alive or self._governing() is not None):
            timeout = due - self.runtime.now()
            if timeout <= 0:
                break
            self.handle(self.runtime.poll(min(timeout, self.poll_cap_s)))
        self.flush()

    def run(self, search_id: int, on_progress: Callable[[SearchState], None] | None = None) -> SearchState:
        """Tick until the search ends; returns its final state."""
        s = self.searches[search_id]
        while s.status == "running":
            self.step()
            if on_progress:
                on_progress(s)
        # Let stopping trials report their end so their rows are final.
        deadline = self.runtime.now() + 10
        while any(tid in self.trials for tid in self.runtime.residency()) and self.runtime.now() < deadline:
            self.handle(self.runtime.poll(0.2))
        self.flush()
        return s

    # ---- snapshot ------------------------------------------------------------------------------

    def _governing(self) -> SearchState | None:
        return next((s for s in self.searches.values() if s.status == "running"), None)

    def _policy(self) -> Policy | None:
        if self._fixed_policy is not None:
            return self._fixed_policy
        s = self._governing()
        if s is None:
            return None
        name = s.spec.scheduler.policy
        if name not in self._policies:
            self._policies[name] = policy_for(s.spec.scheduler)
        return self._policies[name]

    def _quantum(self) -> float:
        if self._fixed_quantum is not None:
            return self._fixed_quantum
        s = self._governing()
        return s.spec.scheduler.quantum_s if s else 1.0

    def snapshot(self, now: float) -> ClusterSnapshot:
        """The frozen view the policy plans on: alive trials (queued or resident) with their
        measured rates, device time and curves, plus devices and measured pair rates."""
        residency = self._snapshot_residency = self.runtime.residency()
        searches = tuple(
            SearchView(s.id, s.spec.metric.goal, s.spec.metric.target, s.spec.budget.max_steps)
            for s in self.searches.values()
            if s.status == "running"
        )
        paused = {s.id for s in self.searches.values() if s.status == "paused"}
        dirty = self._dirty | self._was_resident
        dirty.update(residency)
        self._dirty, self._was_resident = set(), set(residency)
        for tid in self._gone:  # finished trials never reach a snapshot again, nor do their pairs
            self._views.pop(tid, None)
            for k in self._pair_keys.pop(tid, ()):
                self._pair_latest.pop(k, None)
        self._gone.clear()
        if self.cache_views and not paused:
            # Incremental: one view per alive trial, in _alive's order, rebuilt only when something about
            # it changed (an event, an action, residency); the others are reused as they were.
            views = self._views
            if len(views) != len(self._alive) or next(reversed(views), None) != next(reversed(self._alive), None):
                # Trials arrived (or left without passing through _gone): re-key in _alive's order and
                # build views only for the new ones (rebuilding all of them made every arrival
                # O(alive trials) view constructions).
                self._views = views = {tid: views.get(tid) for tid in self._alive}  # type: ignore[misc]
                dirty.update(tid for tid, v in views.items() if v is None)
            for tid in dirty:
                t = self._alive.get(tid)
                if t is not None:
                    views[tid] = self._view(t, residency.get(tid), views.get(tid))
            trials = list(views.values())
            resident = [v for tid in residency if (v := views.get(tid)) is not None]
            resident.sort(key=ARRIVAL_ORDER)
            resident_trials: tuple[TrialView, ...] | None = tuple(resident)
        else:
            resident_trials = None
            self._views.clear()
            trials = [self._view(t, residency.get(t.id)) for t in self._alive.values() if t.search_id not in paused]
        alive_ids = {t.id for t in trials} if paused else self._alive
        pairs = {
            k: (self._pair_latest[k], self._pair_latest[(k[1], k[0])])
            for k in self._pair_latest
            if k[0] < k[1] and (k[1], k[0]) in self._pair_latest and k[0] in alive_ids and k[1] in alive_ids
        }
        return ClusterSnapshot(
            now=now,
            devices=tuple(self.runtime.devices()),  # the same object when the runtime returns a tuple
            trials=tuple(trials),
            searches=tuple(searches),
            pair_rates=pairs,
            policy_state=self._policy_state,
            quantum_s=self._quantum(),
            round_no=self.round_no,
            in_arrival_order=self._alive_ordered,
            resident_trials=resident_trials,
        )

    def _view(self, t: TrialState, r: Residency | None, old: TrialView | None = None) -> TrialView:
        if r is not None:
            t.device_seconds = t.device_seconds_base + r.device_seconds
            t.steps = max(t.steps, r.steps)
            t.elastic = t.elastic or r.elastic
            if (
                old is not None
                and old.running == r.running
                and old.devices == r.devices
                and old.status is t.status
                and old.rate_solo == t.rate_solo
                and old.rate_packed == t.rate_packed
                and old.memory_mb == t.memory_mb
                and old.elastic == t.elastic
                and len(old.curve) == len(t.curve)
            ):
                if old.steps_done == t.steps and old.device_seconds == t.device_seconds:
                    return old  # nothing changed (a parked trial): the frozen view is still true
                # A computing trial whose only news is its progress: copy the frozen view with the two
                # moving fields replaced (several times cheaper than building it; same value).
                view = object.__new__(TrialView)
                view.__dict__.update(old.__dict__, steps_done=t.steps, device_seconds=t.device_seconds)
                return view
        return TrialView(
            id=t.id,
            search_id=t.search_id,
            status=t.status,
            devices=tuple(sorted(r.devices)) if r else (),
            running=bool(r and r.running),
            devices_needed=t.devices_needed,
            arrival=t.created_at,
            steps_done=t.steps,
            max_steps=t.max_steps,
            device_seconds=t.device_seconds,
            rate_solo=t.rate_solo,
            rate_packed=t.rate_packed,
            memory_mb=t.memory_mb,
            curve=tuple(t.curve),
            elastic=t.elastic,
            kind=t.kind,
        )

    # ---- search bookkeeping --------------------------------------------------------------------

    def _sync_store(self, now: float) -> None:
        """Pick up what users asked through the database (the API writes rows, never calls us):
        new searches, stop/pause/resume of searches, stop of trials."""
        for row in self.store.searches_needing_controller():
            assert row.id is not None
            s = self.searches.get(row.id)
            if row.status == "queued" and s is None:
                try:
                    spec = spec_from_stored(row.spec)
                except ValueError as exc:
                    self.store.update_search(row.id, status="failed", error=str(exc), finished_at=now)
                    continue
                self.store.update_search(row.id, status="running", started_at=now, command=None)
                self._activate(row.id, spec, now, history=[])
                continue
            command = row.command
            self.store.update_search(row.id, command=None)
            if s is None or s.status not in ("running", "paused"):
                continue
            if command == "stop":
                self._finish(s, "stopped", "stopped by user")
            elif command == "pause" and s.status == "running":
                s.status = "paused"
                self.store.update_search(row.id, status="paused")
            elif command == "resume" and s.status == "paused":
                s.status = "running"
                self.store.update_search(row.id, status="running")
        for trow in self.store.trials_with_commands():
            assert trow.id is not None
            self.store.update_trial(trow.id, command=None)
            t = self._alive.get(trow.id)
            if t is not None and trow.command == "stop":
                self._stop_trials([t], "stopped by user")

    def _stop_trials(self, trials: list[TrialState], reason: str) -> None:
        now = self.runtime.now()
        resident = self.runtime.residency()
        stops = [Stop(t.id, reason) for t in trials if t.id in resident]
        for t in trials:
            self._final(t, TrialStatus.KILLED, now, reason)
        if stops:
            self.round_no += 1
            self.store.record_intent(self.round_no, now, [a.to_dict() for a in stops])
            self.store.save_round_no(self.round_no)  # rounds never repeat
            self.runtime.apply(self.round_no, stops)

    def _sync(self, s: SearchState, now: float) -> None:
        if s.status != "running":
            return
        spec = s.spec
        if s.reached_at is not None and spec.budget.stop_on_target:
            self._finish(s, "completed", "target reached")
            return
        if now - s.started_at >= spec.budget.max_seconds:
            self._finish(s, "completed", "time budget spent")
            return
        while len(s.alive()) < spec.parallelism and s.created < spec.budget.max_trials:
            self._new_trial(s, now)
        if s.created >= spec.budget.max_trials and not s.alive():
            self._finish(s, "completed", "all trials done")

    def _new_trial(self, s: SearchState, now: float) -> TrialState:
        number = s.created
        suggestion = s.searcher.ask(number)
        row = self.store.add_trial(s.id, number, suggestion.params, suggestion.vals, now)
        assert row.id is not None
        s.created = number + 1
        ts = TrialState(row.id, s.id, number, suggestion.params, suggestion.vals, now)
        self._index(s, ts)
        self._replan = True  # a new trial is placed now, not a quantum later
        return ts

    def _finish(self, s: SearchState, status: str, reason: str) -> None:
        now = self.runtime.now()
        s.status = status
        self._stop_trials(s.alive(), reason)
        self.store.update_search(s.id, status=status, finished_at=now)
        log.info("search %s %s: %s", s.id, status, reason)

    def _trial(self, trial_id: int) -> TrialState | None:
        return self.trials.get(trial_id)

    def _final(self, t: TrialState, status: TrialStatus, now: float, error: str | None = None) -> None:
        t.status = status
        self._alive.pop(t.id, None)
        self._views.pop(t.id, None)
        self._gone.append(t.id)
        t.finished_at = now
        if status == TrialStatus.FAILED:
            t.error = error
        self.store.update_trial(
            t.id,
            status=status.value,
            finished_at=now,
            error=t.error,
            steps=t.steps,
            metric=t.metric,
            best_metric=t.best,
            device_seconds=t.device_seconds,
        )
        s = self.searches.get(t.search_id)
        if s is not None:
            s.searcher.tell(t.number, _loss(s.spec, t.metric), status != TrialStatus.FAILED and t.metric is not None)
        self._wake = True

    # ---- events --------------------------------------------------------------------------------

    def handle(self, events: list[Event]) -> None:
        for e in events:
            ts = self._trial(e.trial_id)
            if ts is None:
                continue
            self._dirty.add(ts.id)
            s = self.searches.get(ts.search_id)
            if isinstance(e, Reported):
                self._on_report(s, ts, e)
            elif isinstance(e, Profiled):
                self._on_profile(s, ts, e)
            elif isinstance(e, Exited):
                self._on_exit(s, ts, e)
            elif isinstance(e, Parked):
                self._measure(LatencyRow, trial_id=ts.id, kind="park", ms=e.park_ms, at=e.at)
            elif isinstance(e, Resumed):
                kind = "migrate" if e.migrated else "resume"
                self._measure(LatencyRow, trial_id=ts.id, kind=kind, ms=e.resume_ms, at=e.at)
                ts.devices = e.devices
            elif isinstance(e, Started):
                self._measure(LatencyRow, trial_id=ts.id, kind="start", ms=e.start_ms, at=e.at)
                ts.devices = e.devices
            elif isinstance(e, Checkpointed):
                ts.resume = True
                self.store.update_trial(ts.id, checkpoint_step=e.step)
        if events:
            self.flush()

    def _measure(self, cls: type[LatencyRow | QuantumRow | PairRow], **fields: Any) -> None:
        """Queue a measurement row for the store. A store that keeps no measurements (the simulator's
        `MemoryStore(keep_measurements=False)`) would drop it unread, so it is not even built: building
        SQLModel rows was most of a simulated overloaded cluster's time."""
        if self._keep_rows:
            self._pending_rows.append(cls(**fields))

    def flush(self) -> None:
        rows, self._pending_rows = self._pending_rows, []
        self.store.add_rows(rows)

    def _on_report(self, s: SearchState | None, t: TrialState, e: Reported) -> None:
        objective = e.metrics.get(s.spec.metric.name) if s is not None else None
        if objective is not None and not math.isfinite(objective):
            objective = None
        self._pending_rows.append(
            ReportRow(
                trial_id=t.id, search_id=t.search_id, step=e.step, at=e.at, metrics=e.metrics, objective=objective
            )
        )
        t.steps = max(t.steps, e.step)
        if objective is None or s is None:
            return
        spec = s.spec
        t.metric = objective
        t.curve.append((e.step, objective))
        if t.best is None or spec.metric.better(objective, t.best):
            t.best = objective
        if s.best is None or spec.metric.better(objective, s.best):
            s.best, s.best_trial = objective, t.id
            fields: dict[str, Any] = {"best_trial_id": t.id, "best_metric": objective, "best_params": t.params}
            if s.reached_at is None and spec.metric.reaches(objective):
                s.reached_at = e.at
                fields.update(reached=True, reached_at=e.at, seconds_to_target=max(0.0, e.at - s.started_at))
                self._wake = True
            self.flush()
            self.store.update_search(s.id, **fields)
        self.store.update_trial(t.id, metric=t.metric, best_metric=t.best, steps=t.steps)

    def _on_profile(self, s: SearchState | None, t: TrialState, e: Profiled) -> None:
        t.memory_mb = e.rss_mb
        if e.seconds > 0.05 and e.steps > 0:
            rate = e.rate
            if e.packed_with:
                t.rate_packed = rate if t.rate_packed is None else (1 - _EMA) * t.rate_packed + _EMA * rate
                for other in e.packed_with:
                    self._pair_latest[(t.id, other)] = rate
                    self._pair_keys.setdefault(t.id, set()).add((t.id, other))
                    self._pair_keys.setdefault(other, set()).add((t.id, other))
                    if (other, t.id) in self._pair_latest:
                        a, b = sorted((t.id, other))
                        self._measure(
                            PairRow,
                            trial_a=a,
                            trial_b=b,
                            rate_a=self._pair_latest[(a, b)],
                            rate_b=self._pair_latest[(b, a)],
                            at=e.at,
                        )
            else:
                t.rate_solo = rate if t.rate_solo is None else (1 - _EMA) * t.rate_solo + _EMA * rate
        self._measure(
            QuantumRow,
            trial_id=t.id,
            search_id=t.search_id,
            devices=",".join(e.devices),
            started_at=e.started_at,
            ended_at=e.at,
            steps=e.steps,
            rate=e.rate,
            rss_mb=e.rss_mb,
            packed_with=",".join(map(str, e.packed_with)),
        )

    def _on_exit(self, s: SearchState | None, t: TrialState, e: Exited) -> None:
        t.device_seconds_base += e.device_seconds
        t.device_seconds = t.device_seconds_base
        t.steps = max(t.steps, e.steps)
        t.devices = ()
        self._wake = True
        now = self.runtime.now()
        if t.status.final and e.status != "completed":
            # Already final (stopped by a policy or the search ending): record its last figures.
            self.store.update_trial(t.id, steps=t.steps, device_seconds=t.device_seconds)
            return
        if e.status == "completed":
            if t.status.final:  # it finished before the stop reached it: completed is the truth
                self.store.update_trial(t.id, status="completed", steps=t.steps, device_seconds=t.device_seconds)
                t.status = TrialStatus.COMPLETED
                return
            self._final(t, TrialStatus.COMPLETED, now)
        elif e.status == "killed":
            self._final(t, TrialStatus.KILLED, now, e.error)
        elif e.status == "crashed" and t.retries < (s.spec.scheduler if s else MECHANISM).max_retries:
            t.retries += 1
            t.status = TrialStatus.QUEUED
            t.resume = True
            t.error = e.error
            log.warning("trial %s crashed (%s); restart %d from its checkpoint", t.id, e.error, t.retries)
            self.store.update_trial(
                t.id, status="queued", retries=t.retries, error=e.error, device_seconds=t.device_seconds
            )
        else:
            self._final(t, TrialStatus.FAILED, now, e.error or "failed")

    # ---- launching -----------------------------------------------------------------------------

    def launch(self, trial_id: int) -> TrialLaunch:
        """What the runtime needs to start trial `trial_id` (used as LocalRuntime's launcher)."""
        t = self.trials[trial_id]
        s = self.searches.get(t.search_id)
        if s is not None:  # the same builder node agents use from the database
            return search_launch(s.spec, s.id, trial_id, t.params, self.workdir, t.resume)
        if t.trainable is None:  # a trace job run for real needs its own trainable
            raise ValueError(f"job {trial_id} ({t.kind}) has no trainable to run")
        base = self.workdir / "jobs"
        return TrialLaunch(
            trial_id=trial_id,
            trainable=t.trainable,
            config=dict(t.config),
            max_steps=t.max_steps,
            checkpoint_path=str(base / "checkpoints" / f"trial-{trial_id}.pt"),
            resume=t.resume,
            checkpoint_every_quanta=MECHANISM.checkpoint_every_quanta,
            checkpoint_every_s=MECHANISM.checkpoint_every_s,
            log_path=str(base / "logs" / f"trial-{trial_id}.log"),
        )

    def close(self) -> None:
        self.flush()
        self.runtime.close()


def _final(status: str) -> bool:
    return status in ("completed", "killed", "failed")


def _loss(spec: SearchSpec, metric: float | None) -> float | None:
    return None if metric is None else spec.metric.loss(metric)
