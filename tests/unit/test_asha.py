"""ASHA and Hyperband as pure policies, on hand-built snapshots (no training, no processes)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from quanta.executor.policy import make_policy
from quanta.executor.policy.asha import AshaPolicy
from quanta.executor.policy.asha.held import Held, HeldSet
from quanta.executor.policy.knobs import AshaKnobs
from quanta.executor.policy.types import ClusterSnapshot, DeviceView, SearchView, TrialStatus, TrialView
from quanta.search.factory import make_searcher
from quanta.search.fidelity import default_first_rung, rungs
from quanta.spec import parse_spec

MAX = 270  # rungs 10, 30, 90, 270 with eta 3 and min_steps 10
SEARCH = SearchView(id=1, goal="maximize", target=0.99, max_steps=MAX)
DEVICES = (DeviceView("cpu:0"), DeviceView("cpu:1"))


def trial(tid: int, steps: int = 0, acc: float | None = None, *, devices=(), running=False, memory=None) -> TrialView:
    curve = ((steps, acc),) if acc is not None else ()
    status = TrialStatus.RUNNING if devices else TrialStatus.QUEUED
    return TrialView(
        id=tid,
        search_id=1,
        status=status,
        devices=tuple(devices),
        running=running,
        arrival=float(tid),
        steps_done=steps,
        max_steps=MAX,
        curve=curve,
        memory_mb=memory,
    )


def snap(trials, state=None, devices=DEVICES) -> ClusterSnapshot:
    return ClusterSnapshot(now=0.0, devices=devices, trials=tuple(trials), searches=(SEARCH,), policy_state=state or {})


def policy(**knobs) -> AshaPolicy:
    return AshaPolicy(AshaKnobs(min_steps=10, **knobs))


def test_rungs_and_brackets():
    p = policy()
    assert p.levels(trial(1), SEARCH) == (10, 30, 90, 270)
    hb = make_policy("hyperband", min_steps=10)
    assert isinstance(hb, AshaPolicy) and hb.name == "hyperband" and hb.knobs.brackets == 3
    assert [hb.levels(trial(i), SEARCH) for i in range(3)] == [(10, 30, 90, 270), (30, 90, 270), (90, 270)]


def test_a_trial_below_its_rung_is_held_not_killed_and_a_new_trial_takes_the_device():
    # Trials 1-3 reached rung 10 (top floor(3/3) = 1: only trial 1 goes on); 3 was running there.
    plan = policy().plan(
        snap(
            [
                trial(1, 10, 0.9, devices=["cpu:0"]),
                trial(2, 10, 0.5, devices=["cpu:1"]),
                trial(3, 10, 0.2, devices=["cpu:1"], running=True),
                trial(4),
            ]
        )
    )
    assert plan.stop == ()
    assert set(plan.hold) == {2, 3}
    assert plan.running() == {1, 4}  # 1 promoted (best at rung 10), 4 is new
    assert plan.limits == {1: 30, 4: 10}
    assert plan.state["allowed"]["1"] == 1 and plan.state["allowed"]["3"] == 0


def test_promotion_order_is_highest_rung_first_then_best():
    # Records: rung 0 has 6 trials (top 2), rung 1 has 3 trials (top 1).
    state = {
        "allowed": {"1": 1, "2": 1, "3": 1, "4": 0, "5": 0, "6": 0},
        "records": {
            "1/0/0": {"1": -0.9, "2": -0.8, "3": -0.7, "4": -0.6, "5": -0.85, "6": -0.1},
            "1/0/1": {"1": -0.95, "2": -0.9, "3": -0.8},
        },
    }
    ts = [
        trial(1, 30, 0.95, devices=["cpu:0"]),
        trial(2, 30, 0.9, devices=["cpu:1"]),
        trial(3, 30, 0.8),
        trial(4, 10, 0.6),
        trial(5, 10, 0.85),
        trial(6, 10, 0.1),
    ]
    plan = policy().plan(snap(ts, state, devices=(DeviceView("cpu:0"),)))
    assert plan.running() == {1}  # the best of the highest rung
    assert plan.limits == {1: 90}
    plan2 = policy().plan(snap(ts, state))
    # Two devices: 1 (rung 1's top 1), then 5 (rung 0's top 2 = {1, 5}; 1 is past rung 0 already).
    assert plan2.running() == {1, 5}
    assert set(plan2.hold) == {2, 3, 4, 6}


def test_a_held_trial_is_promoted_later_when_later_trials_at_its_rung_are_worse():
    # Trial 1 reaches rung 10 first with a middling value: top floor(1/3) = 0, so it is held and the
    # queued trial 3 takes its device.
    ts = [
        trial(1, 10, 0.6, devices=["cpu:0"], running=True),
        trial(2, 5, devices=["cpu:1"], running=True),
        trial(3),
    ]
    plan = policy().plan(snap(ts))
    assert plan.hold == (1,) and plan.running() == {2, 3}
    # Trials 2 and 3 reach rung 10 worse than 1: now 1 is the top floor(3/3) = 1 and is promoted, on
    # its own device (it is resident: it resumes where it stopped, nothing restarts).
    ts = [
        trial(1, 10, 0.6, devices=["cpu:0"]),
        trial(2, 10, 0.3, devices=["cpu:1"], running=True),
        trial(3, 10, 0.2, devices=["cpu:0"], running=True),
        trial(4),
    ]
    plan = policy().plan(snap(ts, plan.state))
    assert plan.placement["cpu:0"] == (1,) and plan.placement["cpu:1"] == (4,)
    assert plan.limits == {1: 30, 4: 10} and plan.state["allowed"]["1"] == 1
    assert set(plan.hold) == {2, 3}


def test_idle_devices_run_the_best_held_trial_when_nothing_else_waits():
    state = {"allowed": {"1": 0, "2": 0}, "records": {"1/0/0": {"1": -0.5, "2": -0.4}}}
    plan = policy().plan(snap([trial(1, 10, 0.5, devices=["cpu:0"]), trial(2, 10, 0.4, devices=["cpu:1"])], state))
    # Neither is in the top floor(2/3) = 0, no queued trial: both run rather than leave devices idle.
    assert plan.running() == {1, 2} and plan.hold == ()


@pytest.mark.parametrize("order, one, two", [("highest", {3: 90}, {3: 90, 4: 30}), ("lowest", {4: 30}, {4: 30, 6: 30})])
def test_once_no_trial_is_left_to_make_the_tail_order_says_which_held_trials_go_on_first(order, one, two):
    # Rung 0 holds 6 records (top 2: trials 1 and 5), rung 1 holds 3 (top 1: trial 1); 1, 2 and 5 have
    # ended. Of the alive ones none is in its rung's top, so only the idle-device rule sends them on.
    state = {
        "allowed": {"3": 1, "4": 0, "6": 0},
        "records": {
            "1/0/0": {"1": -0.9, "2": -0.8, "3": -0.7, "4": -0.6, "5": -0.85, "6": -0.1},
            "1/0/1": {"1": -0.95, "2": -0.9, "3": -0.8},
        },
    }
    ts = [trial(3, 30, 0.8), trial(4, 10, 0.6), trial(6, 10, 0.1)]
    plan = policy(tail_order=order).plan(snap(ts, state, devices=(DeviceView("cpu:0"),)))
    assert plan.limits == one  # highest: trial 3 towards its last step; lowest: rung 0's best one rung on
    plan = policy(tail_order=order).plan(snap(ts, state))
    assert plan.limits == two
    assert set(plan.hold) == {3, 4, 6} - two.keys()


def test_held_trials_wait_for_new_configurations_while_their_search_will_make_more():
    state = {"allowed": {"1": 0, "2": 0}, "records": {"1/0/0": {"1": -0.5, "2": -0.4}}}
    ts = [trial(1, 10, 0.5, devices=["cpu:0"]), trial(2, 10, 0.4, devices=["cpu:1"])]
    growing = SearchView(id=1, goal="maximize", target=0.99, max_steps=MAX, more_trials=True)
    plan = policy().plan(ClusterSnapshot(now=0.0, devices=DEVICES, trials=tuple(ts), searches=(growing,),
                                         policy_state=state))  # fmt: skip
    # Devices stay free this round: the controller fills the search's parallelism with new trials
    # (held ones do not count) and plans again.
    assert plan.running() == set() and set(plan.hold) == {1, 2}


def test_memory_budget_releases_the_lowest_held_trials():
    state = {
        "allowed": {"1": 1, "2": 0, "3": 0, "4": 0},
        "records": {"1/0/0": {"1": -0.9, "2": -0.5, "3": -0.4, "4": -0.45}, "1/0/1": {"1": -0.8}},
    }
    ts = [
        trial(1, 30, 0.8, devices=["cpu:0"], memory=100.0),
        trial(2, 10, 0.5, devices=["cpu:0"], memory=100.0),
        trial(3, 10, 0.4, devices=["cpu:1"], memory=100.0),
        trial(4, 10, 0.45, devices=["cpu:1"], memory=100.0),
        trial(5),
        trial(6),
    ]
    plan = policy(memory_budget_mb=250.0).plan(snap(ts, state))
    # Nobody is promotable (rung 1: top floor(1/3) = 0; rung 0: top 1 = trial 1, already past it): the
    # new trials 5 and 6 run, 1-4 are held in memory, 400 MB > 250: the lowest rung's worst go first
    # (3 at 0.4, then 4 at 0.45), trial 1 at the higher rung stays.
    assert plan.running() == {5, 6}
    assert set(plan.hold) == {1, 2, 3, 4}
    assert plan.release == (3, 4)
    assert policy(memory_budget_mb=0).plan(snap(ts, state)).release == ()  # no budget: nothing released
    assert policy().plan(snap(ts, state)).release == ()  # the default budget (4 GiB) holds them


def _textbook_stop(recorded: list[float], value: float, eta: float) -> bool:
    """Ray Tune's ASHA stopping rule, in accuracy terms (maximize): stop when below the cutoff."""
    cutoff = np.nanpercentile(recorded, (1 - 1 / eta) * 100)
    return value < cutoff


@pytest.mark.parametrize("seed", range(5))
def test_kill_variant_matches_textbook_asha_stopping_on_a_scripted_sequence(seed):
    rng = np.random.default_rng(seed)
    values = rng.uniform(0.1, 0.9, size=20).round(3)
    state: dict = {}
    recorded: list[float] = []
    p = policy(mode="kill")
    for i, v in enumerate(values, start=1):
        # Trial i reaches rung 10 with accuracy v; earlier trials have ended (only their records remain).
        plan = p.plan(snap([trial(i, 10, float(v), devices=["cpu:0"], running=True)], state))
        recorded.append(float(v))
        expected = _textbook_stop(recorded, float(v), 3.0)
        assert (i in plan.stop) == expected, (i, v, recorded)
        assert set(plan.reasons) == set(plan.stop)  # each stop carries its verdict
        if expected:
            assert plan.reasons[i].startswith("below the top 1/3 of rung 10 steps")
        if not expected:
            assert plan.limits[i] == 30
        state = plan.state


def test_trace_jobs_without_a_search_run_first_come_first_served():
    job = TrialView(id=9, search_id=0, arrival=0.0, max_steps=100)
    plan = policy().plan(ClusterSnapshot(now=0.0, devices=DEVICES, trials=(job,)))
    assert plan.running() == {9} and plan.hold == ()


def test_default_first_rung_is_shared_by_the_policy_and_the_searcher():
    """With no `min_steps` anywhere, the asha policy and the bohb searcher use the same rungs, starting at
    `max_steps / eta**4` (25 of 2,000 steps; 123 of 10,000; 1 of LCBench's 52 epochs)."""
    assert [default_first_rung(n, 3.0) for n in (2000, 10000, 52, 1)] == [25, 123, 1, 1]
    spec = parse_spec(
        {
            "name": "s",
            "trainable": "examples.m:train",
            "metric": {"name": "acc"},
            "space": {"x": {"uniform": [0, 1]}},
            "budget": {"max_steps": 2000},
        }
    )
    assert spec.scheduler.policy == "asha" and spec.search.algorithm == "bohb"
    long_trial = dataclasses.replace(trial(1), max_steps=2000)
    levels = AshaPolicy(AshaKnobs()).levels(long_trial, SearchView(id=1, goal="maximize", target=None, max_steps=2000))
    assert levels == rungs(2000, 25, 3.0) == (25, 75, 225, 675, 2000)
    assert spec.searcher_rungs() == levels
    searcher = make_searcher(spec.space, spec.seed, spec.search, rungs=spec.searcher_rungs())
    assert searcher.levels == levels  # type: ignore[attr-defined]


def test_the_rent_rule_promotes_the_best_of_a_thin_rung_once_it_has_waited_its_next_rungs_cost():
    growing = (SearchView(id=1, goal="maximize", target=0.99, max_steps=MAX, more_trials=True),)

    def at(tid, steps, acc, seconds_per_step=1.0, **kw):
        return dataclasses.replace(trial(tid, steps, acc, **kw), device_seconds=steps * seconds_per_step)

    def plan_of(now, ts, state=None):
        return policy(rule="rent").plan(
            ClusterSnapshot(now=now, devices=DEVICES, trials=tuple(ts), searches=growing, policy_state=state or {})
        )

    # Alone at rung 10, 1 s per step: rung 30 costs it 20 device-seconds, 10 s of the 2-device cluster.
    ts = [at(1, 10, 0.6, devices=["cpu:0"]), at(2, 4, 0.3, devices=["cpu:1"], running=True), trial(3)]
    plan = plan_of(100.0, ts)
    assert plan.hold == (1,) and plan.running() == {2, 3} and plan.state["held"] == {"1": [0, 100.0]}
    plan = plan_of(109.9, ts, plan.state)
    assert plan.hold == (1,) and plan.state["held"]["1"] == [0, 100.0]  # the wait counts from when it was held
    # A second, worse trial at rung 10 does not reset the first's wait and is not promoted by it.
    ts[1] = at(2, 10, 0.4, devices=["cpu:1"])
    plan = plan_of(110.0, ts, plan.state)
    assert plan.hold == (2,) and plan.devices_of(1) and plan.limits[1] == 30 and plan.state["allowed"]["1"] == 1
    assert not plan.state.get("held")  # 2 is not its rung's best: no wait to keep
    # A slower trial (3 s per step) waits three times as long; textbook promotion never lets it go alone.
    slow = [at(1, 10, 0.6, 3.0, devices=["cpu:0"]), trial(2)]
    assert plan_of(29.9, slow, {"held": {"1": [0, 0.0]}}).hold == (1,)
    assert plan_of(30.0, slow, {"held": {"1": [0, 0.0]}}).hold == ()
    assert policy().plan(ClusterSnapshot(now=1e6, devices=DEVICES, trials=tuple(slow), searches=growing)).hold == (1,)
    # Once eta are recorded, rank promotion decides: the held best (top floor(3/3) = 1) goes at once.
    ts = [at(1, 10, 0.6, devices=["cpu:0"]), at(2, 10, 0.4, devices=["cpu:1"]), at(3, 10, 0.5), trial(4)]
    plan = plan_of(0.0, ts)
    assert set(plan.hold) == {2, 3} and plan.limits[1] == 30


def _records(n: int, agree: bool) -> dict:
    # n trials (ids 100..) recorded at rungs 10 and 30, losses (smaller is better) in the same order at both
    # rungs, or reversed at 30.
    first = {str(100 + i): -0.5 - 0.01 * i for i in range(n)}
    second = {str(100 + i): -0.6 - 0.01 * (i if agree else n - i) for i in range(n)}
    return {"1/0/0": first, "1/0/1": second}  # search/bracket/rung


def test_rung_check_passes_over_a_rung_that_ranks_unlike_the_next_and_lets_its_held_trials_go_on():
    growing = (SearchView(id=1, goal="maximize", target=0.99, max_steps=MAX, more_trials=True),)
    # Trial 1 is held at rung 10 (two better trials there); trial 2 is new.
    held = [trial(1, 10, 0.3, devices=["cpu:0"]), trial(2)]

    def plan_of(state, **knobs):
        # Decided after 20 pairs unless a test says otherwise (the default is 10).
        knobs = {"rung_check_pairs": 20, **knobs}
        snapshot = ClusterSnapshot(now=0.0, devices=DEVICES, trials=tuple(held), searches=growing, policy_state=state)
        return policy(**knobs).plan(snapshot)

    def rungs_of(n: int, agree: bool) -> dict:
        # The records (best so far: what a hold is decided on) agree; each trial's report at each rung
        # (what rung_check correlates) agrees or not.
        return {"records": _records(n, agree=True), "reports": _records(n, agree=agree)}

    backwards = rungs_of(20, agree=False)
    assert plan_of(backwards, rung_check=None).hold == (1,)  # without the knob: held below its rung's top third
    plan = plan_of(backwards, rung_check=0.3)
    assert plan.hold == () and plan.state["passed"] == {"1/0": [1, False]}
    assert any("1/0: its lowest 1 rung(s) passed over" in n for n in plan.notes)
    assert plan.running() == {1, 2} and plan.limits == {1: 30, 2: 30}  # both run to rung 30 now
    assert plan.state["reports"]["1/0/0"]["1"] == -0.3  # the held trial's own report is recorded beside them
    # Too few trials at both rungs: the rung judges meanwhile (and nothing is decided).
    plan = plan_of(rungs_of(19, agree=False), rung_check=0.3)
    assert plan.hold == (1,) and plan.state["passed"] == {"1/0": [0, False]}
    # A rung that ranks as the next does keeps judging, and the decision is kept: later reports that
    # disagree do not undo it.
    plan = plan_of(rungs_of(20, agree=True), rung_check=0.3)
    assert plan.hold == (1,) and plan.state["passed"] == {"1/0": [0, True]}
    later = plan_of({**rungs_of(40, agree=False), "passed": plan.state["passed"]}, rung_check=0.3)
    assert later.hold == (1,) and later.state["passed"] == {"1/0": [0, True]}
    # Best-so-far records that disagree do not count: it correlates the reports, which agree here.
    disagreeing_records = {"records": _records(20, agree=False), "reports": _records(20, agree=True)}
    assert plan_of(disagreeing_records, rung_check=0.3).hold == (1,)
    # The defaults: 0.5 on the reports, decided after 10 pairs.
    assert AshaKnobs().rung_check == 0.5 and AshaKnobs().rung_check_pairs == 10
    defaults = rungs_of(10, agree=False)
    plan = policy().plan(
        ClusterSnapshot(now=0.0, devices=DEVICES, trials=tuple(held), searches=growing, policy_state=defaults)
    )
    assert plan.hold == () and plan.state["passed"] == {"1/0": [1, False]}


@pytest.mark.parametrize("memory", [None, 300.0])  # 300 MB per trial: the 1,000 MB budget releases held ones
@pytest.mark.parametrize("check", [None, 0.5])  # None: the held-again fast path; 0.5: the default rung_check
@pytest.mark.parametrize("rule", ["rent", "promotion"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_policy_planning_round_after_round_plans_as_a_fresh_one_does(rule, seed, check, memory):
    # One policy object plans a little world round after round on the state it handed out, with the views
    # of trials nothing happened to reused as the controller's snapshot reuses them: it then skips
    # re-deciding the trials it held and sorts rung losses incrementally. A fresh policy (no memo)
    # planning each of those snapshots must decide exactly the same.
    rng = np.random.default_rng(seed)
    growing = (SearchView(id=1, goal="maximize", target=0.99, max_steps=MAX, more_trials=True),)
    views = {tid: trial(tid, memory=memory) for tid in (1, 2, 3)}
    budget = {"memory_budget_mb": 1000.0} if memory else {}
    kept = policy(rule=rule, rung_check=check, **budget)
    state: dict = {}
    held_seen = released = 0
    for rnd in range(40):
        snapshot = ClusterSnapshot(
            now=10.0 * rnd, devices=DEVICES, trials=tuple(views.values()), searches=growing, policy_state=state
        )
        plan = kept.plan(snapshot)
        fresh = policy(rule=rule, rung_check=check, **budget).plan(snapshot)
        assert (plan.placement, plan.hold, plan.stop, plan.limits, plan.release) == (
            fresh.placement, fresh.hold, fresh.stop, fresh.limits, fresh.release,
        ), f"round {rnd}"  # fmt: skip
        assert plan.state == fresh.state, f"round {rnd}"
        held_seen += len(plan.hold)
        state = plan.state
        placed = {tid: d for d, ids in plan.placement.items() for tid in ids}
        for tid in list(views):
            v = views[tid]
            if tid in placed:  # runs to its limit (one rung), reporting a noisy accuracy there
                steps = plan.limits[tid]
                acc = float(np.clip(0.3 + 0.002 * steps + 0.1 * (tid % 5) + rng.normal(0, 0.05), 0, 1))
                curve = (*v.curve, (steps, acc))
                views[tid] = dataclasses.replace(
                    v, devices=(placed[tid],), running=False, status=TrialStatus.RUNNING, steps_done=steps,
                    curve=curve, device_seconds=float(steps),
                )  # fmt: skip
                if steps >= MAX:
                    del views[tid]  # done
            elif tid in plan.stop:
                del views[tid]
            elif tid in plan.release:  # checkpointed and freed: no longer resident
                views[tid] = dataclasses.replace(v, devices=())
                released += 1
            # held or waiting: the very same view object next round
        views[max(views, default=3) + 1] = trial(max(views, default=3) + 1, memory=memory)
    assert held_seen > 40  # the memo's path was taken (trials were held round after round)
    assert (released > 0) == bool(memory)


def test_the_held_set_keeps_each_rung_sorted_and_drops_trials_whose_view_changed():
    def held(tid: int, loss: float, rung: int = 0) -> Held:
        return Held(trial(tid, 10, -loss, devices=("cpu:0",), memory=100.0), rung, loss, (10, 30, 90, 270), 0)

    hs = HeldSet()
    entries = [held(1, 0.5), held(2, 0.2), held(3, 0.9), held(4, 0.1, rung=1)]
    for h in entries:
        hs.add(h)
    assert [h.view.id for h in hs.best((1, 0, 0), 0.6)] == [2, 1]  # best first, up to the bar
    assert [h.view.id for h in hs.best((1, 1, 0), 0.05)] == []
    assert hs.allowed == {"1": 0, "2": 0, "3": 0, "4": 1} and sum(hs.memory.values()) == 400.0
    views = [h.view for h in entries]
    assert hs.split(views) == [] and len(hs) == 4  # every view the same object: all held again
    changed = dataclasses.replace(views[1], running=True)
    others = hs.split([views[0], changed, views[3]])  # 2's view changed, 3 ended
    assert others == [changed] and sorted(hs.entries) == [1, 4]
    assert [h.view.id for h in hs.best((1, 0, 0), 1.0)] == [1] and set(hs.rungs()) == {(1, 0, 0), (1, 1, 0)}
    assert hs.allowed == {"1": 0, "4": 1} and hs.searches() == {1} and dict(hs.groups()) == {(1, 0): (10, 30, 90, 270)}
    hs.remove(1)
    hs.remove(4)
    assert len(hs) == 0 and list(hs.rungs()) == [] and list(hs.groups()) == [] and hs.memory == {}


def test_the_rules_bars_are_li_et_als_top_third_and_the_thin_rungs_best():
    from quanta.executor.policy.asha.rules import held_since, promotion_bar, thin_bar
    from quanta.search.fidelity import in_top_sorted

    rng = np.random.default_rng(3)
    for n in range(1, 12):
        ranked = sorted(rng.random(n).tolist())
        bar = promotion_bar(ranked, 3.0)
        # Promoted exactly when in the top floor(n / eta): at or below the bar.
        assert all((v <= bar) == in_top_sorted(v, ranked, 3.0) for v in ranked)
        assert thin_bar(ranked, 3.0) == (ranked[0] if n < 3 else -np.inf)
    # Rule 3's clock: kept while the trial waits at the same rung, restarted at another.
    t = trial(7, 10, 0.5)
    assert held_since([(0, 0.5, t)], {"7": [0, 12.0]}, now=20.0) == {7: (0, 12.0)}
    assert held_since([(1, 0.5, t)], {"7": [0, 12.0]}, now=20.0) == {7: (1, 20.0)}
