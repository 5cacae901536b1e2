"""fifo and timeslice policies, and reconcile, on hand-built snapshots (no processes)."""

from __future__ import annotations

from collections import Counter

from quanta.executor.actions import Migrate, Run, Stop, Suspend
from quanta.executor.policy import make_policy, policy_names
from quanta.executor.policy.types import ClusterSnapshot, DeviceView, Placement, Plan, TrialStatus, TrialView
from quanta.executor.reconcile import reconcile

Q = TrialStatus.QUEUED
R = TrialStatus.RUNNING


def devs(n, node="local"):
    return tuple(DeviceView(f"cpu:{i}", node) for i in range(n))


def snap(trials, n_dev=2, state=None, now=0.0):
    return ClusterSnapshot(now=now, devices=devs(n_dev), trials=tuple(trials), policy_state=state or {})


def test_registry_knows_builtin_policies():
    assert {"fifo", "timeslice"} <= set(policy_names())


def test_every_policy_of_the_knob_union_is_built_the_same_way_from_its_knobs():
    """The names come from the knob models alone (`KNOBS`, read off the `PolicyKnobs` union); every one
    has a class that plans it, built as `cls(knobs)` (and `cls()` with the defaults), which keeps the
    knobs it was given."""
    from typing import get_args

    from quanta.executor.policy import policy_for, registry
    from quanta.executor.policy.knobs import KNOBS, PolicyKnobs

    assert policy_names() == sorted(KNOBS) == sorted(registry())
    assert sorted(KNOBS.values(), key=lambda m: m.__name__) == sorted(get_args(PolicyKnobs), key=lambda m: m.__name__)
    for name, model in KNOBS.items():
        cls = registry()[name]
        knobs = model(quantum_s=7.0)
        policy = cls(knobs)
        assert policy.knobs is knobs and policy.name == name
        assert policy_for(knobs).knobs == knobs and type(policy_for(knobs)) is cls
        assert cls().knobs == cls.Knobs()
    assert registry()["hyperband"] is registry()["asha"]  # HyperbandKnobs extends AshaKnobs


def test_fifo_runs_oldest_exclusively_and_never_preempts():
    trials = [
        TrialView(id=1, arrival=0, status=R, devices=("cpu:1",), running=True),
        TrialView(id=2, arrival=1),
        TrialView(id=3, arrival=2),
    ]
    plan = make_policy("fifo").plan(snap(trials))
    assert plan.placement == {"cpu:1": (1,), "cpu:0": (2,)}
    assert plan.stop == ()


def test_fifo_head_of_line_blocks():
    trials = [
        TrialView(id=1, arrival=0, status=R, devices=("cpu:0",), running=True),
        TrialView(id=2, arrival=1, devices_needed=2),
        TrialView(id=3, arrival=2),
    ]
    plan = make_policy("fifo").plan(snap(trials))
    assert plan.running() == {1}  # trial 3 fits but may not overtake trial 2


def simulate_rounds(policy, trials, n_dev, rounds, quantum=1.0, state=None):
    """Drive a policy round after round, crediting device time to the trials it placed."""
    state = state or {}
    ran = Counter()
    current = {t.id: t for t in trials}
    for r in range(rounds):
        plan = policy.plan(snap(current.values(), n_dev, state, now=r * quantum))
        state = plan.state
        placed = plan.running()
        for tid, t in list(current.items()):
            on = plan.devices_of(tid)
            current[tid] = TrialView(
                id=tid,
                arrival=t.arrival,
                status=R if on or t.devices else t.status,
                devices=on or t.devices,
                running=tid in placed,
                device_seconds=t.device_seconds + (quantum * len(on) if tid in placed else 0.0),
            )
            if tid in placed:
                ran[tid] += 1
    simulate_rounds.state = state
    return ran, current


def test_timeslice_round_robin_gives_equal_shares():
    trials = [TrialView(id=i, arrival=i) for i in range(1, 5)]
    ran, _ = simulate_rounds(make_policy("timeslice"), trials, n_dev=1, rounds=40)
    assert set(ran.values()) == {10}


def test_timeslice_fills_every_device():
    trials = [TrialView(id=i, arrival=i) for i in range(1, 6)]
    plan = make_policy("timeslice").plan(snap(trials, n_dev=2))
    assert len(plan.running()) == 2 and all(len(v) == 1 for v in plan.placement.values())


def test_timeslice_newcomer_joins_rotation_without_monopolising():
    trials = [TrialView(id=i, arrival=i) for i in range(1, 3)]
    policy = make_policy("timeslice")
    ran, current = simulate_rounds(policy, trials, n_dev=1, rounds=20)
    late = TrialView(id=9, arrival=100)
    ran2, _ = simulate_rounds(policy, [*current.values(), late], n_dev=1, rounds=30, state=simulate_rounds.state)
    # the newcomer gets its fair third, not the 20 quanta the others already had
    assert 8 <= ran2[9] <= 12


def test_timeslice_weights_shape_shares():
    class Weighted(type(make_policy("timeslice"))):
        def weight(self, trial, snapshot):
            return 3.0 if trial.id == 1 else 1.0

    trials = [TrialView(id=1, arrival=0), TrialView(id=2, arrival=1)]
    ran, _ = simulate_rounds(Weighted(), trials, n_dev=1, rounds=40)
    assert ran[1] == 30 and ran[2] == 10


def test_policies_are_deterministic():
    trials = [TrialView(id=i, arrival=i % 3, device_seconds=float(i % 2)) for i in range(1, 8)]
    for name in ("fifo", "timeslice"):
        assert make_policy(name).plan(snap(trials, 3)) == make_policy(name).plan(snap(trials, 3))


def test_reconcile_diff():
    current = Placement(resident={1: ("cpu:0",), 2: ("cpu:1",), 3: ("cpu:0",)}, running=frozenset({1, 2}))
    plan = Plan(placement={"cpu:0": (3,), "cpu:1": (4,), "cpu:2": (2,)}, stop=(5,))
    actions = reconcile(current, plan)
    assert actions == [Stop(5, "policy"), Suspend(1), Migrate(2, ("cpu:2",)), Run(3, ("cpu:0",)), Run(4, ("cpu:1",))]


def test_reconcile_no_change_no_actions():
    current = Placement(resident={1: ("cpu:0",)}, running=frozenset({1}))
    assert reconcile(current, Plan(placement={"cpu:0": (1,)})) == []


def test_reconcile_parked_trial_resumes_in_place_or_migrates():
    current = Placement(resident={1: ("cpu:0",)}, running=frozenset())
    assert reconcile(current, Plan(placement={"cpu:0": (1,)})) == [Run(1, ("cpu:0",))]
    assert reconcile(current, Plan(placement={"cpu:1": (1,)})) == [Migrate(1, ("cpu:1",))]


def test_reconcile_packed_device():
    current = Placement(resident={1: ("cpu:0",)}, running=frozenset({1}))
    assert reconcile(current, Plan(placement={"cpu:0": (1, 2)})) == [Run(2, ("cpu:0",))]


def test_timeslice_ignores_millisecond_noise_in_device_time():
    # Both ran one 2 s quantum; the running one measured 4 ms more (a real park's latency). It stays:
    # switching on noise would cost a park and a resume for nothing.
    trials = [
        TrialView(id=1, arrival=0, status=R, devices=("cpu:0",), running=True, device_seconds=2.004),
        TrialView(id=2, arrival=1, status=R, devices=("cpu:0",), running=False, device_seconds=2.0),
    ]
    state = {"offsets": {"1": 0.0, "2": 0.0}}
    s = ClusterSnapshot(now=10.0, devices=devs(1), trials=tuple(trials), policy_state=state, quantum_s=2.0)
    assert make_policy("timeslice").plan(s).running() == {1}
    # A whole quantum behind is not noise: the parked trial takes its turn.
    trials[1] = TrialView(id=2, arrival=1, status=R, devices=("cpu:0",), running=False, device_seconds=0.0)
    s = ClusterSnapshot(now=10.0, devices=devs(1), trials=tuple(trials), policy_state=state, quantum_s=2.0)
    assert make_policy("timeslice").plan(s).running() == {2}
