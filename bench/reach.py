"""When a search reaches a value: the time-to-target accounting every LCBench system is scored by.

Shared by `bench/lcbench.py` (Quanta's runs and the tables), `bench/syne_lcbench.py` (Syne Tune's
runs) and `bench/dehb_lcbench.py` (DEHB's), so that every side of the comparison counts a run's reports
the same way. Pure functions over reports given as (seconds, value) pairs, higher values better, in any
order; `PeerRun` is what a peer's search hands back (also across the peer environment's process
boundary: `bench/peer_env.py`).

For two objectives (`bench/lcbench_mo.py`): `FrontTracker`, `hypervolume`, `hypervolume_curve` and
`time_to_hypervolume` over reports given as (seconds, accuracy, seconds of training), accuracy higher and
training time lower better, measured up to a reference point (accuracy, seconds of training).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class PeerRun:
    """One peer search on the simulated clock: `time_to_target` maps a target's name to the simulated
    seconds of the first report at or above it (None = never); `best_so_far` [(simulated s, best)];
    trials (or jobs) started; the simulated seconds it ran and the wall seconds it took."""

    method: str
    time_to_target: dict[str, float | None]
    best_so_far: list[tuple[float, float]] = field(default_factory=list)
    started: int = 0
    sim_seconds: float = 0.0
    wall_seconds: float = 0.0


def time_to_target(reports: Iterable[tuple[float, float]], target: float) -> float | None:
    """Seconds to the first report at or above `target` in `reports` [(seconds, value)], None if none."""
    return min((t for t, v in reports if v >= target), default=None)


def improvements(reports: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The best-so-far curve of `reports`: the (time, value) points where the running maximum rises."""
    out: list[tuple[float, float]] = []
    for t, v in sorted(reports):
        if not out or v > out[-1][1]:
            out.append((t, v))
    return out


# ---- hypervolume: two objectives, accuracy (higher better) and seconds of training (lower better) ----


class FrontTracker:
    """The front of (accuracy, seconds) points seen so far and the hypervolume it dominates up to the
    `reference` point (accuracy, seconds): the worst of both that still counts. `add` returns the volume
    after the point; a point no better than the reference in both, or weakly dominated by the front, adds
    nothing. The volume is `quanta.search.pareto.hypervolume` (moocore) of the front, as losses."""

    def __init__(self, reference: tuple[float, float]):
        self.reference = (float(reference[0]), float(reference[1]))
        self.front: list[tuple[float, float]] = []
        self.hv = 0.0

    def add(self, accuracy: float, seconds: float) -> float:
        ref_acc, ref_s = self.reference
        if not (math.isfinite(accuracy) and math.isfinite(seconds)) or accuracy <= ref_acc or seconds >= ref_s:
            return self.hv
        if any(a >= accuracy and s <= seconds for a, s in self.front):
            return self.hv
        self.front = [(a, s) for a, s in self.front if not (accuracy >= a and seconds <= s)]
        self.front.append((accuracy, seconds))
        self.hv = hypervolume(self.front, self.reference)
        return self.hv


def hypervolume(points: Iterable[tuple[float, float]], reference: tuple[float, float]) -> float:
    """The hypervolume of (accuracy, seconds) points up to `reference` (accuracy, seconds), computed by
    `quanta.search.pareto.hypervolume` on their losses (-accuracy, seconds)."""
    from quanta.search.pareto import hypervolume as volume

    return volume([(-a, s) for a, s in points], (-reference[0], reference[1]))


def hypervolume_curve(
    reports: Iterable[tuple[float, float, float]], reference: tuple[float, float]
) -> list[tuple[float, float]]:
    """(seconds, hypervolume so far) at every report (seconds, accuracy, train seconds), in time order,
    that raises the volume of the front of all the reports up to it."""
    tracker = FrontTracker(reference)
    out: list[tuple[float, float]] = []
    for t, acc, secs in sorted(reports):
        before = tracker.hv
        if tracker.add(acc, secs) > before:
            out.append((t, tracker.hv))
    return out


def time_to_hypervolume(
    reports: Iterable[tuple[float, float, float]], reference: tuple[float, float], goal: float
) -> float | None:
    """Seconds to the first report after which the front of the reports so far dominates at least `goal`
    of hypervolume up to `reference` (None: never)."""
    return next((t for t, hv in hypervolume_curve(reports, reference) if hv >= goal), None)
