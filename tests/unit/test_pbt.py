"""Population-based training as a pure policy, on hand-built snapshots (no training, no processes)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from quanta.executor.policy import make_policy, policy_names
from quanta.executor.policy.knobs import PbtKnobs
from quanta.executor.policy.pbt import PbtPolicy, explore
from quanta.executor.policy.types import ClusterSnapshot, DeviceView, MutableDim, SearchView, TrialStatus, TrialView
from quanta.spec import SpecError, parse_spec

K = 100  # interval_steps
MAX = 1000
LR = MutableDim("lr", "loguniform", (1e-4, 1e-1))
MOM = MutableDim("momentum", "uniform", (0.5, 0.99))
SEARCH = SearchView(id=1, goal="maximize", max_steps=MAX, mutable=(LR, MOM))
DEVICES = (DeviceView("cpu:0"), DeviceView("cpu:1"))


def trial(tid: int, steps: int = 0, acc: float | None = None, *, lr: float = 0.01, devices=(), running=False):
    return TrialView(
        id=tid,
        search_id=1,
        status=TrialStatus.RUNNING if devices else TrialStatus.QUEUED,
        devices=tuple(devices),
        running=running,
        arrival=float(tid),
        steps_done=steps,
        max_steps=MAX,
        curve=((steps, acc),) if acc is not None else (),
        values=(("lr", lr), ("momentum", 0.9)),
    )


def snap(trials, state=None, search=SEARCH) -> ClusterSnapshot:
    return ClusterSnapshot(now=0.0, devices=DEVICES, trials=tuple(trials), searches=(search,), policy_state=state or {})


def policy(**knobs) -> PbtPolicy:
    return PbtPolicy(PbtKnobs(interval_steps=K, **knobs))


def population_at_interval(n: int = 8, **kw):
    """n trials parked at step K, trial i with accuracy i / 10 (trial n the best)."""
    return [trial(i, K, i / 10, lr=0.001 * i, devices=(f"cpu:{i % 2}",), **kw) for i in range(1, n + 1)]


def test_registered_with_its_knobs_and_defaults():
    assert "pbt" in policy_names()
    p = make_policy("pbt")
    assert isinstance(p, PbtPolicy)
    k = p.knobs
    assert (k.population, k.quantile, k.perturb, k.resample_p) == (8, 0.25, (0.8, 1.2), 0.25)
    assert k.interval(2000) == 200 and k.interval(0) == 1000 and PbtKnobs(interval_steps=7).interval(2000) == 7


def test_the_bottom_quantile_exploits_the_top_with_explored_values():
    plan = policy(resample_p=0.0).plan(snap(population_at_interval()))
    # 8 members at interval 1, quantile 0.25: trials 1 and 2 exploit trials 7 or 8.
    assert set(plan.exploits) == {1, 2}
    for a, values in plan.exploits.values():
        assert a in (7, 8)
        source_lr = 0.001 * a
        assert values["lr"] in (pytest.approx(source_lr * 0.8), pytest.approx(source_lr * 1.2))
        assert values["momentum"] in (pytest.approx(0.9 * 0.8), pytest.approx(min(0.99, 0.9 * 1.2)))
    # An exploiting trial is not placed; the others are, and park at the next interval.
    assert not {1, 2} & plan.running()
    assert plan.running() and all(plan.limits[t] == 2 * K for t in plan.running())
    assert {int(t) for t in plan.state["judged"]} == set(range(1, 9))


def test_deterministic_per_seed_and_different_across_seeds():
    pop = population_at_interval()
    a = policy(seed=1).plan(snap(pop))
    b = policy(seed=1).plan(snap(pop))
    assert a.exploits == b.exploits
    draws = set()
    for seed in range(8):
        plan = policy(seed=seed).plan(snap(pop))
        draws.add(tuple(sorted((b, a, tuple(sorted(v.items()))) for b, (a, v) in plan.exploits.items())))
    assert len(draws) > 1


def test_explored_values_stay_inside_the_space():
    knobs = PbtKnobs(perturb=(0.1, 10.0), resample_p=0.3)
    rng = random.Random(0)
    ints = MutableDim("layers", "randint", (1, 6))
    for _ in range(500):
        out = explore((LR, MOM, ints), {"lr": 0.09, "momentum": 0.98, "layers": 5.0}, knobs, rng)
        assert 1e-4 <= out["lr"] <= 1e-1
        assert 0.5 <= out["momentum"] <= 0.99
        assert out["layers"] in {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}


def test_nothing_is_exploited_before_an_interval():
    trials = [trial(i, K - 1, i / 10, devices=(f"cpu:{i % 2}",), running=i <= 2) for i in range(1, 9)]
    plan = policy().plan(snap(trials))
    assert not plan.exploits
    assert all(plan.limits[t] == K for t in plan.running())


def test_a_trial_is_judged_once_per_interval_and_ranked_among_every_member_s_last_value():
    p = policy(resample_p=0.0)
    # Three members reached interval 1 (0.1, 0.2, 0.3); five others are at step 50 with 0.9. Ranked among
    # all eight last values, 1 and 2 are the bottom quarter and exploit members of the top quarter.
    population = [*population_at_interval(3), *[trial(i, 50, 0.9) for i in range(4, 9)]]
    first = p.plan(snap(population))
    assert set(first.exploits) == {1, 2}
    assert all(source in range(4, 9) for source, _ in first.exploits.values())
    # 3 is not in the bottom quarter: it goes on without an exploit. Judged already: the same snapshot
    # again orders nothing more.
    assert not p.plan(snap(population, first.state)).exploits
    # Among the members that reached the interval alone, nobody would have exploited (floor(3 * 0.25) = 0).
    assert first.state["scores"]["1:1"] == {"1": 0.1, "2": 0.2, "3": 0.3}


def test_the_population_is_time_sliced_beyond_the_devices():
    trials = [trial(i) for i in range(1, 9)]  # eight queued members, two devices
    plan = policy().plan(snap(trials))
    assert len(plan.running()) == 2 and not plan.exploits and not plan.stop


def test_minimize_ranks_low_values_best():
    search = SearchView(id=1, goal="minimize", max_steps=MAX, mutable=(LR,))
    plan = policy().plan(snap(population_at_interval(), search=search))
    assert set(plan.exploits) == {7, 8} and all(a in (1, 2) for a, _ in plan.exploits.values())


def _spec(scheduler: dict, mutable: bool = True) -> dict:
    lr = {"loguniform": [0.0001, 0.1], **({"mutable": True} if mutable else {})}
    return {
        "name": "p",
        "trainable": "x:y",
        "space": {"lr": lr},
        "metric": {"name": "acc", "goal": "maximize"},
        "scheduler": scheduler,
    }


def test_spec_knobs_are_validated_naming_the_field():
    assert parse_spec(_spec({"policy": "pbt", "population": 4})).scheduler.population == 4
    for bad, field in (
        ({"quantile": 0.9}, "scheduler.quantile"),
        ({"population": 1}, "scheduler.population"),
        ({"perturb": [0.8, -1]}, "scheduler.perturb"),
        ({"resample_p": 2}, "scheduler.resample_p"),
        ({"interval_steps": 0}, "scheduler.interval_steps"),
    ):
        with pytest.raises(SpecError, match=field):
            parse_spec(_spec({"policy": "pbt", **bad}))
    with pytest.raises(SpecError, match="mutable"):
        parse_spec(_spec({"policy": "pbt"}, mutable=False))


def test_a_member_that_exploited_is_judged_next_at_an_interval_it_reaches_by_its_own_training():
    """Trial 1 exploits at interval 1 and takes a source's state at step 250 (the middle of interval 2,
    which the source has been judged at): it is not judged at interval 2 (it would exploit again before
    running a step under its new values), but at interval 3, once it trained there."""
    p = policy(resample_p=0.0)
    pop = population_at_interval(4)
    first = p.plan(snap(pop))
    assert 1 in first.exploits
    source, values = first.exploits[1]
    assert first.state["exploiting"]["1"][0] == K
    # Under way: trial 1 still at its own step and values; nothing new for it.
    assert 1 not in p.plan(snap(pop, first.state)).exploits
    # Done: trial 1 at the source's step 250 with the source's curve and the explored values; trial 2
    # (the other bottom one) too, and the two tops parked at interval 2 with better values than both.
    copied = [(K, 0.35), (250, 0.36)]

    def member(tid: int, steps: int, curve, lr: float) -> TrialView:
        return replace(trial(tid, steps, None, lr=lr, devices=(f"cpu:{tid % 2}",)), curve=tuple(curve))

    after = [
        member(1, 250, copied, values["lr"]),
        member(2, K, [(K, 0.2)], 0.002),
        member(3, 2 * K, [(K, 0.3), (2 * K, 0.5)], 0.003),
        member(4, 2 * K, [(K, 0.4), (2 * K, 0.6)], 0.004),
    ]
    second = p.plan(snap(after, first.state))
    assert 1 not in second.exploits  # interval 2 is where its copied step lies: not judged there
    assert second.state["judged"]["1"] == 2 and "1" not in second.state["exploiting"]
    # Trained on to interval 3 with the worst value: judged there, and exploits.
    later = [member(1, 3 * K, [*copied, (3 * K, 0.1)], values["lr"]), *after[1:]]
    assert 1 in p.plan(snap(later, second.state)).exploits


def test_an_abandoned_exploit_leaves_the_member_judged_as_before():
    p = policy(resample_p=0.0)
    pop = population_at_interval(4)
    first = p.plan(snap(pop))
    assert 1 in first.exploits
    # Abandoned: trial 1 ran on from its own state (values unchanged) to interval 2, still the worst.
    ran = [replace(pop[0], steps_done=2 * K, curve=((K, 0.1), (2 * K, 0.05))), *pop[1:]]
    second = p.plan(snap(ran, first.state))
    assert 1 in second.exploits and "1" in second.state["exploiting"]


def test_the_top_quantile_at_an_interval_is_published_and_no_one_else():
    # Four members: the two best reached the interval, the two others are still short of it.
    trials = [
        trial(1, K - 10, 0.1, devices=("cpu:0",)),
        trial(2, K - 20, 0.2, devices=("cpu:1",)),
        trial(3, K, 0.8, devices=("cpu:0",)),
        trial(4, K, 0.9, devices=("cpu:1",)),
    ]
    plan = policy(quantile=0.5).plan(snap(trials))
    assert not plan.exploits and set(plan.publish) == {3, 4}  # both top
    # The bottom two reach it: they exploit, and are not published; the top is judged there already.
    later = [replace(t, steps_done=K, curve=((K, t.curve[0][1]),)) for t in trials]
    again = policy(quantile=0.5).plan(snap(later, plan.state))
    assert set(again.exploits) == {1, 2} and again.publish == ()
    assert policy(quantile=0.25).plan(snap(trials)).publish == (4,)
    # Without mutable parameters nothing can be exploited: nothing is published.
    assert policy(quantile=0.5).plan(snap(trials, search=replace(SEARCH, mutable=()))).publish == ()
