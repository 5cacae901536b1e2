"""The judge (app/search/judge.py) on synthetic curves: no processes, no training.

`data/judge_golden.json` holds what GandivaPolicy computed when it still judged inside `plan` (main at
3312ef8): for five trials whose curves c - 0.5 * (step/10)**-0.5 grow 20 steps a round, under three knob
sets, the prediction it cached for each trial, each trial's promise and the trials it killed, round by
round. The judge by the curve alone (`rung_eta: None`, as then) must give exactly the same, at the same
rounds. The rest checks judging by rungs and curves together (gandiva's default since).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from quanta.executor.policy.knobs import GandivaKnobs, JudgeKnobs
from quanta.executor.policy.types import NOT_JUDGED, ClusterSnapshot, DeviceView, SearchView, TrialStatus, TrialView
from quanta.search import feedback
from quanta.search.judge import judge

MAX, TARGET = 1000, 0.85
SEARCH = SearchView(1, "maximize", TARGET, MAX)
GOLDEN = json.loads((Path(__file__).parent / "data" / "judge_golden.json").read_text())
ASYM = {1: 0.7, 2: 0.8, 3: 0.86, 4: 0.9, 5: 0.95}


def close(got, want, rel: float = 1e-7) -> bool:
    """Equal, numbers to `rel` (curve fits differ in their last bits between CPUs and BLAS builds)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(close(got[k], want[k], rel) for k in want)
    if isinstance(want, list | tuple):
        return len(got) == len(want) and all(close(g, w, rel) for g, w in zip(got, want, strict=True))
    if isinstance(want, float) and not isinstance(want, bool):
        return isinstance(got, int | float) and math.isclose(got, want, rel_tol=rel, abs_tol=1e-12)
    return got == want


def curve(c: float, steps: int) -> tuple[tuple[int, float], ...]:
    return tuple((s, round(c - 0.5 * (s / 10) ** -0.5, 12)) for s in range(10, steps + 1, 10))


def snap(trials, searches=(SEARCH,)) -> ClusterSnapshot:
    return ClusterSnapshot(now=0.0, devices=(DeviceView("cpu:0"),), trials=tuple(trials), searches=tuple(searches))


def trial(tid: int, c: float | None, steps: int, **kw) -> TrialView:
    kw.setdefault("arrival", float(tid))
    return TrialView(
        id=tid, search_id=1, max_steps=MAX, steps_done=steps, curve=curve(c, steps) if c is not None else (), **kw
    )


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_verdicts_equal_what_gandiva_computed_before(case):
    knobs = GandivaKnobs(**{"rung_eta": None, **GOLDEN[case]["knobs"]})
    state: dict = {}
    dead: set[int] = set()
    for r, want in enumerate(GOLDEN[case]["rounds"]):
        trials = [trial(i, c, 20 * r + 7 * i) for i, c in ASYM.items() if i not in dead]
        got = judge(snap(trials), knobs, json.loads(json.dumps(state)))  # state as the store returns it
        state = got.state
        kills = sorted(tid for tid, v in got.verdicts.items() if v.kill)
        assert kills == want["stop"], r
        assert close(got.state, want["preds"]), r
        promise = {str(tid): v.promise for tid, v in got.verdicts.items() if v.judged and not v.kill}
        assert close(promise, want["promise"]), r
        for key, cached in got.state.items():
            v = got.verdicts[int(key)]
            assert v.judged == (not cached.get("none"))
            if v.judged:
                assert (v.p_reach, v.final) == (cached["p"], cached["final"])
        dead |= set(kills)


def test_verdict_is_the_prediction_of_feedback():
    t = trial(1, 0.9, 300)
    v = judge(snap([t]), JudgeKnobs(rung_eta=None)).verdicts[1]
    pred = feedback.predict(t.curve, MAX, TARGET, "maximize", bounds=(0.0, 1.0))  # a fraction: bounds inferred
    assert v.judged and not v.kill
    assert (v.p_reach, v.final) == (pred.p_reach, pred.final)
    assert v.promise == feedback.priority(pred, "maximize")
    unbounded = judge(snap([t]), JudgeKnobs(rung_eta=None, infer_bounds=False)).verdicts[1]
    assert unbounded.p_reach == feedback.predict(t.curve, MAX, TARGET, "maximize").p_reach


def test_not_judged_before_min_steps_or_without_points():
    knobs = JudgeKnobs(rung_eta=None, min_steps_before_judgement=100)
    got = judge(snap([trial(1, 0.7, 90), trial(2, None, 500), trial(3, 0.7, 20)]), knobs)
    assert got.verdicts[1] == got.verdicts[2] == NOT_JUDGED
    assert got.state == {}
    # Default: 10 % of max_steps; 3 points at least.
    assert JudgeKnobs(rung_eta=None).min_steps(trial(1, 0.7, 0), SEARCH) == 100
    assert judge(snap([trial(1, 0.7, 99)]), JudgeKnobs(rung_eta=None)).verdicts[1] == NOT_JUDGED
    assert judge(snap([trial(1, 0.7, 100)]), JudgeKnobs(rung_eta=None)).verdicts[1].judged


def test_kill_needs_a_target_and_a_threshold():
    t, better = trial(1, 0.7, 300), trial(2, 0.99, 300)
    assert judge(snap([t, better]), JudgeKnobs(rung_eta=None, kill_threshold=0.05)).verdicts[1].kill
    assert not judge(snap([t, better]), JudgeKnobs(rung_eta=None, kill_threshold=0.0)).verdicts[1].kill
    no_target = SearchView(1, "maximize", None, MAX)
    knobs = JudgeKnobs(rung_eta=None, kill_threshold=0.4)
    assert not judge(snap([t, better], searches=(no_target,)), knobs).verdicts[1].kill
    # A killed trial's prediction is not carried (it leaves the snapshot).
    assert "1" not in judge(snap([t, better]), JudgeKnobs(rung_eta=None, kill_threshold=0.05)).state


def test_the_best_trial_of_a_search_is_never_killed_whatever_its_fit_says():
    # Every curve heads well below the target (the fits are pessimistic for all of them): the judge
    # condemns all but the best, which goes on (it may yet reach the target, and a search needs one).
    trials = [trial(i, c, 300) for i, c in enumerate((0.7, 0.72, 0.74), start=1)]
    got = judge(snap(trials), JudgeKnobs(rung_eta=None, kill_threshold=0.05))
    assert all(got.verdicts[i].p_reach < 0.05 for i in (1, 2, 3))
    assert [i for i, v in got.verdicts.items() if v.kill] == [1, 2]
    assert "3" in got.state  # its prediction is carried on


def test_prediction_is_cached_until_feedback_every_steps():
    knobs = JudgeKnobs(rung_eta=None, feedback_every_steps=50, kill_threshold=0.0)
    first = judge(snap([trial(1, 0.95, 200)]), knobs)
    assert first.state["1"]["at"] == 200
    # 40 more steps (and a different curve): the cached prediction stands, and so does the verdict.
    again = judge(snap([trial(1, 0.7, 240)]), knobs, first.state)
    assert again.state == first.state and again.verdicts == first.verdicts
    fresh = judge(snap([trial(1, 0.7, 250)]), knobs, first.state)
    assert fresh.state["1"]["at"] == 250 and fresh.verdicts[1].p_reach < 0.05
    assert JudgeKnobs(rung_eta=None).feedback_every(trial(1, 0.7, 0), SEARCH) == 30  # 3 % of max_steps


def test_jobs_outside_a_search_get_no_verdict():
    jobs = [TrialView(id=i, max_steps=1000, steps_done=500, status=TrialStatus.RUNNING) for i in (1, 2)]
    got = judge(snap(jobs, searches=()), JudgeKnobs(rung_eta=None))
    assert got.verdicts == {} and got.state == {}
    # Their guard (not a judgement) covers the first mini-batches only.
    assert JudgeKnobs(rung_eta=None).min_steps(jobs[0], None) == 100


def test_a_restarted_controller_carries_the_judges_state():
    # The controller's PolicyChoice stores the judge's state with the policy's (one write a plan) and a new
    # one, built on the same store after a restart, starts from it: the next round judges the same.
    from quanta.controller.policies import PolicyChoice
    from quanta.db.memory import MemoryStore
    from quanta.executor.policy import make_policy
    from quanta.executor.policy.types import Plan

    store = MemoryStore()
    knobs = JudgeKnobs(rung_eta=None, feedback_every_steps=50)
    first = judge(snap([trial(1, 0.95, 200)]), knobs)
    choice = PolicyChoice(store, None, None)
    choice.remember(make_policy("gandiva"), Plan(state={"rank": [1]}), first.state)
    choice.save()  # as the tick does (with its round's intent, or alone)
    restarted = PolicyChoice(store, None, None)
    assert restarted.state == {"rank": [1]} and restarted.judge_state == first.state
    later = judge(snap([trial(1, 0.7, 240)]), knobs, restarted.judge_state)
    assert later.verdicts == first.verdicts  # the cached prediction stands, as without the restart


def test_a_plan_that_changes_no_state_writes_none():
    # Most plans of a busy search carry the state of the one before: they are not written again.
    from quanta.controller.policies import PolicyChoice
    from quanta.db.memory import MemoryStore
    from quanta.executor.policy import make_policy
    from quanta.executor.policy.types import Plan

    writes: list[dict] = []

    class Counting(MemoryStore):
        def save_policy_state(self, policy, state, judge=None):
            writes.append(dict(state))
            super().save_policy_state(policy, state, judge)

    store = Counting()
    choice, policy = PolicyChoice(store, None, None), make_policy("gandiva")
    for state in ({"rank": [1]}, {"rank": [1]}, {"rank": [2]}, {"rank": [2]}):
        choice.remember(policy, Plan(state=state), {})
        choice.save()  # as a tick whose plan has no actions
    assert writes == [{"rank": [1]}, {"rank": [2]}]
    assert PolicyChoice(store, None, None).state == {"rank": [2]}
    # A plan with actions: its state goes with the round's intent, in one write, and not again.
    choice.remember(policy, Plan(state={"rank": [3]}), {})
    store.record_intent(1, 1.0, [], choice.take_unsaved())
    choice.save()
    assert writes[-1] == {"rank": [3]} and len(writes) == 3
    assert PolicyChoice(store, None, None).state == {"rank": [3]} and store.round_no() == 1


# ---- rungs and curves together (JudgeKnobs.rung_eta) ------------------------------------------------

RUNG = JudgeKnobs(rung_eta=3.0)  # rungs at 37, 111, 333 steps of MAX = 1000 (first: 1000 / 27)


def test_first_judgement_comes_at_the_first_rung():
    assert RUNG.min_steps(trial(1, 0.7, 0), SEARCH) == 37
    assert RUNG.curve_min_steps(trial(1, 0.7, 0), SEARCH) == 100  # the curve alone condemns from 10 %
    assert GandivaKnobs().rung_eta == JudgeKnobs().rung_eta == 3.0  # one default, the judge's
    # Reports every 10 steps: at 30 steps not yet past the rung; at 40, past it with 4 points.
    early = judge(snap([trial(1, 0.9, 30)]), RUNG)
    assert early.verdicts[1] == NOT_JUDGED
    assert judge(snap([trial(1, 0.9, 40)]), JudgeKnobs(rung_eta=None)).verdicts[1] == NOT_JUDGED  # curve alone: 10 %
    got = judge(snap([trial(1, 0.9, 40)]), RUNG)
    assert got.verdicts[1].judged and got.verdicts[1].p_reach is not None
    # One trial at the rung: no rank yet, so the verdict is the curve's.
    pred = feedback.predict(trial(1, 0.9, 40).curve, MAX, TARGET, "maximize", bounds=(0.0, 1.0))
    assert got.verdicts[1].p_reach == pred.p_reach
    assert got.state["rungs"] == {"1/0/0": {"1": -trial(1, 0.9, 40).curve[3][1]}}


def test_a_trial_outside_the_rungs_top_is_capped_at_its_rank():
    # Six trials past the first rung (37 steps): the top floor(6 / 3) = 2 are the best two curves.
    trials = [trial(i, c, 50) for i, c in enumerate((0.95, 0.94, 0.9, 0.85, 0.8, 0.75), start=1)]
    got = judge(snap(trials), RUNG)
    free = {
        i: feedback.predict(t.curve, MAX, TARGET, "maximize", bounds=(0.0, 1.0)).p_reach
        for i, t in enumerate(trials, start=1)
    }
    for i in (1, 2):  # in the top: the curve's own estimate
        assert got.verdicts[i].p_reach == free[i]
    for i in (3, 4, 5, 6):  # outside it: at most 0.5 * (n - better) / n
        assert got.verdicts[i].p_reach == min(free[i], 0.5 * (6 - (i - 1)) / 6)
        assert got.verdicts[i].p_reach <= 0.5 * 4 / 6
    # The order of promise follows the rung's order.
    promise = [got.verdicts[i].promise for i in range(1, 7)]
    assert promise == sorted(promise, reverse=True)


def test_rung_records_outlive_their_trials_and_rank_later_ones():
    knobs = JudgeKnobs(rung_eta=3.0, kill_threshold=0.0)
    first = judge(snap([trial(i, c, 50) for i, c in ((1, 0.95), (2, 0.94), (3, 0.93))]), knobs)
    # Those three end; a newcomer worse than all of them at the rung is ranked against their records.
    later = judge(snap([trial(4, 0.7, 50)]), knobs, json.loads(json.dumps(first.state)))
    assert set(later.state["rungs"]["1/0/0"]) == {"1", "2", "3", "4"}
    assert later.verdicts[4].p_reach <= 0.5 * 1 / 4
    # Records of a search that is no longer running are dropped.
    other = SearchView(2, "maximize", TARGET, MAX)
    gone = judge(snap([trial(4, 0.7, 50)], searches=(other,)), knobs, later.state)
    assert "rungs" not in gone.state


def test_without_a_curve_fit_the_rank_alone_judges_and_never_kills():
    # Reports every 30 steps: at 40 steps only 2 points (too few to fit), yet past the first rung.
    def sparse(tid: int, c: float) -> TrialView:
        pts = tuple((s, round(c - 0.5 * (s / 10) ** -0.5, 12)) for s in (10, 40))
        return TrialView(id=tid, search_id=1, max_steps=MAX, steps_done=40, curve=pts, arrival=float(tid))

    knobs = JudgeKnobs(rung_eta=3.0, kill_threshold=1.0)
    got = judge(snap([sparse(i, c) for i, c in ((1, 0.9), (2, 0.8), (3, 0.7))]), knobs)
    assert [got.verdicts[i].p_reach for i in (1, 2, 3)] == [0.5, 0.5 * 2 / 3, 0.5 * 1 / 3]
    assert not any(v.kill for v in got.verdicts.values())
    assert all(v.final is None for v in got.verdicts.values())


def test_before_ten_percent_only_curve_and_rung_together_kill():
    knobs = JudgeKnobs(rung_eta=3.0, kill_threshold=0.2)
    trials = [trial(i, c, 50) for i, c in enumerate((0.96, 0.95, 0.7, 0.69, 0.68, 0.67), start=1)]
    got = judge(snap(trials), knobs)
    # Trial 1 and 2 lead the rung; 3-6 are hopeless by their curves and outside the rung's top.
    assert [i for i, v in got.verdicts.items() if v.kill] == [3, 4, 5, 6]
    # Alone at the rung (no rank), a hopeless curve is not killed before 10 % of the steps...
    alone = judge(snap([trial(3, 0.7, 50)]), knobs)
    assert not alone.verdicts[3].kill
    # ...and is from there on, as without rungs (beside a better trial: the best one is never killed).
    assert judge(snap([trial(3, 0.7, 100), trial(7, 0.96, 100)]), knobs).verdicts[3].kill
