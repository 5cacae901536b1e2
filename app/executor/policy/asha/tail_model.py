"""`TailModel`: each search's learning-curve model (`quanta.search.curve_model.CurveModel`), fed every
round with its alive trials' curves, so that once a search makes no more trials ASHA can ask which held
trials have a real chance of reaching the target (`AshaKnobs.tail_give_up`: ASHA asks of the trials held
at their highest rung only).

The model is freeze-thaw's, on its grid (`levels_for`, first level at `FIRST_FRACTION` of the budget and
no earlier than the first report). A trial's chance is P(its score at the last level >= the target's), from
its score at the last level it has passed (`CurveModel.p_reach`); a trial not past the first level has no
chance computed (it is never given up on). State: per search its unit, grid and recorded scores, as
freeze-thaw keeps them, so that a restarted controller rebuilds the same model.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from quanta.executor.policy.types import SearchView, TrialView
from quanta.search.curve_model import FIRST_FRACTION, CurveModel, infer_unit, levels_for, score


class TailModel:
    """The curve models of the searches ASHA plans (see the module docstring)."""

    def __init__(self) -> None:
        self._models: dict[int, CurveModel] = {}
        self._seen: dict[int, dict[int, int]] = {}  # per search: each trial's curve length when recorded
        self._state_out: Mapping[str, Any] | None = None

    def feed(
        self, searches: Sequence[SearchView], alive: Sequence[TrialView], stored: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Record each alive trial of `searches` (those with a target) whose curve grew; return the state
        to keep (`stored` is what the last call returned, or a restarted controller's copy of it)."""
        if stored is not self._state_out:
            self._models, self._seen = {}, {}
        wanted = {s.id: s for s in searches if s.target is not None and not s.pareto}
        by_search: dict[int, list[TrialView]] = {}
        for t in alive:
            if t.search_id in wanted:
                by_search.setdefault(t.search_id, []).append(t)
        out: dict[str, Any] = {}
        for sid, trials in by_search.items():
            model = self._model(wanted[sid], trials, stored.get(str(sid)))
            if model is None:
                continue
            seen = self._seen.setdefault(sid, {})
            for t in trials:
                n = len(t.curve)
                if n and seen.get(t.id) != n:
                    seen[t.id] = n
                    model.record(t.id, t.curve)
            if len(seen) > 2 * len(trials):
                ids = {t.id for t in trials}
                self._seen[sid] = {tid: n for tid, n in seen.items() if tid in ids}
            out[str(sid)] = {"unit": model.unit, "levels": list(model.levels), "log": model.log()}
        for key, value in stored.items():  # searches not planned this round keep theirs
            out.setdefault(key, value)
        self._state_out = out
        return out

    def _model(self, search: SearchView, trials: Sequence[TrialView], stored: Any) -> CurveModel | None:
        model = self._models.get(search.id)
        if model is not None:
            return model
        values = [v for t in trials for _, v in t.curve if math.isfinite(v)]
        if not values and not stored:
            return None
        unit = infer_unit(values, search.target)
        max_steps = max(1, search.max_steps or max(t.max_steps for t in trials))
        first_report = min((int(s) for t in trials for s, _ in t.curve[:1]), default=1)
        first = max(round(max_steps * FIRST_FRACTION), first_report, 1)
        levels = levels_for(max_steps, first=min(first, max_steps))
        if stored:
            unit = bool(stored.get("unit", unit))
            levels = tuple(int(v) for v in stored.get("levels", levels))
        model = self._models[search.id] = CurveModel(search.goal, unit, levels)
        if stored:
            model.load(stored.get("log", ()))
        return model

    def chances(self, search: SearchView, trial_ids: Sequence[int]) -> dict[int, float]:
        """P(reach the search's target by the last level) of each of `trial_ids` past the model's first
        level and short of its last; the others are left out."""
        model = self._models.get(search.id)
        if model is None or search.target is None:
            return {}
        bar = score(search.target, search.goal, model.unit)
        last = len(model.levels) - 1
        by_level: dict[int, list[int]] = {}
        for tid in trial_ids:
            passed = len(model.scores.get(tid, ()))
            if 0 < passed <= last:
                by_level.setdefault(passed - 1, []).append(tid)
        out: dict[int, float] = {}
        for level, ids in by_level.items():
            z = np.array([model.scores[tid][level] for tid in ids], dtype=float)
            p = model.p_reach(level, z, bar)[:, -1]
            out.update(zip(ids, p.tolist(), strict=True))
        return out

    def best_of(self, search: SearchView, trial_ids: Sequence[int]) -> int | None:
        """Of `trial_ids`, the one with the best score the search's model has recorded (None: none)."""
        model = self._models.get(search.id)
        if model is None:
            return None
        best: tuple[float, int] | None = None
        for tid in trial_ids:
            z = model.scores.get(tid)
            if z and (best is None or max(z) > best[0]):
                best = (max(z), tid)
        return best[1] if best else None
