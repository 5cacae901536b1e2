"""Budget levels ("rungs") and what a learning curve says at each of them.

Successive halving (ASHA, Hyperband) and multi-fidelity search (BOHB) look at every trial at the
same few budgets: rungs `r_min, r_min * eta, r_min * eta**2, ...` steps, the last one being the
trial's full budget. This module is the one definition of those rungs and of "a trial's value at a
rung", shared by the searcher (which learns from rung values) and the policies (which promote by
them), so that both always agree on what a trial has shown.

Losses here are oriented so that smaller is better (the searcher's convention: `MetricSpec.loss`).
Pure: no devices, no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["rungs", "value_at"]


def rungs(max_steps: int, min_steps: int, eta: float) -> tuple[int, ...]:
    """The rung budgets in steps, increasing, ending at `max_steps`.

    `min_steps` is the first rung (clamped to [1, max_steps]); each next rung is `eta` times the
    previous one (rounded to whole steps); a rung within a factor `sqrt(eta)` of `max_steps` is
    merged into it, so that the last two rungs are never nearly equal.
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    if eta <= 1:
        raise ValueError(f"eta must be > 1, got {eta}")
    r = float(max(1, min(int(min_steps), int(max_steps))))
    out: list[int] = []
    while r * math.sqrt(eta) < max_steps:
        step = round(r)
        if not out or step > out[-1]:
            out.append(step)
        r *= eta
    out.append(int(max_steps))
    return tuple(out)


def value_at(curve: Sequence[tuple[int, float]], rung: int) -> float | None:
    """A trial's loss at `rung`: the best (smallest) loss among its reports up to and including its
    first report at a step >= `rung`; None until it has reported at or past the rung.

    As in Ray Tune's ASHA, the rung is judged at the first report past it (rungs need not fall on a
    trainable's evaluation steps, and a trial is only known to have got there once it says so); the
    best value rather than that report's alone is taken because a search is won by the best report,
    and a noisy evaluation should not erase what the trial has already shown.
    """
    first = min((step for step, _ in curve if step >= rung), default=None)
    if first is None:
        return None
    best = min((loss for step, loss in curve if step <= first), default=math.inf)
    return best if math.isfinite(best) else None
