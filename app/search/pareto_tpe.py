"""`ParetoTPE`: the multi-fidelity TPE (`quanta.search.multifidelity`) for searches with several objectives
or with constraints, in the manner of Optuna's multi-objective TPE (Ozaki et al. 2020).

TPE reads only the order of its trials' scores (it splits them into the best few and the rest). With
several objectives there is no single loss to order by, so at each rung the trials that reached it are
ordered by `quanta.search.pareto.order` (feasible ones by non-dominated rank, each rank spread by an
epsilon-net; infeasible ones after them by violation, so that infeasible regions are proposed less) and
each trial's score there is its position in that order over the number ranked. The scores are recomputed
at every ask, since a new point can move every other one's rank. A search whose `search.algorithm` is
`tpe` gets the same with one rung, the full budget (the order of finished trials).

With `acquisition="gp"` (the default for `bohb`) a model ask is ParEGO's (Knowles 2006) on the GP of
`quanta.search.gp_proposal`: weights over the objectives are drawn from the flat Dirichlet by the ask's
seed, each trial's point at the level is scalarised by `quanta.search.pareto.chebyshev` with them, and the
GP's expected improvement on those losses picks the configuration. Each ask so aims at one part of the
front, and over the asks at all of it. The GP's kernel parameters are fitted on the Pareto positions of
the fitted trials among themselves, which do not depend on the ask.

Points arrive through `observe_point(number, step, losses, violation)` (the controller reads them from the
reports with `quanta.search.pareto.PointReader`); `history()` keeps them in `HistoryItem.points` and
`restore` replays them, so a rebuilt searcher asks what the original would have asked. Earlier searches'
trials (warm start) carry one objective and are not ranked here. Pure: no devices, no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Self

import numpy as np

from quanta.search.multifidelity import MultiFidelityTPE
from quanta.search.pareto import Losses, Point, chebyshev, order, point_at, put_point
from quanta.search.searcher import HistoryItem

__all__ = ["ParetoTPE"]


class ParetoTPE(MultiFidelityTPE):
    """`MultiFidelityTPE` scoring trials at each rung by their Pareto rank there (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any):
        """`MultiFidelityTPE`'s arguments."""
        self._mo_points: dict[int, list[Point]] = {}  # each trial's points, in step order
        # Memo, per rung: the points there and the scores they were ranked to. A rung's points change only
        # when a trial first reports past it, while every ask reads every rung: sorting them again at each
        # ask made an ask cost a Pareto sort per rung (tens of ms at 1,000 trials).
        self._mo_ranked: dict[int, tuple[dict[int, Point], dict[int, float]]] = {}
        super().__init__(*args, **kwargs)

    def observe_point(self, number: int, step: int, losses: Losses, violation: float) -> None:
        """Record trial `number`'s point at `step` (a step seen again replaces its point)."""
        if number not in self._docs:
            raise KeyError(f"trial {number} was never asked")
        put_point(
            self._mo_points.setdefault(number, []), (int(step), tuple(float(v) for v in losses), float(violation))
        )

    def history(self) -> list[HistoryItem]:
        points = self._mo_points
        return [replace(h, points=tuple(points.get(h.number, ()))) for h in super().history()]

    def _replay(self, history: Sequence[HistoryItem]) -> Self:
        super()._replay(history)
        for item in history:
            for step, losses, violation in item.points:
                self.observe_point(item.number, step, losses, violation)
        return self

    def _read_levels(self) -> int | None:
        """Score every trial at every rung by its position in the Pareto order of the points there (see
        the module docstring); return the highest rung with `min_points` trials (None: none has)."""
        points = self._mo_points
        n = len(self._order)
        top: int | None = None
        for i, level in enumerate(self.levels):
            at = {num: p for num, pts in points.items() if (p := point_at(pts, level)) is not None}
            known = self._mo_ranked.get(i)
            if known is not None and known[0] == at:
                scores = known[1]
            else:
                nums = list(at)
                ranked = order([at[k][1] for k in nums], [at[k][2] for k in nums])
                scores = {nums[j]: pos / len(nums) for pos, j in enumerate(ranked)}
                self._mo_ranked[i] = (at, scores)
            self._at_level[i] = scores
            arr = np.full(max(n, 1), math.inf)
            for num, v in scores.items():
                arr[self._position[num]] = v
            self._level_loss[i] = arr
            if len(scores) >= self.min_points:
                top = i
        self._dirty.clear()
        return top

    def _gp_losses(self, level: int, seed: int) -> Mapping[int, float]:
        """ParEGO's losses at rung `level` for the ask seeded `seed` (see the module docstring). Called after
        `_read_levels`, which keeps every rung's points in `_mo_ranked`."""
        at = self._mo_ranked[level][0]
        nums = sorted(at)
        if not nums:
            return {}
        width = len(at[nums[0]][1])
        # A stream of its own, so that the weights do not follow the candidates the GP draws from `seed`.
        weights = np.random.default_rng([seed, 0x9A2E]).dirichlet(np.ones(width))
        scores = chebyshev([at[k][1] for k in nums], [at[k][2] for k in nums], weights.tolist())
        return dict(zip(nums, scores, strict=True))

    def _gp_fit_losses(self, level: int) -> Callable[[Sequence[int]], Sequence[float]] | None:
        """The kernel's parameters are fitted on the fitted trials' positions in the Pareto order of their
        own points at rung `level`: ParEGO's losses change with each ask's weights, and parameters fitted
        on one ask's would not be what a searcher rebuilt from the history fits for a later ask (nor kept
        from one ask to the next: over 256 trials the fitted set, chosen by loss, would change each ask)."""
        at = self._mo_ranked[level][0]

        def positions(numbers: Sequence[int]) -> list[float]:
            ranked = order([at[k][1] for k in numbers], [at[k][2] for k in numbers])
            out = [0.0] * len(numbers)
            for pos, j in enumerate(ranked):
                out[j] = pos / len(numbers)
            return out

        return positions
