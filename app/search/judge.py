"""The judge: turns each trial's learning curve into a `Verdict`, once per round, before planning.

Judging is kept apart from placing, in the shape of Optuna's pruners: the controller calls
`judge(snapshot, knobs, state)` while it builds the round's snapshot and hands the verdicts to the
policy in `ClusterSnapshot.verdicts`; policies read verdicts, they never fit curves. The judge's
vocabulary (`Verdict`, `JudgeKnobs`) is in `app.search.verdict`; it reads trials and searches through
structural protocols, so this layer imports nothing from the policies above it.

A trial of a search is judged once it has run `JudgeKnobs.min_steps` steps (`min_steps_before_judgement`,
default 10 % of its search's max_steps) and reported at least `feedback.MIN_POINTS` points: its curve
is extrapolated with `feedback.predict`, and again every `JudgeKnobs.feedback_every` steps (default 3 %
of max_steps); in between the last prediction stands. A verdict carries P(reach target), the predicted
final value, the trial's *promise* (`feedback.priority`: P(reach), then the predicted final) and
whether to kill it (judged, the search has a target, P(reach) below `kill_threshold`). The spec
carries no metric bounds: `bounds` sets them, else (`infer_bounds`) a metric whose target and reports
all lie in [0, 1] is taken as a fraction (bounds (0, 1)), so that no fit extrapolates an accuracy
above 1. A job outside a search (a simulated trace job) reports no curve and gets no verdict.

The last prediction of each alive trial is the judge's state (`JudgeState`, JSON: string keys): it
goes out with the verdicts and comes back next round; the controller persists it beside the policy's
state, so a restarted controller judges, and so plans, the same. A killed trial's entry is dropped.

Pure: no I/O, no clock; numpy/scipy through `feedback` only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.search import feedback
from app.search.verdict import CurveSearch, CurveTrial, JudgeKnobs, Verdict, max_steps_of

JudgeState = dict[str, dict[str, Any]]  # trial id -> its last prediction (see `_predict`)


class Round(Protocol):
    """What the judge reads of a round (`app.executor.policy.types.ClusterSnapshot` is one)."""

    @property
    def searches(self) -> Sequence[CurveSearch]: ...
    def alive(self) -> Sequence[CurveTrial]: ...


@dataclass(frozen=True)
class Judged:
    """One round of judging: a verdict per judged-or-judgeable trial of a search, and the state to
    carry to the next round."""

    verdicts: Mapping[int, Verdict]
    state: JudgeState


def judge(snapshot: Round, knobs: JudgeKnobs, state: Mapping[str, Any] | None = None) -> Judged:
    """Verdicts for the snapshot's alive trials, given last round's `state` (what `Judged.state` was).

    A trial gets a verdict when it belongs to a search or has a carried prediction; a trace job
    without either gets none (policies treat a missing verdict as not judged, never killed).
    """
    old = state or {}
    if not snapshot.searches and not old:
        return Judged({}, {})  # trace jobs only (a simulated cluster): nothing to judge, O(1)
    verdicts: dict[int, Verdict] = {}
    new: JudgeState = {}
    searches = {s.id: s for s in snapshot.searches}
    for t in snapshot.alive():
        key = str(t.id)
        cache = old.get(key)
        search = searches.get(t.search_id)
        if search is None and not cache:
            continue  # a trace job: never judged (thousands of them a round on a simulated cluster)
        verdict, cache = judge_trial(knobs, t, search, cache)
        verdicts[t.id] = verdict
        if cache and not verdict.kill:
            new[key] = cache
    return Judged(verdicts, new)


def judge_trial(
    knobs: JudgeKnobs, trial: CurveTrial, search: CurveSearch | None, cache: Mapping[str, Any] | None
) -> tuple[Verdict, dict[str, Any] | None]:
    """One trial's verdict and its prediction cache (fresh, or `cache` when still current)."""
    min_steps = knobs.min_steps(trial, search)
    cache = dict(cache) if cache else None
    max_steps = max_steps_of(trial, search)
    can_judge = search is not None and max_steps > 0 and trial.steps_done >= min_steps
    if can_judge and search is not None:
        points = [(s, v) for s, v in trial.curve if _finite(s) and _finite(v)]
        if len(points) >= feedback.MIN_POINTS:
            last = max(s for s, _ in points)
            every = knobs.feedback_every(trial, search)
            stale = (
                cache is None
                or (cache.get("none") and cache.get("n") != len(points))
                or last - cache.get("at", -math.inf) >= every
            )
            if stale:
                cache = _predict(knobs, points, max_steps, search, last)
    pred = _from_cache(cache) if can_judge else None
    if pred is None or search is None:
        return _NOT_JUDGED, cache
    kill = search.target is not None and feedback.should_kill(pred, knobs.kill_threshold, trial.steps_done, min_steps)
    verdict = Verdict(
        judged=True,
        p_reach=pred.p_reach,
        final=pred.final,
        promise=feedback.priority(pred, search.goal),
        kill=kill,
    )
    return verdict, cache


_NOT_JUDGED = Verdict()


def _predict(
    knobs: JudgeKnobs, points: list[tuple[int, float]], max_steps: int, search: CurveSearch, last: float
) -> dict[str, Any]:
    bounds = knobs.bounds
    if bounds is None and knobs.infer_bounds and _fraction(search.target, points):
        bounds = (0.0, 1.0)
    try:
        pred = feedback.predict(points, max_steps, search.target, search.goal, bounds=bounds)
    except (ValueError, ArithmeticError):
        pred = None
    if pred is None or not all(map(_finite, (pred.final, pred.p_reach, pred.spread))):
        return {"at": last, "n": len(points), "none": True}
    return {
        "at": last,
        "n": len(points),
        "final": pred.final,
        "p": pred.p_reach,
        "spread": pred.spread,
        "points": pred.n_points,
        "families": list(pred.families),
    }


def _from_cache(cache: Mapping[str, Any] | None) -> feedback.Prediction | None:
    if not cache or cache.get("none"):
        return None
    return feedback.Prediction(
        final=float(cache["final"]),
        p_reach=float(cache["p"]),
        spread=float(cache["spread"]),
        n_points=int(cache.get("points", cache.get("n", 0))),
        families=tuple(cache.get("families", ())),
    )


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _fraction(target: float | None, points: Sequence[tuple[int, float]]) -> bool:
    """Does the metric look like a fraction (accuracy, F1, AUC): a target and every report in [0, 1]?
    Then fits that extrapolate beyond [0, 1] are rejected (the spec carries no metric bounds)."""
    return target is not None and 0.0 <= target <= 1.0 and all(0.0 <= float(v) <= 1.0 for _, v in points)
