"""Where searchers are wired: `make_searcher` builds the searcher a search's `search` block asks for.

It sits above the searchers it chooses between (`quanta.search.searcher`'s TPE and random search, the
multi-fidelity TPE of `quanta.search.multifidelity`, which subclasses TPE), so that none of them imports
another to build it. It takes plain values and the `search` block (`quanta.search.knobs`), never the whole
spec: the rungs a multi-fidelity searcher fits at are given in steps (`SearchSpec.searcher_rungs` says
which settings they come from). Pure: no devices, no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from quanta.search.knobs import SearchAlgoSpec
from quanta.search.multifidelity import MultiFidelityTPE
from quanta.search.pareto_tpe import ParetoTPE
from quanta.search.searcher import HistoryItem, HyperOptSearcher, RandomSearcher, Searcher
from quanta.search.space import point_vals

__all__ = ["make_searcher"]


def make_searcher(
    space: Mapping[str, Any],
    seed: int,
    search: SearchAlgoSpec,
    *,
    rungs: Sequence[int] = (),
    history: Sequence[HistoryItem] = (),
    warm: Sequence[HistoryItem] = (),
    pareto: bool = False,
) -> Searcher:
    """The searcher `search` asks for over `space`, seeded with `seed`, rebuilt from `history` (empty: a
    fresh search). Its first trials try `search.points_to_evaluate`; `warm` (earlier searches' trials,
    same space; see `quanta.db.warm`) seeds its model. `rungs`: the rungs in steps a `bohb` searcher fits at
    (required for it, ignored by the others). `pareto`: the search has several objectives or constraints:
    `bohb` and `tpe` then rank trials by Pareto order (`quanta.search.pareto_tpe.ParetoTPE`, told through
    `observe_point`). Given the same history and warm items, it asks the same.
    Raises ValueError for `bohb` without rungs and `SpaceError` for a point outside the space."""
    points = [point_vals(space, p, f"search.points_to_evaluate[{i}]") for i, p in enumerate(search.points_to_evaluate)]
    if pareto and search.algorithm in ("bohb", "tpe"):
        # Several objectives or constraints: TPE on Pareto ranks, at the rungs (bohb) or on finished trials.
        levels = tuple(rungs) if search.algorithm == "bohb" else tuple(rungs[-1:])
        if not levels:
            raise ValueError("a Pareto searcher needs the rungs (at least the full budget)")
        return ParetoTPE.restore(
            space,
            seed,
            search.n_startup,
            history,
            levels=levels,
            min_points=search.min_points,
            points=points,
            warm=warm,
            random_fraction=search.random_fraction if search.algorithm == "bohb" else 0.0,
            gamma=search.gamma,
            # bohb's model asks are ParEGO's on the GP unless tpe is asked for; `tpe` stays TPE, as with one
            # objective.
            acquisition=(search.acquisition or "gp") if search.algorithm == "bohb" else "tpe",
        )
    if search.algorithm == "bohb":
        return MultiFidelityTPE.restore(
            space,
            seed,
            search.n_startup,
            history,
            levels=rungs,
            min_points=search.min_points,
            points=points,
            warm=warm,
            random_fraction=search.random_fraction,
            gamma=search.gamma,
            acquisition=search.acquisition or "gp",
        )
    cls = HyperOptSearcher if search.algorithm == "tpe" else RandomSearcher
    return cls.restore(space, seed, search.n_startup, history, points=points, warm=warm)
