"""The judge: turns each trial's learning curve into a `Verdict`, once per round, before planning.

Judging is kept apart from placing, in the shape of Optuna's pruners: the controller calls
`judge(snapshot, knobs, state)` while it builds the round's snapshot and hands the verdicts to the
policy in `ClusterSnapshot.verdicts`; policies read verdicts, they never fit curves. The judge's
vocabulary (`Verdict`, `JudgeKnobs`) is in `quanta.search.verdict`; it reads trials and searches through
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

**Rungs and curves together** (`JudgeKnobs.rung_eta` set, the default: 3): the first judgement
comes at the first successive-halving rung, `max_steps / eta**3` steps (`quanta.search.fidelity.rungs`),
instead of at 10 % of the steps. Every trial's loss at each rung it has passed is recorded, as ASHA
records it (`fidelity.RungRecords`, kept after the trial ends), and a trial is *in the top* at its
highest rung when it is among the best `floor(n / eta)` of the `n` trials recorded there (fewer than
`eta` recorded: no rank yet). Then:
- with a curve prediction (3 points at least), P(reach) is the prediction's, but a trial not in the
  top is capped at its rank estimate `0.5 * (n - better) / n` (better: trials strictly better there):
  a curve extrapolated from a few early points does not outrank what the rung has shown;
- without one, P(reach) is that rank estimate alone (at most 0.5, the weight of a trial not judged
  yet: a rank can only hold a trial back, never put it ahead of a fitted curve);
- a kill still needs the curve: P(reach) below `kill_threshold` once 10 % of the steps are done (the
  curve alone, as without rungs), or earlier when the trial is also outside the top at its rung.

Whatever the fits say, a search's best trial alive (the best value reported so far) is never killed: a
parametric fit is pessimistic on a slowly rising curve, and killing every trial on such fits once ended a
search with no trial run to the end while plain FIFO on the same configurations reached the target.
The records ride in the judge's state under the key `"rungs"` (only for searches still running).

The last prediction of each alive trial is the judge's state (`JudgeState`, JSON: string keys): it
goes out with the verdicts and comes back next round; the controller persists it beside the policy's
state, so a restarted controller judges, and so plans, the same. A killed trial's entry is dropped.

Pure: no I/O, no clock; numpy/scipy through `feedback` only.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from quanta.search import feedback
from quanta.search.fidelity import RungRecords, in_top, rungs
from quanta.search.verdict import CurveSearch, CurveTrial, JudgeKnobs, Verdict, max_steps_of

JudgeState = dict[str, dict[str, Any]]  # trial id -> its last prediction (see `_predict`); RUNGS
RUNGS = "rungs"  # the judge state's key for rung records (never a trial id: those are digits)
RANK_P = 0.5  # a rank estimate of P(reach) is at most this (a trial not judged counts 0.5 too)


class Round(Protocol):
    """What the judge reads of a round (`quanta.executor.policy.types.ClusterSnapshot` is one)."""

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
    eta = knobs.rung_eta
    book = _record_rungs(snapshot, searches, knobs, eta, old) if eta is not None else None
    incumbents = _incumbents(snapshot, searches)
    for t in snapshot.alive():
        key = str(t.id)
        cache = old.get(key)
        search = searches.get(t.search_id)
        if search is None and not cache:
            continue  # a trace job: never judged (thousands of them a round on a simulated cluster)
        standing = None
        if eta is not None and book is not None and search is not None:
            standing = _standing(knobs, eta, book, t, search)
        verdict, cache = judge_trial(knobs, t, search, cache, standing)
        if verdict.kill and incumbents.get(t.search_id) == t.id:
            # The search's best trial is never killed on a fit: when every fit is pessimistic (a slowly
            # rising curve), killing them all would end the search with nothing run to the end.
            verdict = dataclasses.replace(verdict, kill=False)
        verdicts[t.id] = verdict
        if cache and not verdict.kill:
            new[key] = cache
    if book is not None and (kept := book.keep(searches)):
        new[RUNGS] = kept
    return Judged(verdicts, new)


def _incumbents(snapshot: Round, searches: Mapping[int, CurveSearch]) -> dict[int, int]:
    """Per search, its alive trial with the best value reported so far (ties: the earliest id)."""
    best: dict[int, tuple[float, int]] = {}
    for t in snapshot.alive():
        search = searches.get(t.search_id)
        if search is None:
            continue
        sign = 1.0 if search.goal == "maximize" else -1.0
        values = [sign * float(v) for _, v in t.curve if _finite(v)]
        if not values:
            continue
        key = (max(values), -t.id)
        if t.search_id not in best or key > best[t.search_id]:
            best[t.search_id] = key
    return {sid: -key[1] for sid, key in best.items()}


@dataclass(frozen=True)
class RungStanding:
    """Where a trial stands at the highest rung it has passed: among the best `floor(n / eta)` of the
    `n` trials recorded there (`top`), and the rank estimate of P(reach) (see the module docstring)."""

    rung: int
    top: bool
    p_rank: float


def _levels(knobs: JudgeKnobs, eta: float, trial: CurveTrial, search: CurveSearch) -> tuple[int, ...]:
    """The judge's rungs for `trial` (`knobs.rung_eta` is `eta`)."""
    max_steps = max_steps_of(trial, search)
    return rungs(max_steps, knobs.first_rung(trial, search), eta) if max_steps > 0 else ()


def _record_rungs(
    snapshot: Round, searches: Mapping[int, CurveSearch], knobs: JudgeKnobs, eta: float, old: Mapping[str, Any]
) -> RungRecords:
    """Every alive trial's losses at the rungs it has passed, added to last round's records (all are
    recorded before any is ranked, so the order of trials does not matter)."""
    book = RungRecords(old.get(RUNGS))
    for t in snapshot.alive():
        search = searches.get(t.search_id)
        if search is None:
            continue
        sign = -1.0 if search.goal == "maximize" else 1.0
        curve = [(s, sign * float(v)) for s, v in t.curve if _finite(s) and _finite(v)]
        book.record(search.id, t.id, curve, _levels(knobs, eta, t, search))
    return book


def _standing(
    knobs: JudgeKnobs, eta: float, book: RungRecords, trial: CurveTrial, search: CurveSearch
) -> RungStanding | None:
    """The trial's standing at its highest recorded rung; None before its first rung, or while fewer
    than `eta` trials are recorded there (too few to rank)."""
    levels = _levels(knobs, eta, trial, search)
    for rung in reversed(range(len(levels) - 1)):
        recorded = book.at(search.id, rung)
        value = recorded.get(str(trial.id))
        if value is None:
            continue
        if len(recorded) < eta:
            return None
        better = sum(1 for v in recorded.values() if v < value)
        p_rank = RANK_P * (len(recorded) - better) / len(recorded)
        return RungStanding(rung, in_top(value, recorded.values(), eta), p_rank)
    return None


def judge_trial(
    knobs: JudgeKnobs,
    trial: CurveTrial,
    search: CurveSearch | None,
    cache: Mapping[str, Any] | None,
    standing: RungStanding | None = None,
) -> tuple[Verdict, dict[str, Any] | None]:
    """One trial's verdict and its prediction cache (fresh, or `cache` when still current), given its
    rung `standing` when the judge ranks by rungs (see the module docstring)."""
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
    if search is None or not can_judge or (pred is None and standing is None):
        return _NOT_JUDGED, cache
    if pred is None:
        assert standing is not None
        p = standing.p_rank
        return Verdict(judged=True, p_reach=p, promise=feedback.priority(None, search.goal, default=p)), cache
    # The curve may condemn alone from curve_min_steps on; before that only with the rung's agreement.
    kill_from = knobs.curve_min_steps(trial, search) if standing is None or standing.top else min_steps
    kill = search.target is not None and feedback.should_kill(pred, knobs.kill_threshold, trial.steps_done, kill_from)
    if standing is not None and not standing.top and standing.p_rank < pred.p_reach:
        pred = dataclasses.replace(pred, p_reach=standing.p_rank)
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
