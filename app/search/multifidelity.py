"""BOHB's searcher: TPE fitted on the highest rung that enough trials have reached (`MultiFidelityTPE`).

Same ask/observe/tell/restore contract as the searchers in `quanta.search.searcher`;
`quanta.search.factory.make_searcher` builds it for `search.algorithm: bohb` (the default). Pure: no devices,
no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self

import numpy as np
from hyperopt import rand
from hyperopt.tpe import _default_gamma

from quanta.search.fidelity import value_at
from quanta.search.gp_proposal import PENDING, GPProposer
from quanta.search.searcher import HistoryItem, HyperOptSearcher

__all__ = ["MultiFidelityTPE"]


class MultiFidelityTPE(HyperOptSearcher):
    """TPE that learns from partial learning curves, in the manner of BOHB (Falkner et al. 2018).

    Why this design: of the two ways to make TPE use unfinished trials, (a) scoring each trial by the
    rungs (see `quanta.search.fidelity.rungs`) it reached, or (b) telling it each trial's curve-fitted
    final value, (a) is chosen. It needs no curve fit (cheap at every ask, no extrapolation error on
    late bloomers), and the kill-time bug of plain TPE (a trial stopped early told its early metric
    as if it were final, compared with finished trials' finals) cannot happen: a trial is compared
    with others only by how far it got and its loss there.

    How trials are scored (BOHB's level): the highest rung at which at least `min_points` trials have a
    value; those trials have that value as their loss and every other trial (in flight below it, stopped
    below it, or failed) counts as pending, which HyperOpt's TPE scores as +inf (a pessimistic liar: it
    spreads parallel asks away from trials that are still running). TPE reads only the order of the
    scores (its split into the few best trials and the rest); the start is random until some rung has
    `min_points` values.

    Final tells are kept (history, restore) but not used to suggest: the curve already holds every
    report, and a trial reports at its last step. Intermediate results arrive through
    `observe(number, step, loss)`; `restore` replays them from `HistoryItem.curve`, so a rebuilt
    searcher asks exactly what the original would have asked.
    """

    def __init__(
        self,
        space: Mapping[str, Any],
        seed: int,
        n_startup: int = 20,
        *,
        levels: Sequence[int] = (),
        min_points: int | None = None,
        points: Sequence[Mapping[str, Sequence[Any]]] = (),
        warm: Sequence[HistoryItem] = (),
        random_fraction: float = 0.0,
        gamma: float = _default_gamma,
        acquisition: str = "tpe",
    ):
        super().__init__(space, seed, n_startup, points=points, warm=warm)
        if acquisition not in ("tpe", "gp"):
            raise ValueError(f"acquisition must be 'tpe' or 'gp', got {acquisition!r}")
        # "gp": a model ask takes the expected improvement of a GP over the level's losses
        # (quanta.search.gp_proposal) instead of TPE's density ratio.
        self._gp = GPProposer(self._domain) if acquisition == "gp" else None
        if not 0.0 < gamma <= 25.0:
            raise ValueError(f"gamma must be in (0, 25], got {gamma}")
        self.gamma = float(gamma)
        if not 0.0 <= random_fraction < 1.0:
            raise ValueError(f"random_fraction must be in [0, 1), got {random_fraction}")
        # BOHB's rho (Falkner et al. use 1/3): that share of the asks after the start-up is random, so that
        # a model fitted on a few mediocre trials at a high rung cannot keep every proposal near them.
        self.random_fraction = float(random_fraction)
        if not levels:
            raise ValueError("a multi-fidelity searcher needs at least one rung level")
        if list(levels) != sorted(set(levels)) or levels[0] < 1:
            raise ValueError(f"levels must be increasing positive steps, got {list(levels)}")
        self.levels = tuple(int(r) for r in levels)
        # BOHB's default: one more point than there are hyperparameters.
        self.min_points = int(min_points) if min_points is not None else len(self._labels) + 1
        if self.min_points < 1:
            raise ValueError(f"min_points must be >= 1, got {self.min_points}")
        # Each trial's value at every level, kept between asks: per level, number -> loss for the trials
        # that have one; trials whose curve changed since (`_dirty`) are re-read at the next ask. An ask
        # reads every trial's level values; recomputing them all from the curves made each ask
        # O(trials x reports) and a search O(trials^2 x reports).
        self._at_level: list[dict[int, float]] = [{} for _ in self.levels]
        # The same as arrays over the documents' positions (`_position`), +inf where a trial has no value.
        self._level_loss: list[np.ndarray] = [np.full(0, math.inf) for _ in self.levels]
        self._dirty: set[int] = set(self._curves)  # warm-start curves are read at the first ask

    @classmethod
    def restore(
        cls, space: Mapping[str, Any], seed: int, n_startup: int, history: Sequence[HistoryItem], **options: Any
    ) -> Self:
        """`_TrialsSearcher.restore` with the constructor's keywords (`levels`, `min_points`, `gamma`, ...,
        `points`, `warm`) in `options`: the searcher built with them, then `history` replayed."""
        return cls(space, seed, n_startup, **options)._replay(history)

    def observe(self, number: int, step: int, loss: float) -> None:
        super().observe(number, step, loss)
        self._dirty.add(number)

    def level_losses(self) -> tuple[int | None, dict[int, float]]:
        """The rung index the model is fitted on now (None: no rung has `min_points` values) and the
        loss of each trial that has a value at that rung."""
        level = self._read_levels()
        return (None, {}) if level is None else (level, dict(self._at_level[level]))

    def _read_levels(self) -> int | None:
        """Re-read the trials whose curves changed into `_at_level` (and `_level_loss`); return the
        rung index the model is fitted on now (None: no rung has `min_points` values)."""
        n = len(self._order)
        for i, arr in enumerate(self._level_loss):
            if len(arr) < n:  # room for the new documents, doubling so that growing stays linear
                grown = np.full(max(n, 2 * len(arr)), math.inf)
                grown[: len(arr)] = arr
                self._level_loss[i] = grown
        for number in self._dirty:
            curve = self._curves.get(number, [])
            pos = self._position[number]
            for i, level in enumerate(self.levels):
                # A trial has reached a rung when it reported at or past it (a trial reports at its last
                # step); a tell does not say how far the trial got (stopped trials are told too).
                v = value_at(curve, level)
                if v is not None:
                    self._at_level[i][number] = v
                else:
                    self._at_level[i].pop(number, None)
                self._level_loss[i][pos] = math.inf if v is None else v
        self._dirty.clear()
        for i in range(len(self.levels) - 1, -1, -1):
            if len(self._at_level[i]) >= self.min_points:
                return i
        return None

    def _model_level(self, seed: int) -> int | None:
        """The rung index this ask's model is fitted on; None when the ask is random (the start-up, no rung
        with `min_points` values yet, or the random share's coin)."""
        if len(self._docs) + len(self._warm_docs) < self.n_startup:  # earlier searches' trials count, as in TPE
            return None
        level = self._read_levels()
        # The coin is a function of the ask's seed, so a restored searcher tosses the same ones.
        if level is None or (self.random_fraction > 0 and _coin(seed) < self.random_fraction):
            return None
        return level

    def _suggest_vals(self, number: int, seed: int) -> dict[str, list[Any]]:
        if self._gp is None:
            return super()._suggest_vals(number, seed)
        level = self._model_level(seed)
        if level is None:
            return super()._suggest_vals(number, seed)  # random, as TPE's start-up and random share
        at_level = self._gp_losses(level, seed)
        observed = [(n, self._vals_of(n), at_level[n]) for n in sorted(at_level)]
        pending: list[dict[str, list[Any]]] = []  # the most recent asks without a value at the level
        for n in reversed(self._order):
            if len(pending) == PENDING:
                break
            if n >= 0 and n not in at_level:
                pending.append(self._vals_of(n))
        pending.reverse()
        try:
            return self._gp.propose(level, observed, pending, seed, self._gp_fit_losses(level))
        except (np.linalg.LinAlgError, ValueError, FloatingPointError):
            # A GP that cannot be fitted or solved (a degenerate set of points) never stops a search: the
            # ask falls back to TPE at the same level, as deterministic as the failure.
            return super()._suggest_vals(number, seed)

    def _gp_losses(self, level: int, seed: int) -> Mapping[int, float]:
        """The loss of each trial that has a value at rung `level`, as the GP of the ask seeded `seed` reads
        it for its posterior and expected improvement (here the level's losses; a subclass may make them a
        function of the ask, and then says what the kernel is fitted on in `_gp_fit_losses`)."""
        return self._at_level[level]

    def _gp_fit_losses(self, level: int) -> Callable[[Sequence[int]], Sequence[float]] | None:
        """What the GP's kernel parameters are fitted on at rung `level` (`GPProposer.propose`'s
        `fit_losses`); None: the losses the ask reads, which here depend on the trials alone."""
        return None

    def _vals_of(self, number: int) -> dict[str, list[Any]]:
        doc = self._docs.get(number) or self._warm_docs[number]
        return {label: list(vs) for label, vs in doc["misc"]["vals"].items() if len(vs) > 0}

    def _suggest(self, number: int, seed: int) -> list[dict[str, Any]]:
        docs: list[dict[str, Any]]
        level = self._model_level(seed)
        if level is None:
            docs = rand.suggest([number], self._domain, self._trials, seed)
            return docs
        # Every document (warm-start trials, tid < 0, are judged at the level too) scored by its loss at
        # the level, the others pending (inf), in the order `Trials.trials` holds them: what TPE would
        # read had each document been marked done with that loss or running.
        trials = self._trials.trials
        losses = self._level_loss[level][: len(trials)]
        if self._ascending and len(trials) == len(self._order):  # the documents in tid order, as TPE sorts them
            return self._posterior().suggest_in_order([number], trials, self._order, losses, self._trials, seed)
        scored = [(float(losses[self._position[doc["tid"]]]), doc) for doc in trials]
        # n_startup_jobs=0: the start-up phase was decided above by the number of asks.
        docs = self._posterior().suggest_scored([number], scored, self._trials, seed, n_startup_jobs=0)
        return docs


def _coin(seed: int) -> float:
    """A uniform draw in [0, 1) determined by an ask's seed (independent of the suggestion drawn from it)."""
    return float(np.random.default_rng([seed, 0xB0B]).random())
