"""Placement by device kind (Gavel; `quanta.executor.policy.placement.kinds`) on hand-built snapshots: the trial that
gains most from a fast kind gets it, a kind where a trial's rate is 0 is never chosen, and the share
layer counts device time in effective throughput. No training: snapshots and plans only."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from quanta.executor.policy import make_policy
from quanta.executor.policy.placement.board import Board
from quanta.executor.policy.placement.kind_rebalance import EVICT_MARGIN, MOVE_MARGIN, rebalance
from quanta.executor.policy.placement.kinds import Effective, effective_rates
from quanta.executor.policy.share import SharePolicy, allocation, shares_of
from quanta.executor.policy.types import ClusterSnapshot, DeviceView, TrialStatus, TrialView

R = TrialStatus.RUNNING
POLICIES = ["fifo", "timeslice", "tiresias", "gandiva", "asha"]


def mix(**kinds: int) -> tuple[DeviceView, ...]:
    """One node per kind (``n0``, ``n1``, ... in the order given), `n` devices each: ``mix(v100=1, k80=1)``."""
    return tuple(DeviceView(f"{k}/g{i}", f"n{j}", k) for j, (k, n) in enumerate(kinds.items()) for i in range(n))


def trial(tid: int, arrival: float = 0.0, **rates: float) -> TrialView:
    return TrialView(id=tid, arrival=arrival, kind_rates=tuple(sorted(rates.items())), max_steps=1000)


def snap(devices, trials, *, aware: bool = True, state=None) -> ClusterSnapshot:
    return ClusterSnapshot(
        now=0.0, devices=devices, trials=tuple(trials), policy_state=state or {}, quantum_s=60.0, kind_aware=aware
    )


def kind_of(plan, tid: int) -> str:
    (device,) = plan.devices_of(tid)
    return device.split("/")[0]


# ---- effective rates ---------------------------------------------------------------------------------


def test_effective_rate_is_the_rate_over_the_rate_on_the_average_device():
    counts = {"v100": 1, "k80": 1}
    a = effective_rates(trial(1, v100=4.0, k80=1.0), counts)
    assert a == pytest.approx({"v100": 1.6, "k80": 0.4})  # average device: (4 + 1) / 2 = 2.5
    # More k80s make the average device slower, so a v100 is worth more to the trial.
    assert effective_rates(trial(1, v100=4.0, k80=1.0), {"v100": 1, "k80": 3})["v100"] == pytest.approx(4 / 1.75)
    # A kind with no figure counts as the mean of the known positive rates: no preference for it.
    assert effective_rates(trial(2, v100=2.0), counts) == pytest.approx({"v100": 1.0, "k80": 1.0})
    assert effective_rates(trial(3), counts) == {"v100": 1.0, "k80": 1.0}
    # Rate 0: cannot run there; the other kind carries the whole average.
    assert effective_rates(trial(4, v100=3.0, k80=0.0), counts) == pytest.approx({"v100": 2.0, "k80": 0.0})
    # One kind: 1 whatever the rate (device-seconds as before).
    assert effective_rates(trial(5, v100=7.0), {"v100": 4}) == {"v100": 1.0}


# ---- the fast kind goes to the trial that gains most ---------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_the_trial_with_a_4x_speedup_gets_the_v100_before_one_with_1_5x(policy):
    # The 1.5x trial arrived first: kind-blind, it takes the first free device, the v100.
    devices = mix(v100=1, k80=1)
    trials = [trial(1, 0.0, v100=1.5, k80=1.0), trial(2, 1.0, v100=4.0, k80=1.0)]
    aware = make_policy(policy).plan(snap(devices, trials))
    assert kind_of(aware, 2) == "v100" and kind_of(aware, 1) == "k80"
    blind = make_policy(policy).plan(snap(devices, trials, aware=False))
    assert kind_of(blind, 1) == "v100" and kind_of(blind, 2) == "k80"


def test_one_kind_places_exactly_as_kind_blind():
    devices = tuple(DeviceView(f"n{n}/g{i}", f"n{n}", "v100") for n in range(3) for i in range(2))
    trials = [trial(i, float(i), v100=1.0 + i) for i in range(8)]
    for policy in POLICIES:
        a = make_policy(policy).plan(snap(devices, trials))
        b = make_policy(policy).plan(snap(devices, trials, aware=False))
        assert a.placement == b.placement, policy


def test_rebalance_exchanges_placed_trials_and_fills_free_fast_devices():
    devices = mix(v100=2, k80=2)
    # Placed badly: the big gainers on k80s, a small gainer on a v100, one v100 free.
    trials = [trial(1, v100=4.0, k80=1.0), trial(2, v100=3.0, k80=1.0), trial(3, v100=1.2, k80=1.0)]
    placement = {"v100/g0": (3,), "k80/g0": (1,), "k80/g1": (2,)}
    out, moved = rebalance(snap(devices, trials), placement)
    on = {ids[0]: d.split("/")[0] for d, ids in out.items()}
    assert on == {1: "v100", 2: "v100", 3: "k80"} and moved == 3
    assert sorted(i for ids in out.values() for i in ids) == [1, 2, 3]  # nobody lost, nobody doubled
    # Kind-blind: the placement as given.
    assert rebalance(snap(devices, trials, aware=False), placement) == (placement, 0)


def test_a_resident_trial_moves_only_for_a_gain_above_the_margin():
    devices = mix(v100=1, k80=1)
    # Running on the k80, v100 free: it gains (r_v - r_k) / average; below the margin it stays.
    small = 1.0 + MOVE_MARGIN / 2  # eff gain = (small - 1) / ((small + 1) / 2) < margin
    stay = replace(trial(1, v100=small, k80=1.0), status=R, running=True, devices=("k80/g0",))
    out, moved = rebalance(snap(devices, [stay]), {"k80/g0": (1,)})
    assert out == {"k80/g0": (1,)} and moved == 0
    go = replace(trial(1, v100=2.0, k80=1.0), status=R, running=True, devices=("k80/g0",))
    out, moved = rebalance(snap(devices, [go]), {"k80/g0": (1,)})
    assert out == {"v100/g0": (1,)} and moved == 1


def test_multi_device_trials_take_a_whole_node_of_the_kind_they_gain_most_on():
    # Node n0 holds two v100s, n1 two k80s; the 1.1x trial arrived first (kind-blind: it gets n0).
    devices = tuple(DeviceView(f"{k}/n{n}g{i}", f"n{n}", k) for n, k in enumerate(("v100", "k80")) for i in range(2))
    meh = replace(trial(1, 0.0, v100=1.1, k80=1.0), devices_needed=2)
    big = replace(trial(2, 1.0, v100=8.0, k80=1.0), devices_needed=2)
    for policy in POLICIES:
        aware = make_policy(policy).plan(snap(devices, [meh, big]))
        assert [d.split("/")[0] for d in aware.devices_of(2)] == ["v100", "v100"], policy
        assert [d.split("/")[0] for d in aware.devices_of(1)] == ["k80", "k80"], policy
        blind = make_policy(policy).plan(snap(devices, [meh, big], aware=False))
        assert [d.split("/")[0] for d in blind.devices_of(1)] == ["v100", "v100"], policy


def test_a_trial_larger_than_a_node_moves_onto_wholly_free_nodes_of_the_kind_it_gains_on():
    # Four 2-device nodes: n0, n1 k80; n2, n3 v100. A 4-device trial runs on both k80 nodes, 3x faster
    # on a v100, with both v100 nodes idle: it moves there (it spans two nodes on either kind).
    devices = tuple(
        DeviceView(f"{k}/n{n}g{i}", f"n{n}", k) for n, k in enumerate(("k80", "k80", "v100", "v100")) for i in range(2)
    )
    k80s = tuple(d.id for d in devices if d.kind == "k80")
    big = replace(trial(1, v100=3.0, k80=1.0), status=R, running=True, devices=k80s, devices_needed=4)
    out, moved = rebalance(snap(devices, [big]), dict.fromkeys(k80s, (1,)))
    assert moved == 1 and sorted(out) == sorted(d.id for d in devices if d.kind == "v100")
    # One v100 node busy with a one-device trial as fast on a k80: no two wholly free v100 nodes, but
    # the large trial gains more than evicting the small one costs, so they trade nodes (`_take_nodes`),
    # the small one keeping its position on the node it moves to.
    small = replace(trial(2, v100=1.0, k80=1.0), status=R, running=True, devices=("v100/n2g0",))
    placement = {**dict.fromkeys(k80s, (1,)), "v100/n2g0": (2,)}
    out, moved = rebalance(snap(devices, [big, small]), placement)
    assert moved == 2 and out == {**{d.id: (1,) for d in devices if d.kind == "v100"}, "k80/n1g0": (2,)}
    # The small one 3x faster on a v100 too: what the large one gains (4 devices) still beats what it
    # loses (1 device) plus the eviction margin.
    keen = replace(small, kind_rates=(("k80", 1.0), ("v100", 3.0)))
    out, moved = rebalance(snap(devices, [big, keen]), placement)
    assert moved == 2 and out["k80/n1g0"] == (2,)
    # A larger trial's gain alone is not enough when the nodes it would take are held by trials that cannot
    # run on its kind: nobody moves.
    stuck = replace(small, kind_rates=(("k80", 0.0), ("v100", 1.0)))
    out, moved = rebalance(snap(devices, [big, stuck]), placement)
    assert out == placement and moved == 0


def test_a_trial_spanning_fast_nodes_gives_them_up_to_smaller_trials_that_gain_more_there():
    # n0, n1: v100; n2..n5: k80; two devices each. A 4-device trial that gains little on a v100 holds
    # n0+n1; four 1-device trials that gain 4x there run on n2+n3; n4+n5 stand idle.
    kinds = ("v100", "v100", "k80", "k80", "k80", "k80")
    devices = tuple(DeviceView(f"{k}/n{n}g{i}", f"n{n}", k) for n, k in enumerate(kinds) for i in range(2))
    v100s = tuple(d.id for d in devices if d.kind == "v100")
    big = replace(trial(1, v100=1.2, k80=1.0), status=R, running=True, devices=v100s, devices_needed=4)
    small_on = ("k80/n2g0", "k80/n2g1", "k80/n3g0", "k80/n3g1")
    smalls = [
        replace(trial(2 + i, v100=4.0, k80=1.0), status=R, running=True, devices=(d,)) for i, d in enumerate(small_on)
    ]
    placement = {**dict.fromkeys(v100s, (1,)), **{d: (2 + i,) for i, d in enumerate(small_on)}}
    out, moved = rebalance(snap(devices, [big, *smalls]), placement)
    on = {ids[0]: d.split("/")[0] for d, ids in out.items()}
    assert moved == 5 and {i: on[i] for i in range(2, 6)} == dict.fromkeys(range(2, 6), "v100")
    assert sorted(d for d, ids in out.items() if ids == (1,)) == ["k80/n4g0", "k80/n4g1", "k80/n5g0", "k80/n5g1"]
    assert sorted(i for ids in out.values() for i in ids) == [1, 1, 1, 1, 2, 3, 4, 5]
    # The four gain less in sum than the large trial loses (per device): nobody moves.
    keen = replace(big, kind_rates=(("k80", 1.0), ("v100", 3.0)))
    meh = [replace(t, kind_rates=(("k80", 1.0), ("v100", 1.25))) for t in smalls]
    out, moved = rebalance(snap(devices, [keen, *meh]), placement)
    assert out == placement and moved == 0


def test_a_trial_holding_slow_nodes_takes_fast_nodes_whose_small_trials_lose_less_there():
    # n0, n1: v100; n2, n3: p100; two devices each. A 4-device trial 5x faster on a v100 holds both p100
    # nodes; the v100 nodes are full of one-device trials that run about as fast on a p100. No v100 slot
    # of 4 devices is free, so only taking whole nodes gets it there; the small ones keep their positions.
    kinds = ("v100", "v100", "p100", "p100")
    devices = tuple(DeviceView(f"{k}/n{n}g{i}", f"n{n}", k) for n, k in enumerate(kinds) for i in range(2))
    v100s = tuple(d.id for d in devices if d.kind == "v100")
    p100s = tuple(d.id for d in devices if d.kind == "p100")
    big = replace(trial(1, v100=5.0, p100=1.0), status=R, running=True, devices=p100s, devices_needed=4)

    def smalls(v100: float) -> list[TrialView]:
        return [
            replace(trial(2 + i, v100=v100, p100=1.0), status=R, running=True, devices=(d,))
            for i, d in enumerate(v100s)
        ]

    placement = {**dict.fromkeys(p100s, (1,)), **{d: (2 + i,) for i, d in enumerate(v100s)}}
    out, moved = rebalance(snap(devices, [big, *smalls(1.1)]), placement)
    assert moved == 5
    assert sorted(d for d, ids in out.items() if ids == (1,)) == sorted(v100s)
    assert {out[p100s[i]]: i for i in range(4)} == {(2 + i,): i for i in range(4)}  # same positions
    # Small trials that gain nearly as much on a v100 (per device) as the large one: nobody moves.
    out, moved = rebalance(snap(devices, [big, *smalls(4.0)]), placement)
    assert out == placement and moved == 0
    # A gain that beats their loss but not what evicting resident trials costs: nobody moves either.
    out, moved = rebalance(snap(devices, [big, *smalls(2.9)]), placement)
    e_big, e_small = (
        effective_rates(big, {"v100": 4, "p100": 4}),
        effective_rates(smalls(2.9)[0], {"v100": 4, "p100": 4}),
    )
    gain = e_big["v100"] - e_big["p100"] - MOVE_MARGIN
    assert e_small["v100"] - e_small["p100"] < gain < e_small["v100"] - e_small["p100"] + EVICT_MARGIN
    assert out == placement and moved == 0
    # Kind-blind: nothing is exchanged; nor without node taking (the share layer's pass across groups).
    out, moved = rebalance(snap(devices, [big, *smalls(1.1)], aware=False), placement)
    assert out == placement and moved == 0
    out, moved = rebalance(snap(devices, [big, *smalls(1.1)]), placement, take_nodes=False)
    assert out == placement and moved == 0


# ---- a kind where the rate is 0 is never chosen ----------------------------------------------------------


@pytest.mark.parametrize("aware", [True, False])
@pytest.mark.parametrize("policy", POLICIES)
def test_a_kind_where_the_rate_is_0_is_never_chosen(policy, aware):
    devices = mix(v100=1, k80=2)
    # Trial 1 holds the v100; trial 2 cannot run on a k80 and waits; trial 3 runs anywhere.
    busy = replace(trial(1, 0.0, v100=2.0, k80=1.0), status=R, running=True, devices=("v100/g0",))
    no_k80 = trial(2, 1.0, v100=5.0, k80=0.0)
    anywhere = trial(3, 2.0, v100=2.0, k80=1.0)
    plan = make_policy(policy).plan(snap(devices, [busy, no_k80, anywhere], aware=aware))
    assert all(not d.startswith("k80") for d in plan.devices_of(2))
    # Every policy but fifo uses the k80 for trial 3; fifo too: trial 2 blocks only the kinds it runs on.
    assert kind_of(plan, 3) == "k80"


@pytest.mark.parametrize("aware", [True, False])
def test_tiresias_gives_a_higher_queue_the_kind_it_needs_and_moves_the_lower_job(aware):
    # Trial 1 (a lower queue: past the first queue's limit) runs on the v100 and can run on the k80;
    # trial 2, new (top queue), cannot run on a k80. Both fit by count: trial 2 takes the v100 and
    # trial 1 moves to the k80, rather than trial 2 waiting behind a lower queue.
    devices = mix(v100=1, k80=1)
    low = replace(trial(1, 0.0, v100=2.0, k80=1.0), status=R, running=True, devices=("v100/g0",), device_seconds=5000.0)
    high = trial(2, 1.0, v100=5.0, k80=0.0)
    plan = make_policy("tiresias").plan(snap(devices, [low, high], aware=aware))
    assert kind_of(plan, 2) == "v100" and kind_of(plan, 1) == "k80"
    # When the higher job finds its kind free, nobody moves.
    both = mix(v100=2, k80=1)
    plan = make_policy("tiresias").plan(snap(both, [low, high], aware=aware))
    assert plan.devices_of(1) == ("v100/g0",) and plan.devices_of(2) == ("v100/g1",)


def test_board_choose_skips_a_zero_kind_and_returns_none_when_only_that_is_free():
    devices = mix(v100=1, k80=1)
    board = Board(snap(devices, []))
    board.put(99, ("v100/g0",))
    assert board.choose(trial(1, v100=3.0, k80=0.0)) is None
    assert board.choose(trial(2, v100=3.0, k80=1.0)) == ("k80/g0",)
    assert Effective(snap(devices, [])).usable(trial(1, v100=3.0, k80=0.0), "k80") is False


# ---- the share layer counts effective throughput -------------------------------------------------------


def test_allocation_counts_effective_throughput_when_weighed():
    placement = {"v100/g0": (1,), "k80/g0": (2,), "k80/g1": (3, 4)}
    user = {1: "ann", 2: "bob", 3: "ann", 4: "bob"}
    assert allocation(placement, user) == {"ann": 1.5, "bob": 1.5}  # device counts, a shared device halved
    w = {1: 1.6, 2: 0.8, 3: 0.5, 4: 1.0}
    assert allocation(placement, user, lambda d, i: w[i]) == pytest.approx({"ann": 1.6 + 0.25, "bob": 0.8 + 0.5})


def test_shares_are_counted_in_normalised_throughput_on_a_mix():
    devices = mix(v100=1, k80=1)
    ann = replace(trial(1, 0.0, v100=4.0, k80=1.0), owner="ann")  # eff 1.6 on the v100, 0.4 on the k80
    bob = replace(trial(2, 1.0, v100=1.0, k80=1.0), owner="bob")  # eff 1 on either
    policy = SharePolicy(make_policy("fifo"))
    plan = policy.plan(snap(devices, [ann, bob]))
    assert kind_of(plan, 1) == "v100" and kind_of(plan, 2) == "k80"
    held = shares_of(plan.state)
    assert held["ann"]["devices"] == pytest.approx(1.6) and held["bob"]["devices"] == pytest.approx(1.0)
    # One device each, but ann's counts 1.6 average devices: a round later she is the one ahead.
    later = policy.plan(replace(snap(devices, [ann, bob]), now=60.0, policy_state=plan.state))
    acc = shares_of(later.state)
    assert acc["ann"]["used"] > acc["bob"]["used"]
    assert acc["ann"]["fair"] == pytest.approx(acc["bob"]["fair"])
    # On one kind the same plan counts device-seconds.
    same = mix(v100=2)
    plan1 = SharePolicy(make_policy("fifo")).plan(snap(same, [ann, bob]))
    assert {u: a["devices"] for u, a in shares_of(plan1.state).items()} == {"ann": 1.0, "bob": 1.0}


def test_the_share_layer_moves_a_group_s_trial_to_the_kind_it_gains_most_on():
    # Two users, one device each. ann's 1.2x trial runs on the v100 (running trials keep their devices,
    # so her group is given it); only the rebalancing across groups gives bob's 4x trial the v100.
    devices = (DeviceView("v100/g0", "n0", "v100"), DeviceView("k80/g0", "n1", "k80"))
    ann = replace(trial(1, 0.0, v100=1.2, k80=1.0), owner="ann", status=R, running=True, devices=("v100/g0",))
    bob = replace(trial(2, 1.0, v100=4.0, k80=1.0), owner="bob")
    aware = SharePolicy(make_policy("fifo")).plan(snap(devices, [ann, bob]))
    assert kind_of(aware, 2) == "v100" and kind_of(aware, 1) == "k80"
    assert any("exchanged between device kinds" in n for n in aware.notes)
    blind = SharePolicy(make_policy("fifo")).plan(snap(devices, [ann, bob], aware=False))
    assert kind_of(blind, 1) == "v100" and kind_of(blind, 2) == "k80"


def test_the_share_layer_gives_a_group_devices_of_a_kind_its_trials_run_on():
    # bob's trial cannot run on a k80. With one device each, ann's group (first by name, and either
    # kind will do for her) would take the v100 on the first node and leave bob's trial waiting
    # beside an idle k80; the group with fewer usable kinds chooses first.
    devices = (DeviceView("v100/g0", "n0", "v100"), DeviceView("k80/g0", "n1", "k80"))
    ann = replace(trial(1, 0.0, v100=1.0, k80=1.0), owner="ann")
    bob = replace(trial(2, 1.0, v100=3.0, k80=0.0), owner="bob")
    for aware in (True, False):
        plan = SharePolicy(make_policy("fifo")).plan(snap(devices, [ann, bob], aware=aware))
        assert kind_of(plan, 2) == "v100" and kind_of(plan, 1) == "k80", aware


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("policy", ["fifo", "tiresias", "timeslice"])
def test_shared_plans_on_a_mix_never_put_two_trials_on_a_device_nor_a_trial_where_it_cannot_run(policy, seed):
    """Users whose trials need 1-4 devices, some unable to run on a k80, round after round: every
    device holds at most one trial, every placed trial has the devices it needs, none of a kind where
    its rate is 0."""
    rng = random.Random(seed)
    devices = tuple(
        DeviceView(f"{k}/n{n}g{i}", f"n{n}", k) for n, k in enumerate(("v100", "k80", "v100", "k80")) for i in range(4)
    )
    kind_of_dev = {d.id: d.kind for d in devices}
    trials: dict[int, TrialView] = {}
    for tid in range(rng.randint(6, 18)):
        rates = {"v100": rng.uniform(1.0, 6.0), "k80": rng.choice([0.0, 1.0, rng.uniform(0.5, 2.0)])}
        trials[tid] = replace(
            trial(tid, float(tid), **rates), owner=f"u{rng.randint(0, 3)}", devices_needed=rng.choice([1, 1, 2, 4])
        )
    sp = SharePolicy(make_policy(policy))
    state: dict = {}
    for rnd in range(6):
        snapshot = replace(snap(devices, trials.values(), state=state), now=60.0 * rnd)
        plan = sp.plan(snapshot)
        assert all(len(ids) == 1 for ids in plan.placement.values()), plan.placement
        for tid in plan.running():
            on = plan.devices_of(tid)
            assert len(on) == trials[tid].devices_needed
            assert all(trials[tid].rate_on(kind_of_dev[d]) != 0.0 for d in on)
        state = plan.state
        trials = {
            tid: replace(t, devices=plan.devices_of(tid) or t.devices, running=bool(plan.devices_of(tid)), status=R)
            if plan.devices_of(tid) or t.devices
            else t
            for tid, t in trials.items()
        }
