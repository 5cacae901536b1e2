"""When a search reaches a value: the time-to-target accounting every LCBench system is scored by.

Shared by `bench/lcbench.py` (Quanta's runs and the tables), `bench/syne_lcbench.py` (Syne Tune's
runs) and `bench/dehb_lcbench.py` (DEHB's), so that every side of the comparison counts a run's reports
the same way. Pure functions over reports given as (seconds, value) pairs, higher values better, in any
order; `PeerRun` is what a peer's search hands back (also across the peer environment's process
boundary: `bench/peer_env.py`).
"""

from __future__ import annotations

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
