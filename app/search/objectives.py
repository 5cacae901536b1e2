"""What a search optimises and bounds, as the ranking code reads them: `Objective` (a reported metric and
which way is better) and `Bound` (the interval a reported value must lie in). Dependency-free, so that the
spec can use them without importing numpy (a spec error is refused before anything heavy is imported).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Objective:
    """One objective: a reported metric and which way is better."""

    name: str
    goal: str = "maximize"  # or "minimize"

    def loss(self, value: float) -> float:
        return -value if self.goal == "maximize" else value

    def value(self, loss: float) -> float:
        """The reported value a loss came from (`loss` inverted)."""
        return -loss if self.goal == "maximize" else loss


@dataclass(frozen=True)
class Bound:
    """One constraint: the reported value `name` must lie within [`low`, `high`] (None: unbounded there)."""

    name: str
    low: float | None = None
    high: float | None = None

    def excess(self, value: float | None) -> float:
        """How far `value` is outside the bound, relative to the bound's size (0: inside; inf: unknown or
        not finite). Relative, so that a search's constraints in different units add up fairly."""
        if value is None or not math.isfinite(value):
            return math.inf
        over = 0.0
        if self.high is not None and value > self.high:
            over += (value - self.high) / max(1.0, abs(self.high))
        if self.low is not None and value < self.low:
            over += (self.low - value) / max(1.0, abs(self.low))
        return over
