"""The freeze-thaw policy on hand-built snapshots (no training, no processes)."""

from __future__ import annotations

import dataclasses
import json

from quanta.executor.policy import make_policy
from quanta.executor.policy.freeze_thaw import FreezeThawPolicy
from quanta.executor.policy.knobs import FreezeThawKnobs
from quanta.executor.policy.types import ClusterSnapshot, DeviceView, SearchView, TrialStatus, TrialView
from quanta.search.curve_model import levels_for

MAX = 52
LEVELS = levels_for(MAX)  # (2, 3, 4, 6, 8, 11, 16, 23, 32, 52)
SEARCH = SearchView(id=1, goal="maximize", target=0.95, max_steps=MAX, more_trials=True)
ONE = (DeviceView("cpu:0"),)
TWO = (DeviceView("cpu:0"), DeviceView("cpu:1"))


def trial(tid: int, accs: list[float] = (), *, devices=(), running=False, arrival=None, memory=None) -> TrialView:
    curve = tuple((i + 1, a) for i, a in enumerate(accs))
    steps = len(accs)
    return TrialView(
        id=tid,
        search_id=1,
        status=TrialStatus.RUNNING if devices else TrialStatus.QUEUED,
        devices=tuple(devices),
        running=running,
        arrival=float(tid if arrival is None else arrival),
        steps_done=steps,
        max_steps=MAX,
        device_seconds=2.0 * steps,
        curve=curve,
        memory_mb=memory,
    )


def snap(trials, *, state=None, devices=ONE, search=SEARCH) -> ClusterSnapshot:
    return ClusterSnapshot(now=0.0, devices=devices, trials=tuple(trials), searches=(search,), policy_state=state or {})


def history(n: int = 40) -> list[TrialView]:
    """Trials that tell the model how curves go: 6 epochs each, values spread between 0.5 and 0.9,
    each gaining a little per epoch."""
    return [trial(100 + i, [0.5 + 0.4 * i / n + 0.01 * e for e in range(6)], devices=("cpu:9",)) for i in range(n)]


def learned(search: SearchView = SEARCH) -> dict:
    """The state of a policy that saw `history()` (those trials have ended since)."""
    return dict(FreezeThawPolicy().plan(snap(history(), devices=(DeviceView("cpu:9"),), search=search)).state)


def test_it_is_registered_and_built_from_its_knobs():
    p = make_policy("freeze_thaw", give_up_p=0.01)
    assert isinstance(p, FreezeThawPolicy) and p.knobs.give_up_p == 0.01 and p.judge_knobs is None


def test_before_any_report_new_trials_start_in_arrival_order_up_to_their_first_level():
    plan = FreezeThawPolicy().plan(snap([trial(1), trial(2), trial(3)], devices=TWO))
    assert sorted(plan.running()) == [1, 2]
    assert plan.limits == {1: LEVELS[0], 2: LEVELS[0]}
    assert plan.stop == ()


def test_a_running_trial_is_never_preempted_and_runs_to_its_next_level():
    running = trial(1, [0.6, 0.62, 0.64], devices=("cpu:0",), running=True)  # passed levels 2 and 3
    plan = FreezeThawPolicy().plan(snap([running, trial(2)]))
    assert plan.placement == {"cpu:0": (1,)}
    assert plan.limits == {1: 4}


def test_a_parked_trial_heading_for_the_target_goes_before_a_new_configuration():
    good = trial(1, [0.88, 0.9, 0.92, 0.93], devices=("cpu:0",))  # parked at level 4 epochs
    plan = FreezeThawPolicy().plan(snap([good, trial(2)], state=learned()))
    assert plan.devices_of(1) == ("cpu:0",)
    assert plan.limits[1] == 6


def test_a_hopeless_parked_trial_waits_while_a_new_configuration_takes_the_device():
    bad = trial(1, [0.5, 0.5, 0.5, 0.5], devices=("cpu:0",))
    plan = FreezeThawPolicy().plan(snap([bad, trial(2)], state=learned()))
    assert plan.devices_of(2) == ("cpu:0",)
    assert 1 in plan.hold and 1 not in plan.stop  # parked, not killed


def test_once_no_new_trials_come_hopeless_trials_stop_but_never_the_best():
    ended = dataclasses.replace(SEARCH, more_trials=False)
    best = trial(1, [0.6, 0.6, 0.6, 0.6], devices=("cpu:0",))
    worse = trial(2, [0.5, 0.5, 0.5, 0.5], devices=("cpu:0",))
    # Both trail what the search has seen by far; the better of the two is the best alive.
    plan = FreezeThawPolicy().plan(snap([best, worse], state=learned(ended), search=ended, devices=TWO))
    assert plan.stop == (2,) and "P(reach target)" in plan.reasons[2]
    assert plan.devices_of(1)  # the best trial alive goes on, whatever its chance


def test_a_restarted_policy_plans_as_the_running_one():
    trials = [trial(1, [0.88, 0.9, 0.92, 0.93], devices=("cpu:0",)), trial(2, [0.7, 0.7], devices=("cpu:0",)), trial(3)]
    first = FreezeThawPolicy()
    plan = first.plan(snap(trials, state=learned()))
    again = first.plan(snap(trials, state=plan.state))
    fresh = FreezeThawPolicy().plan(snap(trials, state=plan.state))
    assert again.placement == fresh.placement and again.limits == fresh.limits and again.hold == fresh.hold


def test_parked_trials_past_the_memory_budget_are_released_lowest_first():
    knobs = FreezeThawKnobs(memory_budget_mb=150)
    good = trial(1, [0.88, 0.9, 0.92, 0.93], devices=("cpu:0",), memory=100)
    bad = trial(2, [0.5, 0.5, 0.5, 0.5], devices=("cpu:0",), memory=100)
    middling = trial(3, [0.7, 0.7, 0.7, 0.7], devices=("cpu:0",), memory=100)
    plan = FreezeThawPolicy(knobs).plan(snap([good, bad, middling], state=learned()))
    assert plan.release[0] == 2


def test_released_trials_are_held_and_a_device_is_never_left_idle_while_a_trial_waits():
    # Parked trials were checkpointed and freed (no devices) and look hopeless: they must not count
    # against the search's parallelism (held), and a free device still runs the best of them until a
    # new configuration arrives.
    released = [trial(i, [0.5, 0.5, 0.5, 0.5]) for i in (1, 2, 3)]
    plan = FreezeThawPolicy().plan(snap(released, state=learned(), devices=TWO))
    assert len(plan.running()) == 2
    assert set(plan.hold) == {1, 2, 3} - set(plan.running())


def test_a_model_without_data_says_so_and_curves_it_cannot_use_do_not_stop_it():
    # One trial, a constant curve with a non-finite report in it: the model leans on its prior (noted),
    # and the round still plans.
    lone = trial(1, [0.6, 0.6, float("nan"), 0.6], devices=("cpu:0",))
    plan = FreezeThawPolicy().plan(snap([lone, trial(2)]))
    assert any("leans on its prior" in n for n in plan.notes)
    assert plan.placement  # a device is given to someone
    # A metric that never changes across many trials: fits with no spread at all still plan.
    flat = [trial(10 + i, [0.5] * 6, devices=("cpu:0",)) for i in range(30)]
    plan = FreezeThawPolicy().plan(snap([*flat, trial(2)], devices=TWO))
    assert len(plan.running()) == 2


def test_over_a_whole_search_a_policy_rebuilt_from_the_state_plans_as_the_running_one():
    """Rounds of a small search (trials advance one level when placed, new ones arrive when others are
    held): at every round a fresh policy given only the stored state plans exactly as the running one."""
    import random

    rng = random.Random(5)
    quality = {i: rng.uniform(0.5, 0.97) for i in range(1, 200)}

    def acc(tid: int, epoch: int) -> float:
        return quality[tid] * (1 - 0.5 * 0.8**epoch)

    steps = {1: 0, 2: 0}
    running: set[int] = set()
    running_policy, state = FreezeThawPolicy(), {}
    for _round in range(60):
        trials = []
        for tid, done in steps.items():
            curve = [acc(tid, e + 1) for e in range(done)]
            on = ("cpu:0",) if tid in running else (("cpu:1",) if done else ())
            trials.append(trial(tid, curve, devices=on, running=tid in running))
        snapshot = snap(trials, state=state, devices=TWO)
        plan = running_policy.plan(snapshot)
        fresh = FreezeThawPolicy().plan(snap(trials, state=json.loads(json.dumps(state)), devices=TWO))
        assert (plan.placement, plan.limits, plan.hold, plan.stop) == (
            fresh.placement,
            fresh.limits,
            fresh.hold,
            fresh.stop,
        ), f"round {_round}"
        state = dict(plan.state)
        running = set()
        for tid in plan.running():  # each placed trial runs to its limit (its next level) this round
            steps[tid] = min(MAX, plan.limits.get(tid, steps[tid] + 1))
        held = set(plan.hold)
        while sum(1 for t in steps if t not in held and steps[t] < MAX) < 3 and len(steps) < 199:
            steps[max(steps) + 1] = 0  # the controller makes a new configuration for the freed room
