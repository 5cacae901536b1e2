"""The judge (app/search/judge.py) on synthetic curves: no processes, no training.

`data/judge_golden.json` holds what GandivaPolicy computed when it still judged inside `plan` (main at
3312ef8): for five trials whose curves c - 0.5 * (step/10)**-0.5 grow 20 steps a round, under three knob
sets, the prediction it cached for each trial, each trial's promise and the trials it killed, round by
round. The judge must give exactly the same, at the same rounds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.executor.policy.knobs import GandivaKnobs, JudgeKnobs
from app.executor.policy.types import NOT_JUDGED, ClusterSnapshot, DeviceView, SearchView, TrialStatus, TrialView
from app.search import feedback
from app.search.judge import judge

MAX, TARGET = 1000, 0.85
SEARCH = SearchView(1, "maximize", TARGET, MAX)
GOLDEN = json.loads((Path(__file__).parent / "data" / "judge_golden.json").read_text())
ASYM = {1: 0.7, 2: 0.8, 3: 0.86, 4: 0.9, 5: 0.95}


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
    knobs = GandivaKnobs(**GOLDEN[case]["knobs"])
    state: dict = {}
    dead: set[int] = set()
    for r, want in enumerate(GOLDEN[case]["rounds"]):
        trials = [trial(i, c, 20 * r + 7 * i) for i, c in ASYM.items() if i not in dead]
        got = judge(snap(trials), knobs, json.loads(json.dumps(state)))  # state as the store returns it
        state = got.state
        kills = sorted(tid for tid, v in got.verdicts.items() if v.kill)
        assert kills == want["stop"], r
        assert got.state == want["preds"], r
        promise = {str(tid): v.promise for tid, v in got.verdicts.items() if v.judged and not v.kill}
        assert promise == want["promise"], r
        for key, cached in got.state.items():
            v = got.verdicts[int(key)]
            assert v.judged == (not cached.get("none"))
            if v.judged:
                assert (v.p_reach, v.final) == (cached["p"], cached["final"])
        dead |= set(kills)


def test_verdict_is_the_prediction_of_feedback():
    t = trial(1, 0.9, 300)
    v = judge(snap([t]), JudgeKnobs()).verdicts[1]
    pred = feedback.predict(t.curve, MAX, TARGET, "maximize", bounds=(0.0, 1.0))  # a fraction: bounds inferred
    assert v.judged and not v.kill
    assert (v.p_reach, v.final) == (pred.p_reach, pred.final)
    assert v.promise == feedback.priority(pred, "maximize")
    unbounded = judge(snap([t]), JudgeKnobs(infer_bounds=False)).verdicts[1]
    assert unbounded.p_reach == feedback.predict(t.curve, MAX, TARGET, "maximize").p_reach


def test_not_judged_before_min_steps_or_without_points():
    knobs = JudgeKnobs(min_steps_before_judgement=100)
    got = judge(snap([trial(1, 0.7, 90), trial(2, None, 500), trial(3, 0.7, 20)]), knobs)
    assert got.verdicts[1] == got.verdicts[2] == NOT_JUDGED
    assert got.state == {}
    # Default: 10 % of max_steps; 3 points at least.
    assert JudgeKnobs().min_steps(trial(1, 0.7, 0), SEARCH) == 100
    assert judge(snap([trial(1, 0.7, 99)]), JudgeKnobs()).verdicts[1] == NOT_JUDGED
    assert judge(snap([trial(1, 0.7, 100)]), JudgeKnobs()).verdicts[1].judged


def test_kill_needs_a_target_and_a_threshold():
    t = trial(1, 0.7, 300)
    assert judge(snap([t]), JudgeKnobs(kill_threshold=0.05)).verdicts[1].kill
    assert not judge(snap([t]), JudgeKnobs(kill_threshold=0.0)).verdicts[1].kill
    no_target = SearchView(1, "maximize", None, MAX)
    assert not judge(snap([t], searches=(no_target,)), JudgeKnobs(kill_threshold=0.4)).verdicts[1].kill
    # A killed trial's prediction is not carried (it leaves the snapshot).
    assert judge(snap([t]), JudgeKnobs(kill_threshold=0.05)).state == {}


def test_prediction_is_cached_until_feedback_every_steps():
    knobs = JudgeKnobs(feedback_every_steps=50, kill_threshold=0.0)
    first = judge(snap([trial(1, 0.95, 200)]), knobs)
    assert first.state["1"]["at"] == 200
    # 40 more steps (and a different curve): the cached prediction stands, and so does the verdict.
    again = judge(snap([trial(1, 0.7, 240)]), knobs, first.state)
    assert again.state == first.state and again.verdicts == first.verdicts
    fresh = judge(snap([trial(1, 0.7, 250)]), knobs, first.state)
    assert fresh.state["1"]["at"] == 250 and fresh.verdicts[1].p_reach < 0.05
    assert JudgeKnobs().feedback_every(trial(1, 0.7, 0), SEARCH) == 30  # 3 % of max_steps


def test_jobs_outside_a_search_get_no_verdict():
    jobs = [TrialView(id=i, max_steps=1000, steps_done=500, status=TrialStatus.RUNNING) for i in (1, 2)]
    got = judge(snap(jobs, searches=()), JudgeKnobs())
    assert got.verdicts == {} and got.state == {}
    # Their guard (not a judgement) covers the first mini-batches only.
    assert JudgeKnobs().min_steps(jobs[0], None) == 100


def test_a_restarted_controller_carries_the_judges_state():
    # The controller's PolicyChoice stores the judge's state with the policy's (one write a plan) and a new
    # one, built on the same store after a restart, starts from it: the next round judges the same.
    from app.controller.policies import PolicyChoice
    from app.db.memory import MemoryStore
    from app.executor.policy import make_policy
    from app.executor.policy.types import Plan

    store = MemoryStore()
    knobs = JudgeKnobs(feedback_every_steps=50)
    first = judge(snap([trial(1, 0.95, 200)]), knobs)
    PolicyChoice(store, None, None).remember(make_policy("gandiva"), Plan(state={"rank": [1]}), first.state)
    restarted = PolicyChoice(store, None, None)
    assert restarted.state == {"rank": [1]} and restarted.judge_state == first.state
    later = judge(snap([trial(1, 0.7, 240)]), knobs, restarted.judge_state)
    assert later.verdicts == first.verdicts  # the cached prediction stands, as without the restart
