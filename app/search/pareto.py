"""Pareto ranking for searches with several objectives or with constraints: pure arithmetic on loss vectors.

A *point* is what one report of one trial shows: its objectives as losses (each oriented smaller-is-better:
a maximised objective negated), and its *violation* of the search's constraints (0: feasible; the sum of
each constraint's excess relative to its bound, `inf` while a constrained value is unknown). A point
with a non-finite loss (a NaN or infinite report) is kept and ranked last, never dropped.

- `losses_of(metrics, objectives)`: a report's losses, or None while one objective is absent from it.
- `violation(metrics, constraints)`: how far a report's values are outside the bounds.
- `order(points, violations)`: indices best first: the feasible points by non-dominated rank (moocore's
  `pareto_rank`), each rank spread by an epsilon-net (Syne Tune's MO-ASHA tie-break), then the
  infeasible by violation, then those with a non-finite loss.
- `front(points, violations)`: the feasible, finite, non-dominated points (moocore's `is_nondominated`).
- `chebyshev(points, violations, weights)`: one loss per point, ParEGO's augmented Chebyshev scalarisation
  of the objectives scaled to [0, 1] over the feasible finite points, the infeasible after every feasible
  one by violation, the non-finite last: what a single-loss model ranks by for one choice of weights.
- `hypervolume(points, reference)`: the volume they dominate up to `reference` (moocore's `hypervolume`).

moocore is used for the sort, the front and the volume: it is maintained, C-backed and exact for any number
of objectives; the epsilon-net is a dozen lines, and neither moocore nor pymoo ships it.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import moocore
import numpy as np

# Re-exported: the spec's objectives and bounds, defined where the spec can import them without numpy.
from quanta.search.objectives import Bound as Bound
from quanta.search.objectives import Objective as Objective

Losses = tuple[float, ...]


def losses_of(metrics: Mapping[str, float | None], objectives: Sequence[Objective]) -> Losses | None:
    """The losses of a report's `metrics`, one per objective in order; None when an objective is absent.
    A value stored as None (it was non-finite when reported) is an infinite loss: ranked last, kept."""
    out: list[float] = []
    for o in objectives:
        if o.name not in metrics:
            return None
        v = metrics[o.name]
        out.append(math.inf if v is None or not math.isfinite(v) else o.loss(float(v)))
    return tuple(out)


def violation(metrics: Mapping[str, float | None], bounds: Sequence[Bound]) -> float:
    """The summed excess of the report's values over `bounds` (0: feasible; inf: a bounded value unknown)."""
    return float(sum(b.excess(metrics.get(b.name)) for b in bounds))


def _finite(points: Sequence[Losses]) -> np.ndarray:
    return np.array([all(math.isfinite(v) for v in p) for p in points], dtype=bool)


# Up to this many points the epsilon-net computes all pairwise distances at once (n^2 floats); past it the
# matrix costs more than it saves (measured: 2-4x faster up to 500 points, slower at 800).
_NET_MATRIX_MAX = 512


def epsilon_net(points: np.ndarray) -> list[int]:
    """An order of `points` (rows) that spreads them: the best in the first objective first, then each
    next one the farthest (Euclidean, each objective scaled to [0, 1] over these points so that units do
    not decide) from those already taken (Clarkson's epsilon-net, as Syne Tune's MO-ASHA orders a front).
    Deterministic: ties go to the lower index."""
    n = len(points)
    if n <= 1:
        return list(range(n))
    span = points.max(axis=0) - points.min(axis=0)
    scaled = (points - points.min(axis=0)) / np.where(span > 0, span, 1.0)
    first = int(np.lexsort(scaled.T[::-1])[0])  # best in objective 0, ties by the next objectives
    taken = [first]
    if n <= _NET_MATRIX_MAX:
        # All distances at once (the same arithmetic as one row at a time, so the same order): a rung's
        # ranks are sorted every round of a large search, and a numpy call per row dominated it.
        diff = scaled[:, None, :] - scaled[None, :, :]
        dist = np.sqrt(np.add.reduce(diff * diff, axis=2))
        nearest = dist[first].copy()
        nearest[first] = -1.0
        for _ in range(n - 1):
            nxt = int(nearest.argmax())
            taken.append(nxt)
            np.minimum(nearest, dist[nxt], out=nearest)
            nearest[nxt] = -1.0  # the taken stay at -1: no distance is below it
        return taken
    nearest = np.linalg.norm(scaled - scaled[first], axis=1)
    nearest[first] = -1.0
    for _ in range(n - 1):
        nxt = int(np.argmax(nearest))
        taken.append(nxt)
        nearest = np.minimum(nearest, np.linalg.norm(scaled - scaled[nxt], axis=1))
        nearest[nxt] = -1.0
    return taken


def order(points: Sequence[Losses], violations: Sequence[float]) -> list[int]:
    """Indices of `points` best first (see the module docstring): feasible and finite by non-dominated
    rank, each rank in epsilon-net order; then infeasible by violation (ties by index); then non-finite."""
    n = len(points)
    if n == 0:
        return []
    finite = _finite(points)
    feasible = [i for i in range(n) if finite[i] and violations[i] == 0.0]
    infeasible = sorted((i for i in range(n) if finite[i] and violations[i] != 0.0), key=lambda i: (violations[i], i))
    broken = [i for i in range(n) if not finite[i]]
    out: list[int] = []
    if feasible:
        x = np.array([points[i] for i in feasible], dtype=float)
        ranks = moocore.pareto_rank(x) if x.shape[1] > 1 else _ranks_1d(x[:, 0])
        for r in range(int(ranks.max()) + 1):
            members = np.flatnonzero(ranks == r)
            out.extend(feasible[int(members[j])] for j in epsilon_net(x[members]))
    return out + infeasible + broken


# ParEGO's augmentation (Knowles 2006): the weighted sum's share, so that of two points with the same worst
# weighted objective the one better in the others scores better (weakly dominated points do not tie).
CHEBYSHEV_RHO = 0.05


def chebyshev(points: Sequence[Losses], violations: Sequence[float], weights: Sequence[float]) -> list[float]:
    """One loss per point, smaller better (see the module docstring). A feasible finite point scores
    max_i(w_i f_i) + rho * sum_i(w_i f_i), where f_i is its loss i scaled to [0, 1] between the feasible
    finite points' least and greatest (an objective they all share is 0), so it lies in [0, 1 + rho]; an
    infeasible finite point scores in [2, 3), growing with its violation (3 when the violation is inf);
    a point with a non-finite loss scores 4. `weights`: one per objective, non-negative."""
    n = len(points)
    if n == 0:
        return []
    w = np.asarray(weights, dtype=float)
    finite = _finite(points)
    out = np.full(n, 4.0)
    feasible = [i for i in range(n) if finite[i] and violations[i] == 0.0]
    if feasible:
        x = np.array([points[i] for i in feasible], dtype=float)
        lo, hi = x.min(axis=0), x.max(axis=0)
        f = (x - lo) / np.where(hi > lo, hi - lo, 1.0)
        out[feasible] = np.max(w * f, axis=1) + CHEBYSHEV_RHO * np.sum(w * f, axis=1)
    for i in range(n):
        if finite[i] and violations[i] != 0.0:
            v = float(violations[i])
            out[i] = 3.0 if math.isinf(v) else 2.0 + v / (1.0 + v)
    return [float(v) for v in out]


def _ranks_1d(x: np.ndarray) -> np.ndarray:
    """Non-dominated ranks of one objective: equal values share a rank."""
    _, inverse = np.unique(x, return_inverse=True)
    return np.asarray(inverse).reshape(-1)


def front(points: Sequence[Losses], violations: Sequence[float]) -> list[int]:
    """Indices of the feasible, finite points no other such point dominates, in index order (equal points
    all stay)."""
    finite = _finite(points)
    keep = [i for i in range(len(points)) if finite[i] and violations[i] == 0.0]
    if not keep:
        return []
    x = np.array([points[i] for i in keep], dtype=float)
    mask = moocore.is_nondominated(x, keep_weakly=True)
    return [keep[j] for j in np.flatnonzero(mask)]


def hypervolume(points: Sequence[Losses], reference: Losses) -> float:
    """The volume the points (losses) dominate up to `reference` (losses too); points not better than the
    reference in every objective add nothing. 0 for no points."""
    ref = np.asarray(reference, dtype=float)
    x = np.array([p for p in points if all(math.isfinite(v) for v in p)], dtype=float).reshape(-1, len(ref))
    x = x[np.all(x < ref, axis=1)]
    if len(x) == 0:
        return 0.0
    return float(moocore.hypervolume(x, ref=ref))


def reaches(losses: Losses, target: Losses) -> bool:
    """Whether a point is at least as good as `target` (losses) in every objective."""
    return all(math.isfinite(v) and v <= t for v, t in zip(losses, target, strict=True))


# A point of one trial: (its step, its losses, its violation).
Point = tuple[int, Losses, float]


class PointReader:
    """One trial's points as its reports arrive, in step order: `read(step, metrics)` returns the report's
    point, or None when the report names no objective or an objective has not been reported yet. Values
    are carried forward: a value reported once (a parameter count at step 0) holds for later reports until
    reported again, so a report is judged on the latest value of each objective and bounded metric up to
    it. `seen` is every objective and bounded metric reported so far (what a trial that never reported one
    is failed for)."""

    def __init__(self, objectives: Sequence[Objective], bounds: Sequence[Bound]):
        self.objectives = tuple(objectives)
        self.bounds = tuple(bounds)
        self._names = {o.name for o in self.objectives} | {b.name for b in self.bounds}
        self.known: dict[str, float | None] = {}  # the latest value of each objective and bounded metric

    def copy(self) -> PointReader:
        """A reader that goes on from this one's values (a fork's, from its parent's)."""
        other = PointReader(self.objectives, self.bounds)
        other.known = dict(self.known)
        return other

    @property
    def seen(self) -> set[str]:
        return set(self.known)

    def missing(self) -> list[str]:
        """The objectives never reported, in order."""
        return [o.name for o in self.objectives if o.name not in self.known]

    def read(self, step: int, metrics: Mapping[str, float | None]) -> Point | None:
        fresh = False
        for name in self._names.intersection(metrics):
            self.known[name] = metrics[name]
            fresh = fresh or any(o.name == name for o in self.objectives)
        if not fresh:
            return None
        losses = losses_of(self.known, self.objectives)
        if losses is None:
            return None
        return (step, losses, violation(self.known, self.bounds))


def trial_points(
    reports: Sequence[tuple[int, Mapping[str, float | None]]], objectives: Sequence[Objective], bounds: Sequence[Bound]
) -> list[Point]:
    """The points of one trial's `reports` ((step, metrics) in step order; one per step: its latest
    attempt's), as `PointReader` reads them."""
    reader = PointReader(objectives, bounds)
    return [p for step, metrics in reports if (p := reader.read(step, metrics)) is not None]


def default_reference(points: Sequence[Losses]) -> Losses | None:
    """The reference point of a search that gives none: per objective, the worst finite loss among
    `points`, pushed out by a tenth of their range (1e-9 at least), so that every point counts a little.
    None for no finite point. Volumes measured up to it are comparable within one search only."""
    x = np.array([p for p in points if all(math.isfinite(v) for v in p)], dtype=float)
    if x.size == 0:
        return None
    hi, lo = x.max(axis=0), x.min(axis=0)
    return tuple(float(h + max(0.1 * (h - lo_), 1e-9)) for h, lo_ in zip(hi, lo, strict=True))


def point_at(points: Sequence[Point], level: int) -> Point | None:
    """A trial's point at rung `level`: its first report at or past the rung (steps in order), as ASHA
    judges a rung at the first report past it; None until it has reported there."""
    for p in points:
        if p[0] >= level:
            return p
    return None


def put_point(points: list[Point], point: Point) -> None:
    """Put `point` into a trial's points held in step order: a step reported again (a later attempt, after
    a restart from an earlier checkpoint) replaces the earlier one's point."""
    step = point[0]
    if not points or points[-1][0] < step:
        points.append(point)
        return
    for i, p in enumerate(points):
        if p[0] == step:
            points[i] = point
            return
        if p[0] > step:
            points.insert(i, point)
            return
