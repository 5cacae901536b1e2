"""A search's trade-offs as readers see them: its points, its Pareto front, the hypervolume over time
(`GET /api/v1/searches/{id}/pareto`, `Search.pareto()` in the SDK, the objective columns of `quanta export`).

Everything is read from the stored reports (`ReportRow.metrics`), never from the controller's memory, so
the answer is the same for a running search, an ended one and after a restart:

- A *point* is one report step of one trial: each step once, by its latest attempt (as every reader shows a
  step, `quanta.db.reports.latest_per_step`), read in step order by `quanta.search.pareto.PointReader`,
  as the controller reads them (a report naming no objective is no point, nor one before every objective
  has been reported; objective and bounded values are carried forward from earlier steps).
  Its time is its report's `at`.
- Each point is of one kind: `non_finite` (an objective was NaN or infinite: kept, ranked last),
  `infeasible` (finite, outside a constraint, or a bounded value not reported yet), `front` (feasible and no
  feasible point dominates it; equal points all stay) or `dominated`.
- A trial counts once, by its best point's kind (front, then dominated, infeasible, non-finite); a trial
  without a point is `no_points`.
- The reference is the spec's (`reference`), else `quanta.search.pareto.default_reference` over every
  finite point, flagged `reference_derived` (volumes up to a derived reference compare within one search
  and one answer only: it moves as points arrive).
- The hypervolume curve: after each report, the volume the feasible front of every point reported until
  then dominates up to the reference, as [seconds since the search started, volume], one entry per change
  (at most `MAX_CURVE` entries, evenly thinned, the last kept).

A search with one objective and no constraints answers too: its front is its best point(s) and its volume
the distance from the reference to the best value so far. `pareto` in the answer says whether the search
ranks trials by Pareto order (several objectives or constraints).

`pareto_out(store, search_id, max_points)` is the API's answer (None: no such search); `trial_outcomes` is
what `quanta.db.export` writes per trial. Pure reading: no write, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlmodel import Field, SQLModel

from quanta.db.models import ReportRow, SearchRow
from quanta.db.protocol import ControllerStore
from quanta.db.public.readable import finite, parsed_spec
from quanta.db.reports import latest_per_step
from quanta.search.pareto import Losses, PointReader, default_reference, front, hypervolume
from quanta.spec import SearchSpec

Kind = Literal["front", "dominated", "infeasible", "non_finite"]
KINDS: tuple[Kind, ...] = ("front", "dominated", "infeasible", "non_finite")  # best first
MAX_CURVE = 2000  # hypervolume curve entries at most
MAX_POINTS = 5000  # points sent by default

_NO_SPEC = "the search's stored spec does not parse (written by another version?)"


# ---- read models ---------------------------------------------------------------------------------


class ObjectiveOut(SQLModel):
    name: str
    goal: str = Field(description="maximize | minimize")


class ConstraintOut(SQLModel):
    name: str
    min: float | None = None
    max: float | None = None


class FrontPointOut(SQLModel):
    trial_id: int
    number: int = Field(description="the trial's number within its search")
    step: int = Field(description="the report's step (mini-batches done)")
    status: str = Field(description="the trial's status now")
    seconds: float = Field(description="when it was reported, in seconds since the search started")
    values: dict[str, float] = Field(description="each objective's reported value (the user's units)")
    bounded: dict[str, float | None] = Field(
        default_factory=dict, description="each constrained metric's value at this point (carried forward)"
    )
    params: dict[str, Any] = Field(description="the trial's configuration")


class PointOut(SQLModel):
    trial_id: int
    step: int
    values: list[float | None] = Field(description="one per objective, in `objectives` order; null: non-finite")
    violation: float | None = Field(description="0: feasible; null: a bounded value unknown or non-finite")
    kind: Kind


class CountsOut(SQLModel):
    front: int = 0
    dominated: int = 0
    infeasible: int = 0
    non_finite: int = 0
    no_points: int = Field(default=0, description="trials only: those with no point yet (not every objective reported)")


class ParetoOut(SQLModel):
    search_id: int
    pareto: bool = Field(description="whether the search ranks trials by Pareto order (2-4 objectives or constraints)")
    objectives: list[ObjectiveOut]
    constraints: list[ConstraintOut]
    reference: dict[str, float] | None = Field(description="what volumes are measured up to (objective -> value)")
    reference_derived: bool = Field(
        description="true: the spec gives none; derived from every point (worst of each objective, pushed out)"
    )
    front: list[FrontPointOut] = Field(description="the feasible non-dominated points, by the first objective")
    points: list[PointOut] = Field(
        description="every point; past max_points, the front and each trial's last point, the rest evenly thinned"
    )
    points_total: int = Field(description="points in all, before thinning")
    counts: CountsOut = Field(description="points by kind")
    trials: CountsOut = Field(description="trials by their best point's kind")
    hypervolume: float | None = Field(description="of the front now, up to `reference` (null: no reference)")
    hypervolume_curve: list[tuple[float, float]] = Field(
        description="[[seconds since the search started, hypervolume], ...], one per change"
    )
    note: str | None = None


# ---- the computation -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchPoint:
    """One point of a search: a trial's report step, its losses, its violation and its bounded values."""

    trial_id: int
    step: int
    at: float
    losses: Losses
    violation: float
    bounded: dict[str, float | None]


def read_points(spec: SearchSpec, reports: Sequence[ReportRow]) -> list[SearchPoint]:
    """The points of a search's `reports` (any order), by trial id then step (see the module docstring)."""
    by_trial: dict[int, list[tuple[int, int, ReportRow]]] = {}
    for r in reports:
        by_trial.setdefault(r.trial_id, []).append((r.step, r.attempt, r))
    out: list[SearchPoint] = []
    for tid in sorted(by_trial):
        reader = PointReader(spec.objectives, spec.bounds)
        for step, row in latest_per_step(by_trial[tid]):
            p = reader.read(step, row.metrics or {})
            if p is not None:
                bounded = {b.name: reader.known[b.name] for b in spec.bounds if b.name in reader.known}
                out.append(SearchPoint(tid, step, row.at, p[1], p[2], bounded))
    return out


def _finite(losses: Losses) -> bool:
    return all(math.isfinite(v) for v in losses)


def kinds_of(points: Sequence[SearchPoint]) -> list[Kind]:
    """Each point's kind (see the module docstring)."""
    on_front = set(front([p.losses for p in points], [p.violation for p in points]))
    out: list[Kind] = []
    for i, p in enumerate(points):
        if not _finite(p.losses):
            out.append("non_finite")
        elif p.violation != 0.0:
            out.append("infeasible")
        else:
            out.append("front" if i in on_front else "dominated")
    return out


def _weakly_dominates(a: Losses, b: Losses) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True))


def hypervolume_curve(
    points: Sequence[SearchPoint], reference: Losses, t0: float, max_entries: int = MAX_CURVE
) -> list[tuple[float, float]]:
    """[seconds since `t0`, hypervolume] after each report that changed the volume of the feasible front
    of the points reported until then (reports in time order; at most `max_entries`, evenly thinned with
    the last kept). The front is kept incrementally: a point weakly dominated by it changes nothing."""
    order = sorted(
        (i for i, p in enumerate(points) if p.violation == 0.0 and _finite(p.losses)),
        key=lambda i: (points[i].at, points[i].trial_id, points[i].step),
    )
    held: list[Losses] = []
    curve: list[tuple[float, float]] = []
    last = 0.0
    for i in order:
        p = points[i].losses
        if any(_weakly_dominates(q, p) for q in held):
            continue
        held = [q for q in held if not _weakly_dominates(p, q)] + [p]
        volume = hypervolume(held, reference)
        if volume != last:
            last = volume
            curve.append((round(max(0.0, points[i].at - t0), 3), volume))
    return _thin(curve, max_entries)


def _thin(curve: list[tuple[float, float]], n: int) -> list[tuple[float, float]]:
    if len(curve) <= n:
        return curve
    stride = len(curve) / n
    return [curve[int(i * stride)] for i in range(n - 1)] + [curve[-1]]


def _shown(points: Sequence[SearchPoint], kinds: Sequence[Kind], max_points: int) -> list[int]:
    """The indices of the points to send: all when at most `max_points`, else every front point and each
    trial's last point, the rest evenly thinned to fill `max_points` (in index order)."""
    n = len(points)
    if n <= max_points:
        return list(range(n))
    keep = {i for i in range(n) if kinds[i] == "front"}
    last: dict[int, int] = {}
    for i, p in enumerate(points):
        last[p.trial_id] = i
    keep |= set(last.values())
    rest = [i for i in range(n) if i not in keep]
    room = max(0, max_points - len(keep))
    if room and rest:
        stride = len(rest) / room
        keep |= {rest[int(j * stride)] for j in range(min(room, len(rest)))}
    return sorted(keep)


def _values(spec: SearchSpec, losses: Losses) -> list[float | None]:
    return [finite(o.value(v)) if math.isfinite(v) else None for o, v in zip(spec.objectives, losses, strict=True)]


def _t0(row: SearchRow) -> float:
    return row.started_at if row.started_at is not None else row.created_at


def reference_of(spec: SearchSpec, points: Sequence[SearchPoint]) -> tuple[Losses | None, bool]:
    """The reference as losses and whether it was derived (the spec's, else `default_reference`)."""
    given = spec.reference_losses()
    if given is not None:
        return given, False
    return default_reference([p.losses for p in points]), True


def pareto_out(store: ControllerStore, search_id: int, max_points: int = MAX_POINTS) -> ParetoOut | None:
    """The search's trade-offs (module docstring); None when there is no such search. `max_points` bounds
    `points` (0: none; the counts and the front are over every point)."""
    row = store.search(search_id)
    if row is None:
        return None
    spec = parsed_spec(row)
    if spec is None:
        return ParetoOut(
            search_id=search_id, pareto=False, objectives=[], constraints=[], reference=None,
            reference_derived=False, front=[], points=[], points_total=0, counts=CountsOut(), trials=CountsOut(),
            hypervolume=None, hypervolume_curve=[], note=_NO_SPEC,
        )  # fmt: skip
    trials = {t.id: t for t in store.trials(search_id) if t.id is not None}
    points = read_points(spec, store.search_reports(search_id))
    kinds = kinds_of(points)
    objectives = spec.objectives
    ref, derived = reference_of(spec, points)
    t0 = _t0(row)

    counts = CountsOut(**{k: kinds.count(k) for k in KINDS})
    best: dict[int, int] = {}  # trial id -> index in KINDS of its best point's kind
    for p, k in zip(points, kinds, strict=True):
        best[p.trial_id] = min(best.get(p.trial_id, len(KINDS)), KINDS.index(k))
    per_trial = {k: sum(1 for v in best.values() if v == i) for i, k in enumerate(KINDS)}
    trial_counts = CountsOut(**per_trial, no_points=sum(1 for tid in trials if tid not in best))

    on_front = sorted((i for i, k in enumerate(kinds) if k == "front"), key=lambda i: (points[i].losses, i))
    front_out = []
    for i in on_front:
        p = points[i]
        t = trials.get(p.trial_id)
        front_out.append(
            FrontPointOut(
                trial_id=p.trial_id,
                number=t.number if t else -1,
                step=p.step,
                status=str(t.status) if t else "",
                seconds=round(max(0.0, p.at - t0), 3),
                values={o.name: o.value(v) for o, v in zip(objectives, p.losses, strict=True)},
                bounded={k: finite(v) for k, v in p.bounded.items()},
                params=t.params if t else {},
            )
        )
    shown = _shown(points, kinds, max_points) if max_points > 0 else []
    points_out = [
        PointOut(
            trial_id=points[i].trial_id,
            step=points[i].step,
            values=_values(spec, points[i].losses),
            violation=finite(points[i].violation),
            kind=kinds[i],
        )
        for i in shown
    ]
    volume = None
    curve: list[tuple[float, float]] = []
    if ref is not None:
        volume = hypervolume([points[i].losses for i in on_front], ref)
        curve = hypervolume_curve(points, ref, t0)
    return ParetoOut(
        search_id=search_id,
        pareto=spec.pareto,
        objectives=[ObjectiveOut(name=o.name, goal=o.goal) for o in objectives],
        constraints=[ConstraintOut(name=c.name, min=c.min, max=c.max) for c in spec.constraints],
        reference=None if ref is None else {o.name: o.value(v) for o, v in zip(objectives, ref, strict=True)},
        reference_derived=derived,
        front=front_out,
        points=points_out,
        points_total=len(points),
        counts=counts,
        trials=trial_counts,
        hypervolume=volume,
        hypervolume_curve=curve,
        note=None if points else "no trial has reported every objective yet",
    )


# ---- per trial (export) --------------------------------------------------------------------------


@dataclass(frozen=True)
class TrialOutcome:
    """What the export writes of one trial: each objective at its last point (None: non-finite), that
    point's violation (None: a bounded value unknown or non-finite) and whether any of its points is on
    the search's front."""

    values: dict[str, float | None]
    violation: float | None
    on_front: bool


def trial_outcomes(spec: SearchSpec, reports: Sequence[ReportRow]) -> dict[int, TrialOutcome]:
    """Trial id -> `TrialOutcome` of a search's `reports`, for the trials with at least one point."""
    points = read_points(spec, reports)
    kinds = kinds_of(points)
    out: dict[int, TrialOutcome] = {}
    fronted = {p.trial_id for p, k in zip(points, kinds, strict=True) if k == "front"}
    for p in points:  # by trial then step: the last one of each trial wins
        values = dict(zip([o.name for o in spec.objectives], _values(spec, p.losses), strict=True))
        out[p.trial_id] = TrialOutcome(values, finite(p.violation), p.trial_id in fronted)
    return out
