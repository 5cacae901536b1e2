"""The tiresias policy (2D-LAS, discretised MLFQ) on hand-built snapshots."""

from __future__ import annotations

import pytest

from quanta.executor.policy import make_policy, policy_names
from quanta.executor.policy.knobs import TiresiasKnobs
from quanta.executor.policy.tiresias import TiresiasPolicy
from quanta.executor.policy.types import ClusterSnapshot, DeviceView, TrialStatus, TrialView

R = TrialStatus.RUNNING


def snap(trials, n_dev=2, state=None, now=0.0, per_node=2):
    devices = tuple(DeviceView(f"n{i // per_node}/d{i % per_node}", f"n{i // per_node}") for i in range(n_dev))
    return ClusterSnapshot(now=now, devices=devices, trials=tuple(trials), policy_state=state or {})


def running(tid, dev, service, arrival=0.0, k=1):
    devs = dev if isinstance(dev, tuple) else (dev,)
    return TrialView(
        id=tid, arrival=arrival, status=R, devices=devs, running=True, device_seconds=service, devices_needed=k
    )


def test_registered_with_tiresias_defaults():
    assert "tiresias" in policy_names()
    p = make_policy("tiresias")
    assert p.queue_limits == (3250.0, 7200.0) and p.starvation_factor == 8.0
    assert make_policy("tiresias", queue_limits=[100, 200], starvation_factor=0).queue_limits == (100.0, 200.0)
    with pytest.raises(ValueError):
        TiresiasPolicy(TiresiasKnobs(queue_limits=(10, 5)))


def test_new_job_preempts_one_that_attained_more_service():
    old = running(1, "n0/d0", service=4000.0)  # past 3,250 GPU-s: demoted to queue 1 this round
    young = running(2, "n0/d1", service=10.0, arrival=1)
    new = TrialView(id=3, arrival=5)
    plan = TiresiasPolicy().plan(snap([old, young, new], now=100))
    assert plan.running() == {2, 3}
    assert plan.placement["n0/d1"] == (2,)  # the job that keeps running is not moved
    assert plan.placement["n0/d0"] == (3,)  # the newcomer takes the preempted job's device
    assert plan.state["jobs"]["1"][0] == 1


def test_fifo_within_a_queue():
    trials = [TrialView(id=i, arrival=float(10 - i)) for i in range(1, 5)]  # 4 arrived first
    plan = TiresiasPolicy().plan(snap(trials))
    assert plan.running() == {4, 3}


def test_demotion_is_one_level_per_round_and_remembered():
    p = TiresiasPolicy()
    t = running(1, "n0/d0", service=8000.0)
    s1 = p.plan(snap([t], now=10))
    assert s1.state["jobs"]["1"][0] == 1
    s2 = p.plan(snap([t], state=s1.state, now=20))
    assert s2.state["jobs"]["1"][0] == 2
    s3 = p.plan(snap([t], state=s2.state, now=30))
    assert s3.state["jobs"]["1"][0] == 2  # the last queue


def test_multi_device_job_waits_while_smaller_ones_backfill():
    big = TrialView(id=1, arrival=0, devices_needed=2)
    small = running(2, "n0/d0", service=0.0, arrival=1)
    other = TrialView(id=3, arrival=2)
    plan = TiresiasPolicy().plan(snap([big, small, other], n_dev=2))
    # big (oldest, queue 0) is chosen first and needs both devices: the running small job is preempted
    assert plan.running() == {1}
    assert sorted(plan.devices_of(1)) == ["n0/d0", "n0/d1"]


def test_starved_job_is_promoted_to_the_top_queue():
    p = TiresiasPolicy(TiresiasKnobs(starvation_factor=2.0))
    hog = running(1, "n0/d0", service=5000.0, arrival=0)
    waiting = TrialView(id=2, arrival=1, device_seconds=4000.0)
    # Round at t=0: job 2 was running (state says so) and is now parked: its run lasted 100 s.
    state = {"jobs": {"1": [1, 0.0, 0.0, True], "2": [1, -100.0, 0.0, True]}}
    s1 = p.plan(snap([hog, waiting], n_dev=1, state=state, now=0.0))
    assert s1.state["jobs"]["2"][2] == pytest.approx(100.0)  # last run time
    assert s1.running() == {1}  # same queue: FIFO keeps the older job
    s2 = p.plan(snap([hog, waiting], n_dev=1, state=s1.state, now=150.0))
    assert s2.running() == {1}  # waited 150 s < 2 x 100 s
    s3 = p.plan(snap([hog, waiting], n_dev=1, state=s2.state, now=201.0))
    assert s3.state["jobs"]["2"][0] == 0 and s3.running() == {2}
    assert any("promoted 2" in n for n in s3.notes)


def test_no_starvation_promotion_when_disabled():
    p = TiresiasPolicy(TiresiasKnobs(starvation_factor=0))
    state = {"jobs": {"2": [1, 0.0, 10.0, False]}}
    waiting = TrialView(id=2, arrival=1, device_seconds=4000.0)
    plan = p.plan(snap([waiting], n_dev=0, state=state, now=1e6))
    assert plan.state["jobs"]["2"][0] == 1


def test_quiet_until_the_next_queue_limit_when_nobody_waits():
    p = TiresiasPolicy()
    one = running(1, "n0/d0", service=3000.0)  # queue 0: reaches 3,250 GPU-s in 250 s
    two = running(2, ("n0/d1", "n1/d0"), service=1000.0, arrival=1, k=2)  # two devices: 2,250 GPU-s in 1,125 s
    plan = p.plan(snap([one, two], n_dev=4, now=100))
    assert plan.quiet_until == pytest.approx(350.0)
    last = running(1, "n0/d0", service=9000.0)  # in the last queue after this round: nothing left to cross
    s1 = p.plan(snap([last], state={"jobs": {"1": [2, 0.0, 0.0, True]}}, now=100))
    assert s1.quiet_until == float("inf")
    # Someone waits (the rotation may change), or the plan moves or starts someone: no promise.
    assert p.plan(snap([one, two, TrialView(id=3, arrival=2)], n_dev=3, now=100)).quiet_until is None
    assert p.plan(snap([one, TrialView(id=3, arrival=2)], n_dev=4, now=100)).quiet_until is None
