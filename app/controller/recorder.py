"""`EventRecorder`: turns the runtime's events into trial state and stored rows.

Contract: `handle(events)` applies each event to the trial it names (events of unknown trials are
ignored): reports update the trial's curve and best, the search's best (and whether it reached its
target), the searcher (`observe`) and the search's health (which metrics arrive); profiles update
measured rates (solo, packed, pair rates); an exit ends the trial (completed, stopped, failed) or queues
it again to resume from its checkpoint (after a crash, within its retries, or after a release; the exit
of a queued trial, a process its resumed search no longer counts on, adds its device time only); a trial
that parked itself at its step limit (a rung: judged there, `TrialState.at_rung`) wakes the controller
to plan at once; start/park/resume latencies and checkpoints are noted, and `reaction` notes a round's
own latency. A report is stored once per (trial, step, attempt) (`ReportRow`); a step a later attempt
reports again replaces its point in the trial's curve. Rows, and the trial and search figures they move
(a trial's metric, best and steps; a search's best and target), are buffered and written together by
`flush()`: at the end of each `handle`, or, after `handle(events, flush=False)`, when the caller says
(it then holds rows of several batches, `buffered_for`). A solo profile on devices of one kind also
updates the trial's rate on that kind (`TrialState.kind_rates`). Measurement rows (quanta, latencies,
pairs) are built only for a store that keeps them.
"""

from __future__ import annotations

import bisect
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from quanta.controller.book import SearchBook
from quanta.controller.forks import Forks
from quanta.controller.packed import PackedRates
from quanta.controller.state import SearchState, Signals, TrialState
from quanta.controller.tracking import StoredReport
from quanta.controller.trials import TrialIndex
from quanta.db.models import LatencyRow, PairRow, QuantumRow, ReportRow
from quanta.db.protocol import ControllerStore
from quanta.executor.actions import (
    Adopted,
    Checkpointed,
    Configured,
    Event,
    Exited,
    Forked,
    Parked,
    Profiled,
    Reported,
    Resumed,
    Started,
    split_non_finite,
)
from quanta.executor.policy.knobs import MECHANISM
from quanta.executor.runtime.base import Runtime
from quanta.search.pareto import hypervolume, put_point
from quanta.search.pareto import reaches as pareto_reaches
from quanta.spec import HYPERVOLUME
from quanta.status import TrialStatus

log = logging.getLogger("quanta.controller")

_EMA = 0.5  # weight of the newest rate sample in the running estimate
RELEASED = "released"  # an `Exited` status: see quanta.executor.actions.Release
# Waits between tries of a failed write (a database restarting, a brief network fault): about 3.5 s in
# all before the error is raised to the controller loop, which tries again on its next round.
FLUSH_DELAYS_S = (0.1, 0.4, 1.0, 2.0)


def _put_point(curve: list[tuple[int, float]], step: int, value: float) -> None:
    """Put (step, value) into a curve held in step order: a step reported again (by a later attempt, after
    a restart from an older checkpoint) replaces its point, as readers show it (`latest_per_step`)."""
    if not curve or curve[-1][0] < step:
        curve.append((step, value))  # the usual case: a new step
        return
    i = bisect.bisect_left(curve, step, key=lambda point: point[0])
    if i < len(curve) and curve[i][0] == step:
        curve[i] = (step, value)
    else:
        curve.insert(i, (step, value))


def _fresh(row: Any) -> Any:
    """A copy of a row without its id, as if never inserted."""
    return type(row)(**row.model_dump(exclude={"id"}))


class EventRecorder:
    def __init__(
        self,
        store: ControllerStore,
        runtime: Runtime,
        book: SearchBook,
        index: TrialIndex,
        pairs: PackedRates,
        signals: Signals,
        on_stored: Callable[[list[StoredReport]], None] | None = None,
        forks: Forks | None = None,
    ):
        self._store = store
        self._forks = forks  # told a parent's answer to a fork and a trial's config change
        self._on_stored = on_stored  # told each report once it is stored (the spec's tracking)
        self._runtime = runtime
        self._book = book
        self._index = index
        self._pairs = pairs
        self._signals = signals
        self._pending_rows: list[Any] = []
        self._pending_reports: set[tuple[int, int, float]] = set()  # (trial, step, at) of buffered reports
        # Trials whose metric, best or steps a buffered report moved: written with the rows, as they stand
        # then (one transaction a batch, not one more a report; values only move on, so the latest is right).
        self._moved: dict[int, TrialState] = {}
        # The same for searches: the fields of each search's row that buffered reports moved (best, target).
        self._search_fields: dict[int, dict[str, Any]] = {}
        self._buffered_since: float | None = None  # perf_counter when the oldest buffered row came
        self._stored_keys: dict[int, set[tuple[int, float]]] = {}  # (step, at) stored, per replaying trial
        self._keep_rows = store.keep_measurements
        self._kinds: dict[str, str] = {}  # device -> kind, as the runtime listed its devices

    def handle(self, events: list[Event], flush: bool = True) -> None:
        """Apply `events`; then store what they buffered (`flush`), unless `flush` is False."""
        for e in events:
            ts = self._index.get(e.trial_id)
            if ts is None:
                continue
            self._index.touch(ts.id)
            s = self._book.search(ts.search_id)
            if isinstance(e, Reported):
                self._on_report(s, ts, e)
            elif isinstance(e, Profiled):
                self._on_profile(ts, e)
            elif isinstance(e, Exited):
                self._on_exit(s, ts, e)
            elif isinstance(e, Parked):
                self._measure(LatencyRow, trial_id=ts.id, kind="park", ms=e.park_ms, at=e.at)
                if e.at_limit:  # it parked itself at a rung: the policy decides what runs next, now
                    ts.at_rung = True
                    if s is not None:
                        s.health.judged(ts.id)
                    self._signals.freed()
            elif isinstance(e, Resumed):
                kind = "migrate" if e.migrated else "resume"
                self._measure(LatencyRow, trial_id=ts.id, kind=kind, ms=e.resume_ms, at=e.at)
                ts.devices = e.devices
            elif isinstance(e, Started):
                self._stored_keys.pop(ts.id, None)  # a new process replays its spool: read the rows again
                self._measure(LatencyRow, trial_id=ts.id, kind="start", ms=e.start_ms, at=e.at)
                ts.devices = e.devices
            elif isinstance(e, Checkpointed):
                ts.resume = True
                self._store.update_trial(ts.id, checkpoint_step=e.step)
            elif isinstance(e, Forked) and self._forks is not None:
                self._forks.forked(e)
            elif isinstance(e, Adopted) and self._forks is not None:
                self._forks.adopted(e)
            elif isinstance(e, Configured) and self._forks is not None:
                self._forks.configured(ts, e)
        if self._buffered_since is None and (self._pending_rows or self._moved or self._search_fields):
            self._buffered_since = time.perf_counter()
        if events and flush:
            self.flush()

    def buffered_for(self) -> float | None:
        """Seconds since the oldest row or figure still buffered came (None: nothing is buffered)."""
        return None if self._buffered_since is None else time.perf_counter() - self._buffered_since

    def flush(self) -> None:
        """Write the buffered rows in one transaction. On a database error the rows stay buffered and
        the write is tried again with backoff (`FLUSH_DELAYS_S`); when every try fails the error is
        raised and the rows are still buffered for the next flush, so nothing reported is dropped (a
        runtime that redelivers events is acknowledged only after a flush succeeded, see
        `Controller.handle`). Rows are written as fresh copies each try: a failed transaction may have
        left ids on the objects it tried to insert."""
        if not self._pending_rows and not self._moved and not self._search_fields:
            self._buffered_since = None
            return
        rows = self._pending_rows
        moved = [(t.id, t.metric, t.best, t.steps) for t in self._moved.values()]
        searches = {sid: dict(fields) for sid, fields in self._search_fields.items()}
        # Read before the write: a stored row's attributes expire with its session.
        stored = [(r.search_id, r.trial_id, r.step, r.at, r.metrics) for r in rows if isinstance(r, ReportRow)]
        for attempt, delay in enumerate((*FLUSH_DELAYS_S, None)):
            try:
                self._store.add_rows([_fresh(r) for r in rows] if attempt else rows, moved, searches)
            except Exception as exc:
                if delay is None:
                    log.error("cannot store %d rows (%s); kept for the next flush", len(rows), exc)
                    raise
                log.warning("storing %d rows failed (%s); retrying in %.2f s", len(rows), exc, delay)
                time.sleep(delay)
            else:
                break
        self._pending_rows = self._pending_rows[len(rows) :]
        self._pending_reports.clear()
        self._moved.clear()
        self._search_fields.clear()
        self._buffered_since = None
        if stored and self._on_stored is not None:
            self._on_stored(stored)

    @property
    def pending(self) -> int:
        """Rows buffered and not yet stored."""
        return len(self._pending_rows)

    def _measure(self, cls: type[LatencyRow | QuantumRow | PairRow], **fields: Any) -> None:
        """Queue a measurement row for the store. A store that keeps no measurements (the simulator's
        `MemoryStore(keep_measurements=False)`) would drop it unread, so it is not even built: building
        SQLModel rows was most of a simulated overloaded cluster's time."""
        if self._keep_rows:
            self._pending_rows.append(cls(**fields))

    def reaction(self, trial_id: int, seconds: float) -> None:
        """Note how long a round took to send its commands after what made it due (see `Signals`)."""
        self._measure(LatencyRow, trial_id=trial_id, kind="react", ms=seconds * 1000.0, at=time.time())

    def _on_report(self, s: SearchState | None, t: TrialState, e: Reported) -> None:
        key = (t.id, e.step, e.at)
        if key in self._pending_reports:  # delivered again after a failed round (see `flush`)
            self._rewrite(s, t)
            return
        if e.replay and self._stored(t.id, e.step, e.at):  # a later process re-sent its spool
            return
        self._pending_reports.add(key)
        known = self._stored_keys.get(t.id)
        if known is not None:  # read before this report: a replay of it after the flush must see it stored
            known.add((e.step, e.at))
        # JSON (and PostgreSQL's json) cannot hold NaN or inf: such a value is stored as null, flagged.
        metrics, flags = split_non_finite(e.metrics)
        flags = {**e.non_finite, **flags}
        objective = metrics.get(s.spec.metric.name) if s is not None else None
        if s is not None:
            s.health.reported(t.id, e.metrics, s.spec.metric.name)
        self._pending_rows.append(
            ReportRow(
                trial_id=t.id,
                search_id=t.search_id,
                step=e.step,
                attempt=e.attempt,
                at=e.at,
                metrics=metrics,
                objective=objective,
                non_finite=flags or None,
            )
        )
        t.steps = max(t.steps, e.step)
        if s is not None and s.spec.pareto:
            self._on_point(s, t, e, metrics, objective)
            return
        if objective is None or s is None:
            return
        spec = s.spec
        t.metric = objective
        _put_point(t.curve, e.step, objective)
        if t.parent_id is None:  # multi-fidelity searchers learn (a fork is none of their proposals)
            s.searcher.observe(t.number, e.step, spec.metric.loss(objective))
        if t.best is None or spec.metric.better(objective, t.best):
            t.best = objective
        if s.best is None or spec.metric.better(objective, s.best):
            s.best, s.best_trial = objective, t.id
            fields: dict[str, Any] = {"best_trial_id": t.id, "best_metric": objective, "best_params": t.params}
            if s.reached_at is None and spec.metric.reaches(objective):
                s.reached_at = e.at
                fields.update(reached=True, reached_at=e.at, seconds_to_target=max(0.0, e.at - s.started_at))
                self._signals.wake = True
            self._search_fields.setdefault(s.id, {}).update(fields)
        self._moved[t.id] = t

    def _on_point(self, s: SearchState, t: TrialState, e: Reported, metrics: dict[str, Any], objective: Any) -> None:
        """A report of a search with several objectives or constraints: the trial's point (when the report
        completes one), its searcher's lesson, and the search's best and target. The search's best is the
        best first objective among feasible reports; its target, a feasible report at least as good in every
        objective (`target: {...}`, or `metric.target` alone with constraints), or the feasible front's
        hypervolume (`target: {hypervolume: X}`)."""
        spec = s.spec
        if objective is not None:
            t.metric = objective
            _put_point(t.curve, e.step, objective)
        if t.reader is None:
            t.reader = s.point_reader()
        point = t.reader.read(e.step, metrics)
        if point is None:
            self._moved[t.id] = t
            return
        put_point(t.points, point)
        _step, losses, violation = point
        if t.parent_id is None:
            s.searcher.observe_point(t.number, e.step, losses, violation)
        first = spec.objectives[0]
        feasible = violation == 0.0 and all(math.isfinite(v) for v in losses)
        if feasible:
            value = first.value(losses[0])
            if t.best is None or spec.metric.better(value, t.best):
                t.best = value
            fields: dict[str, Any] = {}
            if s.best is None or spec.metric.better(value, s.best):
                s.best, s.best_trial = value, t.id
                fields.update(best_trial_id=t.id, best_metric=value, best_params=t.params)
            moved = s.add_to_front(losses)
            if s.reached_at is None and self._reaches(s, losses, moved):
                s.reached_at = e.at
                fields.update(reached=True, reached_at=e.at, seconds_to_target=max(0.0, e.at - s.started_at))
                self._signals.wake = True
            if fields:
                self._search_fields.setdefault(s.id, {}).update(fields)
        self._moved[t.id] = t

    @staticmethod
    def _objectives_missing(s: SearchState | None, t: TrialState) -> list[str]:
        """The objectives a finished trial of a search with several objectives never reported (empty for a
        single-objective search: its metric's absence is the health check's)."""
        if s is None or not s.spec.metrics:
            return []
        return t.reader.missing() if t.reader is not None else [o.name for o in s.spec.objectives]

    @staticmethod
    def _reaches(s: SearchState, losses: tuple[float, ...], moved: bool) -> bool:
        """Whether a feasible point with these losses (`moved`: it joined the front) reaches the search's
        target."""
        spec = s.spec
        point = spec.point_target()
        if point is not None:
            return pareto_reaches(losses, point)
        if spec.target and HYPERVOLUME in spec.target:
            ref = spec.reference_losses()
            return moved and ref is not None and hypervolume(s.front, ref) >= spec.target[HYPERVOLUME]
        return not spec.metrics and spec.metric.reaches(spec.objectives[0].value(losses[0]))

    def _stored(self, trial_id: int, step: int, at: float) -> bool:
        """Whether the report (trial, step, at) is stored (read once per process of the trial)."""
        keys = self._stored_keys.get(trial_id)
        if keys is None:
            keys = {(r.step, r.at) for r in self._store.reports(trial_id)}
            self._stored_keys[trial_id] = keys
        return (step, at) in keys

    def _rewrite(self, s: SearchState | None, t: TrialState) -> None:
        """Write the trial's (and, if it holds it, the search's) best again, with the next flush of the
        rows: the round that first handled a redelivered report may have failed before it wrote them."""
        if s is not None and s.best_trial == t.id:
            fields: dict[str, Any] = {"best_trial_id": t.id, "best_metric": s.best, "best_params": t.params}
            if s.reached_at is not None:
                to_target = max(0.0, s.reached_at - s.started_at)
                fields.update(reached=True, reached_at=s.reached_at, seconds_to_target=to_target)
            self._search_fields.setdefault(s.id, {}).update(fields)
        self._moved[t.id] = t

    def _kind_of(self, devices: tuple[str, ...]) -> str | None:
        """The kind of `devices` when they are all of one kind the runtime knows (else None)."""
        if any(d not in self._kinds for d in devices):  # a device not seen yet: ask the runtime again
            self._kinds = {d.id: d.kind for d in self._runtime.devices()}
        kinds = {self._kinds.get(d) for d in devices}
        kind = kinds.pop() if len(kinds) == 1 else None
        return kind

    def _on_profile(self, t: TrialState, e: Profiled) -> None:
        t.memory_mb = e.rss_mb
        if e.seconds > 0.05 and e.steps > 0:
            rate = e.rate
            if e.packed_with:
                t.rate_packed = rate if t.rate_packed is None else (1 - _EMA) * t.rate_packed + _EMA * rate
                for other in e.packed_with:
                    both = self._pairs.record(t.id, other, rate)
                    if both is not None:
                        a, b, rate_a, rate_b = both
                        self._measure(PairRow, trial_a=a, trial_b=b, rate_a=rate_a, rate_b=rate_b, at=e.at)
            else:
                t.rate_solo = rate if t.rate_solo is None else (1 - _EMA) * t.rate_solo + _EMA * rate
                kind = self._kind_of(e.devices)
                if kind is not None:  # devices of one kind: a measurement of its rate on that kind
                    old = t.kind_rates.get(kind)
                    t.kind_rates[kind] = rate if not old else (1 - _EMA) * old + _EMA * rate
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
        self._signals.freed()
        now = self._runtime.now()
        if t.status == TrialStatus.QUEUED:
            # A process it no longer has (its search was resumed, it is queued to start anew before this
            # exit arrived): its device time counts, its state is the queued one.
            self._store.update_trial(t.id, steps=t.steps, device_seconds=t.device_seconds)
            return
        if t.status.final and e.status != TrialStatus.COMPLETED:
            # Already final (stopped by a policy or the search ending): record its last figures.
            self._store.update_trial(t.id, steps=t.steps, device_seconds=t.device_seconds)
            return
        if e.status == TrialStatus.COMPLETED:
            if t.status.final:  # it finished before the stop reached it: completed is the truth
                self._store.update_trial(
                    t.id, status=TrialStatus.COMPLETED, steps=t.steps, device_seconds=t.device_seconds
                )
                t.status = TrialStatus.COMPLETED
                return
            missing = self._objectives_missing(s, t)
            if missing:  # it cannot be ranked: failed, naming what it never reported; the others go on
                names = ", ".join(f"'{m}'" for m in missing)
                self._book.finalize(t, TrialStatus.FAILED, now, f"never reported the objective(s) {names}")
            else:
                self._book.finalize(t, TrialStatus.COMPLETED, now)
        elif e.status == TrialStatus.KILLED:
            # Ended on a stop the controller did not decide (it finalises the trials it stops before the stop
            # is sent): nothing judged it, so it is stopped, not killed.
            self._book.finalize(t, TrialStatus.STOPPED, now, reason=e.error or "stopped")
        elif e.status == RELEASED:
            # Checkpointed and ended on the policy's request (host memory): queued, it resumes from the
            # checkpoint when the policy runs it again.
            t.status = TrialStatus.QUEUED
            t.resume = True
            self._store.update_trial(t.id, status=TrialStatus.QUEUED, device_seconds=t.device_seconds)
        elif e.status == "crashed" and t.retries < (s.spec.scheduler if s else MECHANISM).max_retries:
            t.retries += 1
            t.status = TrialStatus.QUEUED
            t.resume = True
            t.error = e.error
            log.warning("trial %s crashed (%s); restart %d from its checkpoint", t.id, e.error, t.retries)
            self._store.update_trial(
                t.id, status=TrialStatus.QUEUED, retries=t.retries, error=e.error, device_seconds=t.device_seconds
            )
        else:
            self._book.finalize(t, TrialStatus.FAILED, now, e.error or "failed")
