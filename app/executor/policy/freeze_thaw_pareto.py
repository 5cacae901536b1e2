"""Freeze-thaw's index for searches with several objectives or constraints (`SearchView.pareto`): expected
hypervolume improvement per device-second.

For a trial that has passed a level of the curve model (`quanta.search.curve_model`, fitted on the first
objective), the model forecasts its score at the last level as a Gaussian; at each of its Gauss-Hermite
nodes the trial's point would be that first objective with its other objectives as last reported (what a
trial's cost, size or latency are: properties of its configuration more than of its progress), and the
node's worth is the hypervolume that point adds to the search's feasible front (`quanta.search.pareto`).
The index is that expected improvement over the device-seconds to the last level. A trial whose last
report is infeasible adds nothing (index 0). A configuration not started yet is worth the mean of what the
recent trials were worth from their first level, over the cost of a whole trial (before any trial has a
point there: first looks first, an infinite index).

`front(snapshot_front, trials)` keeps the feasible front of every point seen (ended trials' included) in the
policy's state; `indices(...)` ranks the trials not running. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from quanta.executor.policy.types import TrialView
from quanta.search.curve_model import CurveModel
from quanta.search.pareto import Losses, default_reference, front, hypervolume

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(16)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()
RECENT = 16  # trials past the first level whose worth stands for a configuration not started yet


def loss_of_score(z: np.ndarray, goal: str, unit: bool) -> np.ndarray:
    """The first objective's loss (smaller is better) of model scores `z` (`curve_model.score` inverted)."""
    out: np.ndarray
    if not unit:
        out = -z  # score = value (maximize) or -value (minimize); loss = -value or value
        return out
    p = 1.0 / (1.0 + np.exp(-z))  # maximize: the fraction itself; minimize: its complement
    out = -p if goal == "maximize" else 1.0 - p
    return out


def merged_front(kept: Sequence[Sequence[float]], trials: Sequence[TrialView]) -> list[Losses]:
    """The feasible, finite front of the front `kept` (last round's) and every point of `trials`."""
    pts = [tuple(float(v) for v in f) for f in kept]
    pts += [p[1] for t in trials for p in t.points if p[2] == 0.0]
    if not pts:
        return []
    idx = front(pts, [0.0] * len(pts))
    return sorted({pts[i] for i in idx})


def indices(
    model: CurveModel,
    goal: str,
    trials: Sequence[TrialView],
    cps: dict[int, float],
    kept: list[Losses],
    reference: Losses | None,
) -> dict[int, float]:
    """Per trial of `trials` not running: its index (module docstring). `cps[t]`: its device-seconds per step;
    `kept`: the search's feasible front; `reference`: the spec's (None: `default_reference` of the front and
    the trials' points)."""
    model.fit()
    levels = model.levels
    last = len(levels) - 1
    ref = reference
    if ref is None:
        ref = default_reference([*kept, *(p[1] for t in trials for p in t.points)])
    base = hypervolume(kept, ref) if ref is not None else 0.0

    def worth(level: int, z: float, rest: tuple[float, ...]) -> float:
        """The expected hypervolume a trial at `level` with score `z` adds by the last level."""
        if ref is None:
            return 0.0
        if level >= last:
            nodes, weights = np.array([z]), np.array([1.0])
        else:
            mean, var = model.forecast(level, z)
            nodes = mean[0, -1] + math.sqrt(max(float(var[0, -1]), 0.0)) * _NODES
            weights = _WEIGHTS
        first = loss_of_score(nodes, goal, model.unit)
        gains = [hypervolume([*kept, (float(f), *rest)], ref) - base for f in first]
        return float(np.dot(weights, np.maximum(gains, 0.0)))

    out: dict[int, float] = {}
    recent: list[float] = []  # worth from the first level, per recent trial
    for t in sorted(trials, key=lambda t: (t.arrival, t.id)):
        z = model.scores.get(t.id, ())
        if not z or not t.points:
            continue
        _step, losses, violation = t.points[-1]
        if violation != 0.0 or not all(math.isfinite(v) for v in losses):
            if not t.running:
                out[t.id] = 0.0
            continue
        rest = tuple(losses[1:])
        recent.append(worth(0, z[0], rest))
        if t.running:
            continue
        passed = len(z)
        if passed > last:
            out[t.id] = 0.0  # ran its whole budget (it ends on its own)
            continue
        cost = cps[t.id] * max(levels[-1] - t.steps_done, 1.0)
        out[t.id] = worth(passed - 1, z[-1], rest) / cost
    newcomer = float(np.mean(recent[-RECENT:])) if recent else None
    for t in trials:
        if t.running or t.id in out:
            continue
        # not started, or past a level without a point yet (an objective not reported): as a newcomer
        out[t.id] = math.inf if newcomer is None else newcomer / (cps[t.id] * max(levels[-1] - t.steps_done, 1.0))
    return out
