"""`SnapshotBuilder`: the frozen `ClusterSnapshot` a policy plans on.

Contract: `build(now, ...)` reads the runtime's residency once and returns alive trials (queued or
resident; those of paused searches are left out) with their measured rates, device time and curves,
the running searches, the devices and the measured pair rates among the trials it shows. Reading
residency also brings resident trials' steps and device time up to date. `residency_seen` is that
residency, as the last snapshot saw it (planning does not change it), and `running_seen` the trials
running in it.

For a policy that plans on verdicts (`judge_knobs` given), `build` also runs the judge
(`quanta.search.judge`) on the snapshot, judging apart from placing: the verdicts arrive in
`ClusterSnapshot.verdicts`, and `judge_state` is the judge's state after it (to carry to the next
build and persist with the policy's); without `judge_knobs` it is {} (as a policy's state is replaced
by the next policy's).

With `cache_views`, a trial's `TrialView` is reused while nothing about it changed (no event, no action,
not running, its residency the same as at the previous snapshot), and the snapshot carries its resident
trials in arrival order so the policy need not filter and sort.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from itertools import compress
from typing import Any

from quanta.controller.book import SearchBook
from quanta.controller.packed import PackedRates
from quanta.controller.state import TrialState
from quanta.controller.trials import TrialIndex
from quanta.executor.actions import Residency
from quanta.executor.policy.types import ARRIVAL_ORDER, ClusterSnapshot, MutableDim, SearchView, TrialView
from quanta.executor.runtime.base import Runtime
from quanta.search.judge import judge
from quanta.search.space import dimension_at, is_dimension
from quanta.search.verdict import JudgeKnobs
from quanta.status import SearchStatus


class SnapshotBuilder:
    def __init__(
        self,
        runtime: Runtime,
        book: SearchBook,
        index: TrialIndex,
        pairs: PackedRates,
        *,
        cache_views: bool,
        kind_aware: bool = True,
    ):
        self._runtime = runtime
        self._kind_aware = kind_aware
        self._book = book
        self._index = index
        self._pairs = pairs
        self._cache_views = cache_views
        # With cache_views: one entry per alive trial, in the index's alive order (None until built).
        self._views: dict[int, TrialView | None] = {}
        # Per resident trial, its residency as the last build saw it: a parked trial whose residency is
        # the same and that nothing touched keeps its view without being looked at (held trials are the
        # bulk of a successive-halving search's alive ones, and a round was O(them) `_view` calls).
        self._res_seen: dict[int, tuple[Any, ...]] = {}
        self._parked: dict[int, Residency] = {}  # per resident trial not running: its residency object as seen
        self._parked_obj: dict[int, int] = {}  # id() of each of those objects -> its trial
        self.residency_seen: dict[int, Residency] = {}
        self.running_seen: frozenset[int] = frozenset()  # the trials running in `residency_seen`
        self.judge_state: dict[str, Any] = {}

    def build(
        self,
        now: float,
        *,
        policy_state: dict[str, Any],
        quantum_s: float,
        round_no: int,
        judge_knobs: JudgeKnobs | None = None,
        judge_state: Mapping[str, Any] | None = None,
        user_weights: Mapping[str, float] | None = None,
    ) -> ClusterSnapshot:
        residency = self.residency_seen = self._runtime.residency()
        searches = self._book.searches.values()
        running = tuple(
            SearchView(
                s.id,
                s.spec.metric.goal,
                s.spec.metric.target,
                s.spec.budget.max_steps,
                more_trials=s.created - s.forked < s.spec.budget.max_trials,
                owner=s.owner,
                mutable=mutable_dims(s.spec.space, s.spec.mutable),
                pareto=s.spec.pareto,
                reference=s.spec.reference_losses(),
                point=s.spec.point_target(),
            )
            for s in searches
            if s.status == SearchStatus.RUNNING
        )
        paused = {s.id for s in searches if s.status == SearchStatus.PAUSED}
        alive = self._index.alive
        names = {s.id: s.spec.mutable for s in searches if s.spec.mutable}
        changes = self._index.take_changes()
        dirty = changes.touched
        seen, parked, parked_obj = self._res_seen, self._parked, self._parked_obj
        # The residency objects seen not running last build and returned again are unchanged (the runtime's
        # contract, `Runtime.residency`); only the others are looked at, found with a C-level set difference
        # over object ids (the objects are held in `_parked`, so their ids stay theirs): a Python pass over
        # every resident trial per round was a tenth of a long simulated search.
        for tid in seen.keys() - residency.keys():  # no longer resident
            dirty.add(tid)
            del seen[tid]
            if (gone := parked.pop(tid, None)) is not None:
                del parked_obj[id(gone)]
        by_obj = dict(zip(map(id, residency.values()), residency.keys(), strict=True))
        running_now: set[int] = set()
        for oid in by_obj.keys() - parked_obj.keys():
            tid = by_obj[oid]
            r = residency[tid]
            key = (r.running, r.steps, r.device_seconds, r.devices, r.elastic)
            if r.running or seen.get(tid) != key:
                dirty.add(tid)  # computing, or its residency moved since the last build
            seen[tid] = key
            if (old := parked.pop(tid, None)) is not None:
                del parked_obj[id(old)]
            if r.running:
                running_now.add(tid)
            else:
                parked[tid], parked_obj[oid] = r, tid
        self.running_seen = frozenset(running_now)
        views = self._views
        for tid in changes.gone:  # finished trials never reach a snapshot again, nor do their pairs
            views.pop(tid, None)
            self._pairs.forget(tid)
        resident_trials: tuple[TrialView, ...] | None
        if self._cache_views and not paused:
            # Incremental: one view per alive trial, in alive order, rebuilt only when something about it
            # changed (an event, an action, residency); the others are reused as they were. New trials
            # take their place at the end, in the order they were indexed.
            for tid in changes.added:
                if tid in alive:
                    views[tid] = None
            if len(views) != len(alive) or next(reversed(views), None) != next(reversed(alive), None):
                # Trials arrived or left by another road: re-key in alive order, building views only
                # for the new ones (rebuilding all made every arrival O(alive trials) constructions).
                self._views = views = {tid: views.get(tid) for tid in alive}
                dirty.update(tid for tid, v in views.items() if v is None)
            for tid in dirty:
                t = alive.get(tid)
                if t is not None:
                    views[tid] = _view(t, residency.get(tid), views.get(tid), names.get(t.search_id, ()))
            trials: list[TrialView] = list(views.values())  # type: ignore[arg-type]  # every entry built above
            if self._index.in_arrival_order:  # views are in arrival order: keep it, no sort (a key per trial)
                resident = list(compress(trials, map(residency.__contains__, views.keys())))
            else:
                resident = [v for tid in residency if (v := views.get(tid)) is not None]
                resident.sort(key=ARRIVAL_ORDER)
            resident_trials = tuple(resident)
        else:
            resident_trials = None
            views.clear()
            trials = [
                _view(t, residency.get(t.id), None, names.get(t.search_id, ()))
                for t in alive.values()
                if t.search_id not in paused
            ]
        alive_ids = {t.id for t in trials} if paused else alive
        snapshot = ClusterSnapshot(
            now=now,
            devices=tuple(self._runtime.devices()),  # the same object when the runtime returns a tuple
            trials=tuple(trials),
            searches=running,
            pair_rates=self._pairs.among(alive_ids),
            policy_state=policy_state,
            quantum_s=quantum_s,
            round_no=round_no,
            in_arrival_order=self._index.in_arrival_order,
            resident_trials=resident_trials,
            user_weights=user_weights or {},
            kind_aware=self._kind_aware,
        )
        if judge_knobs is None:
            self.judge_state = {}
            return snapshot
        judged = judge(snapshot, judge_knobs, judge_state)
        self.judge_state = judged.state
        return replace(snapshot, verdicts=judged.verdicts)


class KnownResidency(Mapping[int, tuple[str, ...]]):
    """The devices of each resident trial of `residency` that `known(trial id)` finds, as a read-only
    mapping over it without a copy: the reconciler looks up only the trials a plan names, and building
    the whole mapping every round was a pass over every resident trial."""

    def __init__(self, residency: Mapping[int, Residency], known: Callable[[int], object | None]):
        self._residency = residency
        self._known = known

    def __getitem__(self, tid: int) -> tuple[str, ...]:
        r = self._residency[tid]
        if self._known(tid) is None:
            raise KeyError(tid)
        return r.devices

    def __iter__(self) -> Iterator[int]:
        return (tid for tid in self._residency if self._known(tid) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def mutable_dims(space: Mapping[str, Any], names: tuple[str, ...]) -> tuple[MutableDim, ...]:
    """The mutable parameters `names` of `space`, as a policy reads them."""
    out = []
    for name in names:
        node = dimension_at(space, name)
        if is_dimension(node):
            kind, args = next(iter(node.items()))
            out.append(MutableDim(name, kind, tuple(float(a) for a in args)))
    return tuple(out)


def _values(params: Mapping[str, Any], names: tuple[str, ...]) -> tuple[tuple[str, float], ...]:
    """The values in `params` of the dotted `names` (numbers only), sorted by name."""
    out = []
    for name in sorted(names):
        node: Any = params
        for part in name.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, int | float) and not isinstance(node, bool):
            out.append((name, float(node)))
    return tuple(out)


def _view(t: TrialState, r: Residency | None, old: TrialView | None = None, names: tuple[str, ...] = ()) -> TrialView:
    """Trial `t` as the policy sees it; brings its steps and device time up to date from residency `r`.
    `old` (its previous view) is returned, or cheaply copied, when only its progress moved. `names`: its
    search's mutable parameters (their values in force are part of the view)."""
    values = _values(t.params, names) if names else ()
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
            and len(old.kind_rates) == len(t.kind_rates)
            and all(t.kind_rates.get(k) == r for k, r in old.kind_rates)
            and old.memory_mb == t.memory_mb
            and old.elastic == t.elastic
            and len(old.curve) == len(t.curve)
            and len(old.points) == len(t.points)
            and old.values == values
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
        points=tuple(t.points),
        elastic=t.elastic,
        kind=t.kind,
        owner=t.owner,
        kind_rates=tuple(sorted(t.kind_rates.items())),
        values=values,
    )
