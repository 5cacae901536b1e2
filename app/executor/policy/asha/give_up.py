"""Rule 4's filter: once a search will create no more trials, the held trials that the learning-curve model
gives no real chance are stopped instead of being run on idle devices.

Without it, work conservation (`rules.idle_runs`) sends every held trial of a finished search on, one
after another, so a search that misses its target trains all its trials to the end (64 of 64 seen live)
before it ends. Here each (search, bracket) gets a `quanta.search.curve_model.CurveModel` over its rungs,
fed from the rung records (every trial's value at each rung it passed, ended trials included); a held
trial's chance is P(its score at the last rung >= the bar) from its value at its rung, where the bar is
the search's target, or without one the best score any trial has shown. Below `give_up_p` it is stopped,
unless it is the best alive trial of its search (whatever the fit says, the incumbent is never given up:
a pessimistic fit must not end a search with nothing trained to the end). Searches ranked on Pareto
positions (several objectives) are left as they were: their records hold positions, not metric values.

Pure: the rung records in, chances out; `RungCurves` only memoises models between rounds (a model is a
function of the records it was built from, so a rebuilt one decides the same).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from quanta.executor.policy.asha.rules import HeldTrial, Round
from quanta.executor.policy.types import SearchView
from quanta.search.curve_model import CurveModel, infer_unit, score
from quanta.search.fidelity import RungRecords

_MEMO = 16  # (search, bracket) models kept between rounds


class RungCurves:
    """Memo: per (search, bracket), the curve model built from its rung records, with the record counts
    per rung it was built from (records only grow: equal counts, equal records)."""

    def __init__(self) -> None:
        self._models: dict[tuple[int, int, tuple[int, ...]], tuple[tuple[int, ...], CurveModel]] = {}

    def model(self, book: RungRecords, search: SearchView, group: int, levels: tuple[int, ...]) -> CurveModel:
        """The model of `search`'s bracket `group` over `levels`, from every trial's values in `book`."""
        key = (search.id, group, levels)
        at = [book.at(search.id, i, group) for i in range(len(levels))]
        sizes = tuple(map(len, at))
        memo = self._models.get(key)
        if memo is not None and memo[0] == sizes:
            return memo[1]
        sign = -1.0 if search.goal == "maximize" else 1.0  # a record is a loss: sign * value
        values: dict[str, list[float]] = {tid: [loss] for tid, loss in at[0].items()}
        for rung in at[1:]:
            for tid, loss in rung.items():
                have = values.get(tid)
                if have is not None and len(have) < len(levels):
                    have.append(loss)
        raw = [sign * loss for losses in values.values() for loss in losses if math.isfinite(loss)]
        model = CurveModel(search.goal, infer_unit(raw, search.target), levels)
        for tid, losses in values.items():
            curve: list[tuple[int, float]] = []
            for level, loss in zip(levels, losses, strict=False):
                if not math.isfinite(loss):
                    break  # a gap: the model reads a curve up to its first non-finite value
                curve.append((level, sign * loss))
            model.record(int(tid), curve)
        self._models.pop(key, None)
        self._models[key] = (sizes, model)
        while len(self._models) > _MEMO:
            del self._models[next(iter(self._models))]
        return model


def sift(r: Round, idle: Sequence[HeldTrial], curves: RungCurves) -> list[HeldTrial]:
    """The trials of `idle` (rule 4's, all of searches that will create no more trials) worth running:
    the others, with a chance below the knobs' `give_up_p`, go to `r.stop` with the reason. Every trial
    of a search whose model cannot decide (it fails, or the search ranks Pareto positions) is kept."""
    k = r.knobs
    if k.give_up_p <= 0 or not idle:
        return list(idle)
    by_group: dict[tuple[int, int], list[HeldTrial]] = {}
    # In arrival order: the stops come out in one order whether a trial was held this round or before.
    for h in sorted(idle, key=lambda h: (h[2].arrival, h[2].id)):
        by_group.setdefault((h[2].search_id, h[2].id % k.brackets), []).append(h)
    kept: list[HeldTrial] = []
    for (sid, group), held in by_group.items():
        search = r.searches[sid]
        if search.pareto:
            kept.extend(held)
            continue
        levels = r.levels(held[0][2], search)
        try:
            chances = _chances(r, curves.model(r.book, search, group, levels), search, group, held)
        except (ArithmeticError, ValueError, FloatingPointError) as exc:
            r.notes.append(f"asha: search {sid}: the curve model failed ({exc!r}); its held trials run on")
            kept.extend(held)
            continue
        for h in held:
            chance = chances.get(h[2].id)
            if chance is None or chance >= k.give_up_p:
                kept.append(h)
                continue
            t = h[2]
            r.stop.append(t.id)
            r.reasons[t.id] = f"P(reach target) {chance:.2g} below {k.give_up_p:g} and no new trials will come"
            r.notes.append(f"asha: stop {t.id}: {r.reasons[t.id]}")
    return kept


def _chances(
    r: Round, model: CurveModel, search: SearchView, group: int, held: Sequence[HeldTrial]
) -> dict[int, float]:
    """Per held trial but the incumbent (the search's alive trial with the best recorded value), its
    chance of reaching the bar by the last rung."""
    sign = -1.0 if search.goal == "maximize" else 1.0
    if search.target is not None:
        bar = score(search.target, search.goal, model.unit)
    elif (best := model.best()) is not None:
        bar = best
    else:
        return {}
    best_alive: tuple[float, int] | None = None
    for t in r.snapshot.alive():
        if t.search_id != search.id:
            continue
        zs = model.scores.get(t.id)
        if zs and (best_alive is None or max(zs) > best_alive[0]):
            best_alive = (max(zs), t.id)
    out: dict[int, float] = {}
    last = len(model.levels) - 1
    for rung, loss, t in held:
        if best_alive is not None and t.id == best_alive[1]:
            continue
        if rung >= last or not math.isfinite(loss):
            continue
        z = score(sign * loss, search.goal, model.unit)
        out[t.id] = float(model.p_reach(rung, z, bar)[0, -1])
    return out
