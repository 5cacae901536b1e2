"""Pareto ranking (quanta.search.pareto), the rungs of MO-ASHA with pause (asha.pareto_rungs) and the
searcher on Pareto ranks (ParetoTPE): pure, nothing trains."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from quanta.executor.policy.asha import AshaPolicy
from quanta.executor.policy.asha.pareto_rungs import PARETO_STATE
from quanta.executor.policy.knobs import AshaKnobs
from quanta.executor.policy.types import ClusterSnapshot, DeviceView, SearchView, TrialStatus, TrialView
from quanta.search.factory import make_searcher
from quanta.search.knobs import SearchAlgoSpec
from quanta.search.pareto import (
    Bound,
    Objective,
    PointReader,
    chebyshev,
    default_reference,
    epsilon_net,
    front,
    hypervolume,
    order,
    point_at,
    put_point,
    trial_points,
)
from quanta.search.pareto_tpe import ParetoTPE

INF = math.inf


def _dominates(a, b) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(x < y for x, y in zip(a, b, strict=True))


def test_order_puts_feasible_fronts_first_then_infeasible_by_violation_then_non_finite():
    points = [(1.0, 5.0), (2.0, 2.0), (3.0, 3.0), (5.0, 1.0), (0.0, 0.0), (INF, 0.0), (4.0, 4.0)]
    violations = [0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.5]
    got = order(points, violations)
    assert sorted(got) == list(range(len(points)))
    assert set(got[:3]) == {0, 1, 3}  # the feasible front
    assert got[3] == 2  # dominated by 1
    assert got[4:] == [6, 4, 5]  # infeasible by violation (0.5 before 2.0), then the non-finite one
    assert got[0] == 0  # the epsilon-net starts at the best in the first objective


def test_order_is_a_non_dominated_sort_on_random_points():
    rng = np.random.default_rng(3)
    pts = [tuple(map(float, p)) for p in rng.random((40, 3))]
    got = order(pts, [0.0] * len(pts))
    pos = {i: k for k, i in enumerate(got)}
    for a, b in itertools.permutations(range(len(pts)), 2):
        if _dominates(pts[a], pts[b]):
            assert pos[a] < pos[b]


def test_epsilon_net_spreads_a_front():
    x = np.array([[0.0, 1.0], [0.1, 0.9], [0.5, 0.5], [1.0, 0.0], [0.9, 0.1]])
    net = epsilon_net(x)
    assert net[0] == 0 and net[1] == 3 and net[2] == 2  # the two ends, then the middle


def test_front_and_hypervolume_match_brute_force():
    rng = np.random.default_rng(5)
    pts = [tuple(map(float, p)) for p in rng.random((30, 2))]
    viol = [0.0 if i % 5 else 1.0 for i in range(30)]
    got = set(front(pts, viol))
    feas = [i for i in range(30) if viol[i] == 0]
    want = {i for i in feas if not any(_dominates(pts[j], pts[i]) for j in feas)}
    assert got == want
    ref = (1.0, 1.0)
    # brute force on a grid: the share of the unit square the front dominates
    g = (np.arange(400) + 0.5) / 400
    xx, yy = np.meshgrid(g, g)
    dominated = np.zeros_like(xx, dtype=bool)
    for i in want:
        dominated |= (xx >= pts[i][0]) & (yy >= pts[i][1])
    assert hypervolume([pts[i] for i in want], ref) == pytest.approx(dominated.mean(), abs=0.01)
    assert hypervolume([(2.0, 0.5)], ref) == 0.0  # worse than the reference in one objective: nothing
    assert hypervolume([], ref) == 0.0


def test_default_reference_is_just_beyond_the_worst_finite_point():
    assert default_reference([(0.0, 1.0), (1.0, 0.0), (INF, 5.0)]) == pytest.approx((1.1, 1.1))
    assert default_reference([(INF, 1.0)]) is None


def test_reports_become_points_carrying_values_forward():
    reader = PointReader([Objective("acc"), Objective("params", "minimize")], [Bound("latency", high=5.0)])
    assert reader.read(0, {"params": 3.0}) is None  # accuracy not reported yet
    assert reader.missing() == ["acc"]
    assert reader.read(1, {"acc": 0.5, "latency": 7.5}) == (1, (-0.5, 3.0), pytest.approx(0.5))
    assert reader.read(2, {"acc": 0.6, "latency": 4.0}) == (2, (-0.6, 3.0), 0.0)
    assert reader.read(3, {"loss": 1.0}) is None  # no objective in it: no new point
    assert reader.read(4, {"acc": None}) == (4, (INF, 3.0), 0.0)  # non-finite (stored as null): kept, ranked last
    assert reader.missing() == []
    unknown = PointReader([Objective("acc")], [Bound("latency", high=5.0)])
    assert unknown.read(1, {"acc": 0.9}) == (1, (-0.9,), INF)  # a bounded value never reported: infeasible
    pts = trial_points([(0, {"params": 3.0}), (1, {"acc": 0.5, "latency": 1.0})], reader.objectives, reader.bounds)
    assert pts == [(1, (-0.5, 3.0), 0.0)]


def test_points_are_kept_in_step_order_and_a_step_again_replaces():
    pts: list = []
    for p in [(1, (1.0,), 0.0), (3, (3.0,), 0.0), (2, (2.0,), 0.0), (3, (0.5,), 0.0)]:
        put_point(pts, p)
    assert pts == [(1, (1.0,), 0.0), (2, (2.0,), 0.0), (3, (0.5,), 0.0)]
    assert point_at(pts, 2) == (2, (2.0,), 0.0) and point_at(pts, 4) is None


# ---- MO-ASHA with pause ---------------------------------------------------------------------------------

MAX = 270  # rungs 10, 30, 90, 270 (eta 3, min_steps 10)
SEARCH = SearchView(id=1, goal="maximize", max_steps=MAX, pareto=True)
DEVICES = (DeviceView("cpu:0"), DeviceView("cpu:1"))


def mo_trial(tid, steps=0, losses=None, violation=0.0, *, devices=(), running=False) -> TrialView:
    points = ((steps, tuple(losses), violation),) if losses is not None else ()
    return TrialView(
        id=tid,
        search_id=1,
        status=TrialStatus.RUNNING if devices else TrialStatus.QUEUED,
        devices=tuple(devices),
        running=running,
        arrival=float(tid),
        steps_done=steps,
        max_steps=MAX,
        curve=((steps, -losses[0]),) if losses is not None else (),
        points=points,
    )


def mo_plan(trials, state=None, devices=DEVICES):
    snap = ClusterSnapshot(now=0.0, devices=devices, trials=tuple(trials), searches=(SEARCH,), policy_state=state or {})
    return AshaPolicy(AshaKnobs(min_steps=10, rung_check=None)).plan(snap)


def test_a_rung_promotes_by_pareto_rank_not_by_the_first_objective():
    # Rung 10, three trials: top floor(3/3) = 1. Trial 1 is best in accuracy but infeasible; trial 3 is
    # dominated by 2. The feasible front is {2}: it goes on, 1 and 3 are parked, none is killed.
    plan = mo_plan(
        [
            mo_trial(1, 10, (-0.95, 9.0), violation=1.0, devices=["cpu:0"]),
            mo_trial(2, 10, (-0.80, 2.0), devices=["cpu:1"]),
            mo_trial(3, 10, (-0.70, 3.0), devices=["cpu:1"]),
            mo_trial(4),
        ]
    )
    assert plan.stop == ()
    assert set(plan.hold) == {1, 3}
    assert plan.running() == {2, 4}
    assert plan.state[PARETO_STATE]["1/0/0"]["1"] == [-0.95, 9.0, 1.0]
    assert plan.state["records"]["1/0/0"] == {"2": 0.0, "3": 1.0, "1": 2.0}


def test_a_parked_dominated_trial_goes_on_when_the_front_moves_past_it():
    # Trial 1 reaches rung 10 alone: top floor(1/3) = 0, parked.
    plan = mo_plan(
        [
            mo_trial(1, 10, (-0.6, 3.0), devices=["cpu:0"], running=True),
            mo_trial(2, 5, devices=["cpu:1"], running=True),
            mo_trial(3),
        ]
    )
    assert plan.hold == (1,) and plan.running() == {2, 3}
    # Two more arrive, each dominated by 1: the top 1 of 3 is now trial 1, resumed where it was parked.
    plan = mo_plan(
        [
            mo_trial(1, 10, (-0.6, 3.0), devices=["cpu:0"]),
            mo_trial(2, 10, (-0.5, 4.0), devices=["cpu:1"], running=True),
            mo_trial(3, 10, (-0.4, 3.5), devices=["cpu:1"]),
            mo_trial(4),
        ],
        plan.state,
    )
    assert plan.placement["cpu:0"] == (1,) and plan.limits[1] == 30
    assert set(plan.hold) == {2, 3}


def test_with_a_point_target_a_rung_ranks_on_the_objectives_not_yet_met():
    # Objectives (size in thousands of parameters, -accuracy), target at most 12 at accuracy 0.86: as
    # losses (12, -0.86). At rung 10 all three trials are on the front (none dominates another) and the
    # epsilon-net puts the smallest first. All three meet the size bound, so past it size says nothing
    # the user asked for: clipped at the target, the most accurate dominates and goes on.
    trials = [
        mo_trial(1, 10, (0.3, -0.43), devices=["cpu:0"]),
        mo_trial(2, 10, (6.0, -0.64), devices=["cpu:1"]),
        mo_trial(3, 10, (0.2, -0.30), devices=["cpu:1"]),
    ]
    assert mo_plan(trials).state["records"]["1/0/0"]["2"] > 0.0  # unclipped, it is not first
    target = dataclasses.replace(SEARCH, point=(12.0, -0.86), more_trials=True)
    snap = ClusterSnapshot(now=0.0, devices=DEVICES, trials=tuple(trials), searches=(target,), policy_state={})
    plan = AshaPolicy(AshaKnobs(min_steps=10, rung_check=None)).plan(snap)
    assert plan.state["records"]["1/0/0"] == {"2": 0.0, "1": 1.0, "3": 2.0}
    assert plan.running() == {2} and set(plan.hold) == {1, 3}
    # The points kept in the state are the trials' own, unclipped.
    assert plan.state[PARETO_STATE]["1/0/0"]["1"] == [0.3, -0.43, 0.0]


def test_points_are_recorded_once_and_kept_after_a_trial_ends():
    plan = mo_plan([mo_trial(1, 10, (-0.6, 3.0), devices=["cpu:0"], running=True)])
    # Trial 1 ended (gone from the snapshot); trial 2 arrives at rung 10 and is compared with it.
    plan = mo_plan([mo_trial(2, 10, (-0.9, 1.0), devices=["cpu:0"], running=True)], plan.state)
    assert set(plan.state[PARETO_STATE]["1/0/0"]) == {"1", "2"}
    assert plan.state["records"]["1/0/0"]["2"] == 0.0


def test_a_single_objective_search_plans_as_before():
    single = SearchView(id=1, goal="maximize", max_steps=MAX)
    ts = [mo_trial(1, 10, (-0.9, 1.0), devices=["cpu:0"]), mo_trial(2, 10, (-0.5, 0.0), devices=["cpu:1"])]
    snap = ClusterSnapshot(now=0.0, devices=DEVICES, trials=tuple(ts), searches=(single,))
    plan = AshaPolicy(AshaKnobs(min_steps=10)).plan(snap)
    assert PARETO_STATE not in plan.state
    assert plan.state["records"]["1/0/0"] == {"1": -0.9, "2": -0.5}


@pytest.mark.parametrize("check", [None, 0.5])  # None: the held-again fast path; 0.5: rung_check on reports
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_policy_planning_pareto_rungs_round_after_round_plans_as_a_fresh_one_does(seed, check):
    # As the single-objective test in test_asha: one policy plans round after round on the state it handed
    # out, with the views of trials nothing happened to reused (its memos then hold: rungs without a new
    # point are not sorted again, the stand-in views are the same objects, held trials are not re-decided);
    # a fresh policy given each snapshot must plan exactly the same.
    import dataclasses

    rng = np.random.default_rng(seed)
    views = {tid: mo_trial(tid) for tid in (1, 2, 3)}
    kept = AshaPolicy(AshaKnobs(min_steps=10, rung_check=check))
    state: dict = {}
    held_seen = 0
    for rnd in range(40):
        snap = ClusterSnapshot(
            now=10.0 * rnd, devices=DEVICES, trials=tuple(views.values()), searches=(SEARCH,), policy_state=state
        )
        plan = kept.plan(snap)
        fresh = AshaPolicy(AshaKnobs(min_steps=10, rung_check=check)).plan(snap)
        assert (plan.placement, plan.hold, plan.stop, plan.limits, plan.release) == (
            fresh.placement, fresh.hold, fresh.stop, fresh.limits, fresh.release,
        ), f"round {rnd}"  # fmt: skip
        assert plan.state == fresh.state, f"round {rnd}"
        held_seen += len(plan.hold)
        state = plan.state
        placed = {tid: d for d, ids in plan.placement.items() for tid in ids}
        for tid in list(views):
            v = views[tid]
            if tid in placed:  # runs to its limit (one rung), reporting two noisy objectives at odds there
                steps = plan.limits[tid]
                x = (tid % 7) / 7.0
                losses = (-0.3 - 0.002 * steps - 0.2 * x + rng.normal(0, 0.05), 1.0 + 3.0 * x + rng.normal(0, 0.2))
                violation = 0.0 if tid % 5 else 0.5
                views[tid] = dataclasses.replace(
                    v, devices=(placed[tid],), running=False, status=TrialStatus.RUNNING, steps_done=steps,
                    curve=(*v.curve, (steps, -losses[0])), points=(*v.points, (steps, losses, violation)),
                )  # fmt: skip
                if steps >= MAX:
                    del views[tid]  # done
            elif tid in plan.stop:
                del views[tid]
            # held or waiting: the very same view object next round
        views[max(views, default=3) + 1] = mo_trial(max(views, default=3) + 1)
    assert held_seen > 40  # trials were held round after round


# ---- the searcher -----------------------------------------------------------------------------------------

SPACE = {"x": {"uniform": [0.0, 1.0]}, "y": {"uniform": [0.0, 1.0]}}


def _tell_all(s, n):
    for k in range(n):
        s.ask(k)
        params = s.history()[k].vals
        x, y = params["x"][0], params["y"][0]
        # two objectives at odds: x small is good for the first, bad for the second; y large is bad for both
        s.observe_point(k, 10, (x + y, (1 - x) + y), 0.0 if y < 0.8 else 1.0)


def test_pareto_tpe_learns_from_ranks_and_a_restored_one_asks_the_same():
    algo = SearchAlgoSpec(algorithm="bohb", n_startup=8)
    s = make_searcher(SPACE, 7, algo, rungs=(10, 30), pareto=True)
    assert isinstance(s, ParetoTPE)
    _tell_all(s, 16)
    assert s._read_levels() == 0  # fitted on the first rung (16 trials there)
    scores = s._at_level[0]
    # each trial's score is its position in the Pareto order of the rung's points, over their number
    pts = {k: s._mo_points[k][0] for k in range(16)}
    want = order([pts[k][1] for k in range(16)], [pts[k][2] for k in range(16)])
    assert [k for k in sorted(scores, key=scores.__getitem__)] == want
    assert sorted(scores.values()) == [i / 16 for i in range(16)]
    asks = [s.ask(16 + i).params for i in range(12)]
    again = make_searcher(SPACE, 7, algo, rungs=(10, 30), history=s.history()[:16], pareto=True)
    assert [again.ask(16 + i).params for i in range(12)] == asks


def test_chebyshev_scores_feasible_points_by_their_weighted_worst_then_infeasible_then_non_finite():
    pts = [(0.0, 4.0), (2.0, 2.0), (4.0, 0.0), (3.0, 3.0), (1.0, 1.0), (0.5, INF)]
    viol = [0.0, 0.0, 0.0, 0.0, 0.5, 0.0]
    s = chebyshev(pts, viol, (1.0, 0.0))  # all the weight on the first objective, scaled over [0, 4]
    assert s[:4] == pytest.approx([0.0, 0.5 * 1.05, 1.05, 0.75 * 1.05])
    assert 2.0 <= s[4] < 3.0 and s[5] == 4.0  # infeasible after every feasible point, non-finite last
    even = chebyshev(pts, viol, (0.5, 0.5))
    assert min(range(4), key=even.__getitem__) == 1  # the middle of the front, under even weights
    assert chebyshev(pts, [0.0, 0.0, 0.0, 0.0, INF, 0.0], (0.5, 0.5))[4] == 3.0
    rng = np.random.default_rng(0)
    x = rng.random((40, 3))
    for w in rng.dirichlet(np.ones(3), size=20):
        sc = chebyshev([tuple(p) for p in x], [0.0] * 40, tuple(w))
        for i, j in itertools.permutations(range(40), 2):
            if _dominates(x[i], x[j]):
                assert sc[i] < sc[j]  # a dominated point never scores better, whatever the weights


def test_the_default_pareto_searcher_aims_its_model_asks_along_the_front():
    # ParEGO on the GP: each model ask scalarises by its own weights, so its asks lie near the front
    # (y small) and spread along it (x over its range).
    algo = SearchAlgoSpec(algorithm="bohb", n_startup=10, random_fraction=0.0)
    s = make_searcher(SPACE, 3, algo, rungs=(10, 30), pareto=True)
    assert isinstance(s, ParetoTPE) and s._gp is not None
    for k in range(40):
        p = s.ask(k).params
        x, y = p["x"], p["y"]
        s.observe_point(k, 10, (x + y, (1 - x) + y), 0.0)
    model = [h.vals for h in s.history()[10:]]
    ys = np.array([v["y"][0] for v in model])
    xs = np.array([v["x"][0] for v in model])
    assert np.median(ys) < 0.1  # near the front; a random ask's median y is 0.5
    assert xs.std() > 0.15  # along it, not at one point


def test_a_searcher_rebuilt_at_any_ask_asks_what_the_original_asked():
    # ParEGO's losses change with each ask's weights; the kernel's parameters must not, or a searcher
    # rebuilt from its history fits otherwise than the original did for the same ask.
    space = {"x": {"uniform": [0.0, 1.0]}, "y": {"uniform": [0.0, 1.0]}, "z": {"uniform": [0.0, 1.0]}}
    algo = SearchAlgoSpec(algorithm="bohb", n_startup=8, random_fraction=0.0)
    s = make_searcher(space, 7, algo, rungs=(10, 30), pareto=True)
    for k in range(60):
        p = s.ask(k).params
        s.observe_point(k, 10, (p["x"] + p["y"], 1 - p["x"] + p["y"] + 0.3 * p["z"]), 0.0)
    for cut in range(10, 60, 3):
        rebuilt = make_searcher(space, 7, algo, rungs=(10, 30), history=s.history()[:cut], pareto=True)
        assert rebuilt.ask(cut).vals == s.history()[cut].vals, cut


def test_other_algorithms_with_pareto():
    tpe = make_searcher(SPACE, 1, SearchAlgoSpec(algorithm="tpe"), rungs=(10, 30), pareto=True)
    assert isinstance(tpe, ParetoTPE) and tpe.levels == (30,)
    rnd = make_searcher(SPACE, 1, SearchAlgoSpec(algorithm="random"), rungs=(10, 30), pareto=True)
    rnd.ask(0)
    rnd.observe_point(0, 10, (1.0, 2.0), 0.0)  # accepted and ignored
