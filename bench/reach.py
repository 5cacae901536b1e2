"""When a search reaches a value: the time-to-target accounting every LCBench system is scored by.

Shared by `bench/lcbench.py` (Quanta's runs and the tables) and `bench/syne_lcbench.py` (Syne Tune's
runs), so that both sides of the comparison count a run's reports the same way. Pure functions over
reports given as (seconds, value) pairs, higher values better, in any order.
"""

from __future__ import annotations

from collections.abc import Iterable


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
