"""The gandiva policy on hand-built snapshots (no processes, no training).

Curves are synthetic, c - 0.5 * (step/10)**-0.5, observed every 10 steps: the asymptote c decides
whether the trial reaches the target 0.85 by step 1000 (c = 0.95: surely, 0.9: about even, 0.7: no).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from functools import cache

import pytest

from quanta.executor.actions import Migrate, Suspend
from quanta.executor.policy import make_policy, policy_for, policy_names
from quanta.executor.policy.gandiva import EXCLUSIVE, GUARD, GandivaPolicy
from quanta.executor.policy.knobs import GandivaKnobs
from quanta.executor.policy.types import (
    ClusterSnapshot,
    DeviceView,
    Placement,
    Plan,
    SearchView,
    TrialStatus,
    TrialView,
)
from quanta.executor.reconcile import reconcile
from quanta.search import feedback
from quanta.search.judge import judge
from quanta.spec import parse_spec

MAX = 1000
TARGET = 0.85
Q = TrialStatus.QUEUED
R = TrialStatus.RUNNING
SEARCH = SearchView(1, "maximize", TARGET, MAX)


@cache
def curve(c: float, steps: int) -> tuple[tuple[int, float], ...]:
    return tuple((s, c - 0.5 * (s / 10) ** -0.5) for s in range(10, steps + 1, 10))


@cache
def promise(c: float, steps: int) -> float:
    return feedback.priority(feedback.predict(curve(c, steps), MAX, TARGET, "maximize"))


def tv(tid: int, c: float | None = None, steps: int = 200, **kw) -> TrialView:
    """A trial of search 1; `c` = asymptote of its curve (None: no reports)."""
    kw.setdefault("arrival", float(tid))
    kw.setdefault("status", R if kw.get("devices") else Q)
    kw.setdefault("rate_solo", 10.0)
    return TrialView(
        id=tid,
        search_id=1,
        steps_done=steps,
        max_steps=MAX,
        curve=curve(c, steps) if c is not None else (),
        **kw,
    )


def devs(n: int, nodes: int = 1, memory_mb: float = 0.0) -> tuple[DeviceView, ...]:
    per = max(1, n // nodes)
    if nodes == 1:
        return tuple(DeviceView(f"cpu:{i}", "local", memory_mb=memory_mb) for i in range(n))
    return tuple(DeviceView(f"n{i // per}/cpu:{i % per}", f"n{i // per}", memory_mb=memory_mb) for i in range(n))


def snap(trials, n_dev=2, state=None, now=0.0, pairs=None, devices=None, quantum=1.0, searches=(SEARCH,)):
    return ClusterSnapshot(
        now=now,
        devices=devices if devices is not None else devs(n_dev),
        trials=tuple(trials),
        searches=tuple(searches),
        pair_rates=pairs or {},
        policy_state=state or {},
        quantum_s=quantum,
    )


JUDGE = "_judge"  # where these tests carry the judge's state: beside the policy's, in Plan.state


class Judged:
    """`GandivaPolicy` behind the judge, in the controller's order: each `plan` first judges the
    snapshot (`quanta.search.judge`) and hands the verdicts to the policy. The judge's state rides in
    `Plan.state[JUDGE]` so that these tests carry (and fork) both states as one."""

    name = "gandiva"

    def __init__(self, **knobs):
        # `sticky`, `gang` and `gang_patience` are the experimental block's (`GandivaExperimental`).
        research = {k: knobs.pop(k) for k in ("sticky", "gang", "gang_patience") if k in knobs}
        self.policy = GandivaPolicy(GandivaKnobs(**knobs, experimental=research or None))
        self.judge_knobs = self.policy.judge_knobs

    def min_steps_for(self, trial, search):
        return self.policy.min_steps_for(trial, search)

    def plan(self, s: ClusterSnapshot) -> Plan:
        state = dict(s.policy_state)
        judged = judge(s, self.judge_knobs, state.pop(JUDGE, None))
        plan = self.policy.plan(replace(s, policy_state=state, verdicts=judged.verdicts))
        return replace(plan, state={**plan.state, JUDGE: judged.state})


def advance(trials: dict[int, TrialView], plan: Plan, quantum: float = 1.0) -> dict[int, TrialView]:
    """The runtime obeying a plan for one quantum: placed trials run there and accrue device time,
    the rest of the resident ones park where they are, stopped ones end."""
    out = {}
    for tid, t in trials.items():
        if tid in plan.stop:
            continue
        on = plan.devices_of(tid)
        if on:
            spent = t.device_seconds + quantum * len(on)
            t = TrialView(**{**t.__dict__, "devices": on, "running": True, "status": R, "device_seconds": spent})
        elif t.running:
            t = TrialView(**{**t.__dict__, "running": False})
        out[tid] = t
    return out


def drive(policy, trials, rounds, n_dev=2, quantum=1.0, devices=None, state=None):
    """Plan round after round; returns (trials, state, plans, device time per trial)."""
    cur = {t.id: t for t in trials}
    state = state or {}
    plans = []
    for r in range(rounds):
        plan = policy.plan(snap(cur.values(), n_dev, state, now=r * quantum, quantum=quantum, devices=devices))
        plans.append(plan)
        state = plan.state
        cur = advance(cur, plan, quantum)
    return cur, state, plans


# ---- registry ---------------------------------------------------------------------------------------


def test_registered_and_built_from_spec_knobs():
    assert "gandiva" in policy_names()
    spec = parse_spec(
        {
            "name": "s",
            "trainable": "a.b:c",
            "space": {"lr": {"uniform": [0, 1]}},
            "metric": {"name": "acc"},
            "scheduler": {"policy": "gandiva", "top_m": 3},
        }
    )
    policy = policy_for(spec.scheduler)
    assert isinstance(policy, GandivaPolicy)
    assert policy.name == "gandiva" and policy.top_m == 3
    assert make_policy("gandiva", top_m=3).knobs == spec.scheduler
    with pytest.raises(ValueError, match="unknown_knob"):
        make_policy("gandiva", unknown_knob=1)


# ---- top-M exclusive ------------------------------------------------------------------------------------


def test_top_m_run_exclusively_and_keep_their_devices():
    # Six judged trials on four devices; default M = 2. Packing on: exclusive trials are never packed.
    asym = {1: 0.88, 2: 0.95, 3: 0.9, 4: 1.0, 5: 0.89, 6: 0.91}
    trials = [tv(i, c, rate_solo=1.0 + i) for i, c in asym.items()]
    policy = Judged(kill_threshold=0.0)
    cur, state, plans = drive(policy, trials, rounds=8, n_dev=4)
    best = sorted(asym, key=lambda i: -promise(asym[i], 200))[:2]
    assert sorted(plans[0].state["exclusive"]) == sorted(best)
    where = {}
    for plan in plans:
        for tid in best:
            on = plan.devices_of(tid)
            assert len(on) == 1 and plan.placement[on[0]] == (tid,)  # alone on its device
            where.setdefault(tid, on)
            assert on == where[tid]  # never moved, never parked
    # The other four rotate on the two remaining devices: each ran at some point.
    others = set(asym) - set(best)
    ran = set().union(*(p.running() for p in plans))
    assert others <= ran


def test_top_m_knob_and_one_device_keeps_a_rotation():
    trials = [tv(1, 0.95), tv(2, 0.9), tv(3, 0.92)]
    plan = Judged(top_m=2).plan(snap(trials, n_dev=4))
    assert len(plan.state["exclusive"]) == 2
    # On one device nothing is exclusive while others wait: everyone still gets device time.
    _, _, plans = drive(Judged(kill_threshold=0.0), trials, rounds=12, n_dev=1)
    assert all(p.state["exclusive"] == [] for p in plans)
    assert set().union(*(p.running() for p in plans)) == {1, 2, 3}


# ---- weights -------------------------------------------------------------------------------------------


def test_higher_promise_gets_more_device_time():
    trials = [tv(1, 0.88), tv(2, 0.9), tv(3, 0.95), tv(4, 0.905)]
    ps = {t.id: promise(c, 200) for t, c in zip(trials, (0.88, 0.9, 0.95, 0.905), strict=True)}
    assert len(set(ps.values())) == 4
    cur, state, _ = drive(Judged(kill_threshold=0.0, packing=False), trials, rounds=120, n_dev=1)
    time = {tid: t.device_seconds for tid, t in cur.items()}
    order_by_promise = sorted(ps, key=ps.get)
    order_by_time = sorted(time, key=time.get)
    assert order_by_time == order_by_promise, (ps, time)
    # Shares follow the weights 1 + 4 p: the surest trial gets several times the least promising one.
    assert time[3] > 3 * time[1]


def test_weight_rise_late_does_not_hand_over_the_device_for_long():
    # Trial 1 ran a long time at a low weight; when its promise rises it must not monopolise the device
    # to "catch up" (passes are incremental: past time keeps the weight it was spent at).
    low, high = tv(1, 0.88), tv(2, 0.9)
    policy = Judged(kill_threshold=0.0, packing=False)
    cur, state, _ = drive(policy, [low, high], rounds=40, n_dev=1)
    t1 = cur[1]
    cur[1] = TrialView(**{**t1.__dict__, "curve": curve(0.95, 200)})  # new reports: now very promising
    # Force a fresh prediction by pretending the cached one is old.
    state = json.loads(json.dumps(state))
    del state[JUDGE]["1"]
    cur2, _, plans = drive(policy, cur.values(), rounds=10, n_dev=1, state=state)
    ran2 = [p.devices_of(2) != () for p in plans]
    assert any(ran2), "trial 2 must keep getting turns right after trial 1's weight rises"


# ---- kill threshold --------------------------------------------------------------------------------------


def test_kill_below_threshold_gives_the_device_back():
    trials = [
        tv(1, 0.7, devices=("cpu:0",), running=True),  # P(reach) ~ 0.001: killed
        tv(2, 0.95, devices=("cpu:1",), running=True),
        tv(3, 0.92),  # waiting: takes the freed device
    ]
    plan = Judged(kill_threshold=0.05).plan(snap(trials))
    assert plan.stop == (1,)
    assert plan.running() == {2, 3}
    assert any("kill trial 1" in n for n in plan.notes)
    # The verdict that killed it travels with the stop (stored with the trial, shown to users).
    assert set(plan.reasons) == {1} and plan.reasons[1].startswith("P(reach target) 0.0")
    assert "< kill threshold 0.05" in plan.reasons[1]
    # Below the threshold but not judged yet (fewer than min_steps steps): never killed.
    young = [tv(1, 0.7, steps=60, devices=("cpu:0",), running=True), tv(2, 0.95)]
    assert Judged(min_steps_before_judgement=100).plan(snap(young)).stop == ()
    # Threshold 0 kills nobody; no target, nobody.
    assert Judged(kill_threshold=0.0).plan(snap(trials)).stop == ()
    no_target = SearchView(1, "maximize", None, MAX)
    assert Judged(kill_threshold=0.4).plan(snap(trials, searches=(no_target,))).stop == ()


def test_predictions_are_cached_and_refreshed_every_feedback_steps():
    policy = Judged(feedback_every_steps=50, kill_threshold=0.0)
    t = tv(1, 0.95, steps=200)
    p1 = policy.plan(snap([t]))
    cached = p1.state[JUDGE]["1"]
    assert cached["at"] == 200 and 0.9 < cached["p"] <= 1
    # 40 more steps: below feedback_every, the cached prediction stands (even if the curve changed).
    t2 = tv(1, 0.7, steps=240)
    assert policy.plan(snap([t2], state=p1.state)).state[JUDGE]["1"] == cached
    # 50 more: recomputed.
    t3 = tv(1, 0.7, steps=250)
    p3 = policy.plan(snap([t3], state=p1.state))
    assert p3.state[JUDGE]["1"]["at"] == 250 and p3.state[JUDGE]["1"]["p"] < 0.05


# ---- starvation guard ---------------------------------------------------------------------------------


def test_new_trials_get_their_first_steps_promptly():
    # 2 devices: trial 1 exclusive, trial 2 shared and running. Newcomers 3 and 4 arrive.
    trials = [
        tv(1, 0.95, devices=("cpu:0",), running=True),
        tv(2, 0.9, devices=("cpu:1",), running=True),
        tv(3, None, steps=0, arrival=10.0),
        tv(4, None, steps=0, arrival=11.0),
    ]
    policy = Judged(min_steps_before_judgement=100, packing=False)
    plan = policy.plan(snap(trials))
    assert plan.placement == {"cpu:0": (1,), "cpu:1": (3,)}  # the oldest newcomer first
    assert plan.state["trials"]["3"]["tier"] == GUARD
    # Next round trial 3 (now running, 40 steps, still unjudged) keeps the device: one newcomer at a
    # time reaches its first judgement soonest.
    cur = advance({t.id: t for t in trials}, plan)
    cur[3] = TrialView(**{**cur[3].__dict__, "steps_done": 40, "curve": curve(0.9, 40)})
    plan2 = policy.plan(snap(cur.values(), state=plan.state, now=1.0))
    assert plan2.devices_of(3) == ("cpu:1",) and plan2.devices_of(4) == ()
    # Once judged it joins the weighted rotation and trial 4 gets its turn.
    cur = advance(cur, plan2)
    cur[3] = TrialView(**{**cur[3].__dict__, "steps_done": 120, "curve": curve(0.9, 120)})
    plan3 = policy.plan(snap(cur.values(), state=plan2.state, now=2.0))
    assert plan3.devices_of(4) == ("cpu:1",)
    assert plan3.state["trials"]["3"]["tier"] != GUARD


def test_unjudgeable_trial_does_not_hold_the_guard_forever():
    # Reports nothing: after 2 x min_steps it is time-shared like any other trial.
    trials = [tv(1, None, steps=250, devices=("cpu:0",), running=True), tv(2, 0.9, arrival=-1.0)]
    plan = Judged(min_steps_before_judgement=100, packing=False).plan(snap(trials, n_dev=1))
    assert plan.state["trials"]["1"]["tier"] == "shared"


# ---- never suspend a higher-priority trial for a lower one -----------------------------------------


def _check_invariants(policy: Judged, s: ClusterSnapshot, plan: Plan) -> None:
    by_id = {t.id: t for t in s.trials}
    alive = {t.id for t in s.alive()}
    rank = plan.state["rank"]
    pos = {tid: i for i, tid in enumerate(rank)}
    placed = plan.running()
    devices = {d.id for d in s.devices}
    stop = set(plan.stop)
    assert placed <= alive - stop
    assert set(rank) == alive - stop
    # Devices: valid, each trial on at least its need, at most a pair per device.
    for d, ids in plan.placement.items():
        assert d in devices and 1 <= len(ids) <= 2 and len(set(ids)) == len(ids)
        if len(ids) == 2:
            assert all(by_id[i].devices_needed == 1 for i in ids)
            assert not set(ids) & set(plan.state["exclusive"])
    for tid in placed:
        assert len(plan.devices_of(tid)) >= by_id[tid].devices_needed
    # Kills: judged trials predicted below the threshold.
    for tid in stop:
        t = by_id[tid]
        assert t.steps_done >= policy.min_steps_for(t, SEARCH)
        assert plan.state.get("trials", {}).get(str(tid)) is None
    # Exclusive trials: alone, first in rank, a prefix of the judged trials by promise (independent
    # predictions; an incumbent may be ahead by the swap margin).
    excl = plan.state["exclusive"]
    assert rank[: len(excl)] == excl
    for e in excl:
        for d in plan.devices_of(e):
            assert plan.placement[d] == (e,)
    judged_out = [
        tid
        for tid in alive - stop - set(excl)
        if by_id[tid].steps_done >= policy.min_steps_for(by_id[tid], SEARCH) and len(by_id[tid].curve) >= 3
    ]
    # Promises as the policy saw them: the judge's cached prediction (refreshed every
    # feedback_every_steps), not one from the trial's latest curve.
    cache = plan.state.get(JUDGE, {})

    def seen(tid: int) -> float:
        entry = cache.get(str(tid))
        return float(entry["p"]) if entry and entry.get("p") is not None else promise_of(by_id[tid])

    for e in excl:
        pe = seen(e)
        for u in judged_out:
            assert seen(u) <= pe + policy.policy.knobs.swap_margin + 1e-4
    # The invariant: a trial that was running and is parked now (not stopped) was displaced by trials
    # ranked above it: they fill the devices it could have used (lower-ranked trials only use devices
    # it could not have used) or, time-sliced on its own devices (`sticky`), one of them runs there
    # or lives there (a trial resident on the same device, consolidated elsewhere this round).
    sticky = policy.policy.knobs.research.sticky
    for t in s.trials:
        if t.id in alive and t.running and t.id not in placed and t.id not in stop:
            higher = {d for d, ids in plan.placement.items() if any(pos[i] < pos[t.id] for i in ids)}
            rivals = [
                i
                for i in placed
                if pos[i] < pos[t.id] and (set(by_id[i].devices) | set(plan.devices_of(i))) & set(t.devices)
            ]
            displaced = len(devices) - len(higher) < t.devices_needed or (sticky and bool(rivals))
            assert displaced, (t.id, plan.placement, rank)
    # An incumbent exclusive trial that stays exclusive keeps running where it ran.
    before = set(s.policy_state.get("exclusive", []))
    for e in set(excl) & before:
        t = by_id[e]
        if t.running and len(t.devices) == t.devices_needed:
            assert plan.devices_of(e) == t.devices
    # Starvation guard: a waiting one-device newcomer means no shared trial holds a device.
    tiers = {int(k): v["tier"] for k, v in plan.state["trials"].items()}
    if any(tiers[i] == GUARD and i not in placed and by_id[i].devices_needed == 1 for i in tiers):
        assert all(tiers[i] in (EXCLUSIVE, GUARD) for i in placed)


def promise_of(t: TrialView) -> float:
    steps = max(s for s, _ in t.curve)
    c = _ASYM[t.id]
    return promise(c, steps)


_ASYM: dict[int, float] = {}


def test_never_suspends_a_higher_priority_trial_for_a_lower_one():
    rng = random.Random(20181008)
    checked = 0
    for _seq in range(30):
        n_dev = rng.choice([1, 2, 3, 4])
        nodes = 2 if n_dev == 4 and rng.random() < 0.5 else 1
        devices = devs(n_dev, nodes, memory_mb=rng.choice([0.0, 4000.0]))
        policy = Judged(
            top_m=rng.choice([None, 0, 1, 2]),
            kill_threshold=rng.choice([0.0, 0.05]),
            min_steps_before_judgement=60,
            feedback_every_steps=100,
            rung_eta=None,  # promise_of below is the curve's alone (rung caps: tests/unit/test_judge.py)
            packing=rng.random() < 0.7,
            grow_shrink=rng.random() < 0.5,
            idle_grow_s=0.0,
        )
        cur: dict[int, TrialView] = {}
        next_id = 100 * _seq

        def new_trial(arrival: float, n_dev: int = n_dev) -> TrialView:
            nonlocal next_id
            next_id += 1
            c = rng.choice([0.7, 0.88, 0.9, 0.91, 0.93, 0.95, 1.0])
            _ASYM[next_id] = c
            steps = rng.choice([0, 30, 80, 200])
            return tv(
                next_id,
                c if steps >= 10 else None,
                steps=steps,
                arrival=arrival,
                devices_needed=2 if n_dev >= 2 and rng.random() < 0.15 else 1,
                rate_solo=rng.choice([None, 5.0, 10.0, 20.0]),
                memory_mb=rng.choice([None, 500.0, 2500.0]),
                elastic=rng.random() < 0.3,
            )

        for _ in range(rng.randint(1, 7)):
            t = new_trial(0.0)
            cur[t.id] = t
        state: dict = {}
        for r in range(12):
            pairs = {}
            for ids in _placement_of(cur).values():
                if len(ids) == 2 and rng.random() < 0.8:
                    a, b = sorted(ids)
                    pairs[(a, b)] = (rng.uniform(2, 12), rng.uniform(2, 12))
            s = snap(cur.values(), state=state, now=float(r), pairs=pairs, devices=devices)
            plan = policy.plan(s)
            _check_invariants(policy, s, plan)
            checked += 1
            state = json.loads(json.dumps(plan.state))
            cur = advance(cur, plan)
            for tid, t in list(cur.items()):  # running trials make progress and report
                if t.running:
                    steps = t.steps_done + 10
                    cur[tid] = TrialView(**{**t.__dict__, "steps_done": steps, "curve": curve(_ASYM[tid], steps)})
            if cur and rng.random() < 0.15:  # a trial completes
                cur.pop(rng.choice(sorted(cur)))
            if rng.random() < 0.3:  # a new configuration arrives
                t = new_trial(float(r))
                cur[t.id] = t
    assert checked == 30 * 12


@pytest.mark.parametrize(("sticky", "gang"), [(True, False), (False, False), (True, True)])
def test_the_invariants_hold_with_and_without_sticky_placement(sticky, gang):
    """A shorter run of the randomised check above with the knobs set each way (gang: on 3 nodes of 2,
    with jobs of 1, 2 and 4 devices)."""
    rng = random.Random(7 + sticky + 2 * gang)
    policy = Judged(
        sticky=sticky, gang=gang, min_steps_before_judgement=60, rung_eta=None, packing=True, idle_grow_s=0.0
    )
    devices = devs(6, 3) if gang else devs(4, 2)
    cur: dict[int, TrialView] = {}
    state: dict = {}
    for r in range(40):
        if rng.random() < 0.4 or not cur:
            tid = 9000 + 100 * sticky + 200 * gang + r
            _ASYM[tid] = rng.choice([0.7, 0.9, 0.95])
            need = (rng.choice([2, 2, 4]) if gang else 2) if rng.random() < 0.2 + 0.2 * gang else 1
            cur[tid] = tv(tid, None, steps=0, arrival=float(r), devices_needed=need)
        s = snap(cur.values(), state=state, now=float(r), devices=devices)
        plan = policy.plan(s)
        _check_invariants(policy, s, plan)
        state = json.loads(json.dumps(plan.state))
        cur = advance(cur, plan)
        for tid, t in list(cur.items()):
            if t.running:
                steps = t.steps_done + 20
                cur[tid] = TrialView(**{**t.__dict__, "steps_done": steps, "curve": curve(_ASYM[tid], steps)})
        if rng.random() < 0.1:
            cur.pop(rng.choice(sorted(cur)))


def _placement_of(trials: dict[int, TrialView]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t in trials.values():
        if t.running:
            for d in t.devices:
                out.setdefault(d, []).append(t.id)
    return out


# ---- packing -------------------------------------------------------------------------------------------


def _pack_start(margin=0.05, memory_mb=0.0, mem=(500.0, 500.0)):
    """One device, two judged shared trials: 1 runs, 2 waits -> 2 is packed beside 1 on trial."""
    trials = [
        tv(1, 0.95, devices=("cpu:0",), running=True, rate_solo=10.0, memory_mb=mem[0]),
        tv(2, 0.95, devices=("cpu:0",), running=False, rate_solo=8.0, memory_mb=mem[1]),
    ]
    policy = Judged(pack_margin=margin, top_m=0)
    plan = policy.plan(snap(trials, devices=devs(1, memory_mb=memory_mb)))
    return policy, trials, plan


def test_no_pack_onto_a_device_of_a_kind_the_joiner_cannot_run_on():
    host = tv(1, 0.95, devices=("cpu:0",), running=True, rate_solo=10.0, memory_mb=500.0)
    joiner = tv(2, 0.95, rate_solo=8.0, memory_mb=500.0, kind_rates=(("cpu", 0.0),))  # does not fit on cpu
    policy = Judged(pack_margin=0.05, top_m=0)
    plan = policy.plan(snap([host, joiner], devices=devs(1)))
    assert plan.placement == {"cpu:0": (1,)} and not any("pack" in n for n in plan.notes)
    # Without the zero rate the same two trials pack.
    plan = policy.plan(snap([host, replace(joiner, kind_rates=())], devices=devs(1)))
    assert plan.placement == {"cpu:0": (1, 2)}


def _packed_round(policy, trials, plan, pairs, now=1.0):
    cur = advance({t.id: t for t in trials}, plan)
    return cur, policy.plan(snap(cur.values(), n_dev=1, state=plan.state, now=now, pairs=pairs))


def test_pack_kept_when_measured_gain_exceeds_margin():
    policy, trials, plan = _pack_start()
    assert plan.placement == {"cpu:0": (1, 2)}
    assert any("pack 1+2 on trial" in n for n in plan.notes)
    # No packed sample yet: the pack stays on trial.
    cur, p2 = _packed_round(policy, trials, plan, pairs={})
    assert p2.placement == {"cpu:0": (1, 2)} and p2.state["packs"][0]["status"] == "trial"
    # A fresh sample after a quantum: 7/10 + 6/8 = 1.45 > 1.05: kept.
    cur = advance(cur, p2)
    p3 = policy.plan(snap(cur.values(), n_dev=1, state=p2.state, now=2.0, pairs={(1, 2): (7.0, 6.0)}))
    assert p3.placement == {"cpu:0": (1, 2)}
    assert p3.state["packs"][0]["status"] == "kept"
    assert any("pack 1+2 kept" in n and "1.45" in n for n in p3.notes)
    # Kept packs stay while the gain holds...
    cur = advance(cur, p3)
    p4 = policy.plan(snap(cur.values(), n_dev=1, state=p3.state, now=3.0, pairs={(1, 2): (7.5, 6.0)}))
    assert p4.placement == {"cpu:0": (1, 2)}
    # ... and are undone when a fresh sample shows it gone.
    cur = advance(cur, p4)
    p5 = policy.plan(snap(cur.values(), n_dev=1, state=p4.state, now=4.0, pairs={(1, 2): (5.0, 4.0)}))
    assert len(p5.placement["cpu:0"]) == 1
    assert [1, 2] in p5.state["bad_pairs"]
    assert any("gain dropped" in n for n in p5.notes)


def test_pack_undone_when_gain_below_margin_and_never_retried():
    policy, trials, plan = _pack_start(margin=0.1)
    cur = advance({t.id: t for t in trials}, plan)
    # 5.2/10 + 4.6/8 = 1.095 <= 1.1: undone, pair remembered as bad.
    p2 = policy.plan(snap(cur.values(), n_dev=1, state=plan.state, now=1.0, pairs={(1, 2): (5.2, 4.6)}))
    assert len(p2.placement["cpu:0"]) == 1
    assert p2.state["packs"] == [] and p2.state["bad_pairs"] == [[1, 2]]
    assert any("pack 1+2 undone" in n and "1.09" in n for n in p2.notes)
    # Still over-subscribed for many rounds: the pair is never tried again.
    cur, state, plans = drive(policy, advance(cur, p2).values(), rounds=10, n_dev=1, state=p2.state)
    assert all(len(ids) == 1 for p in plans for ids in p.placement.values())
    assert all(p.state["bad_pairs"] == [[1, 2]] for p in plans)


def test_pack_measured_only_after_a_full_quantum_together():
    policy, trials, plan = _pack_start()
    cur = advance({t.id: t for t in trials}, plan)
    # A tick only 0.3 quantum later (a trial elsewhere ended): no verdict yet, even with a sample.
    p2 = policy.plan(snap(cur.values(), n_dev=1, state=plan.state, now=0.3, pairs={(1, 2): (4.0, 4.0)}))
    assert p2.state["packs"][0]["status"] == "trial" and p2.placement == {"cpu:0": (1, 2)}


def test_pack_needs_memory_to_fit():
    _, _, plan = _pack_start(memory_mb=1000.0, mem=(600.0, 600.0))
    assert all(len(ids) == 1 for ids in plan.placement.values())
    _, _, plan = _pack_start(memory_mb=1000.0, mem=(400.0, 500.0))
    assert plan.placement == {"cpu:0": (1, 2)}
    _, _, plan = _pack_start(memory_mb=0.0, mem=(4000.0, 5000.0))  # device memory unknown: allowed
    assert plan.placement == {"cpu:0": (1, 2)}


def test_no_packing_when_disabled_or_not_oversubscribed():
    trials = [tv(1, 0.95, devices=("cpu:0",), running=True), tv(2, 0.95)]
    assert Judged(packing=False, top_m=0).plan(snap(trials, n_dev=1)).state["packs"] == []
    plan = Judged(top_m=0).plan(snap(trials, n_dev=2))
    assert plan.state["packs"] == [] and plan.running() == {1, 2}


# ---- migration and defragmentation ------------------------------------------------------------------


def test_highest_priority_parked_trial_moves_onto_a_freed_device():
    # Trial 9 (exclusive on cpu:0) just completed. Trial 3 (most promising) is parked on cpu:1 where
    # trial 2 runs: it moves onto cpu:0; trial 2 is not disturbed.
    trials = [
        tv(2, 0.9, devices=("cpu:1",), running=True),
        tv(3, 0.95, devices=("cpu:1",), running=False),
        tv(4, 0.91, devices=("cpu:1",), running=False),
    ]
    state = {"exclusive": [9]}
    plan = Judged(packing=False).plan(snap(trials, state=state))
    assert plan.devices_of(3) == ("cpu:0",) and plan.devices_of(2) == ("cpu:1",)
    current = Placement(resident={t.id: t.devices for t in trials}, running=frozenset({2}))
    actions = reconcile(current, plan)
    assert Migrate(3, ("cpu:0",)) in actions
    assert not any(isinstance(a, Suspend) for a in actions)


def test_multi_device_trial_consolidates_onto_one_node_when_a_trial_departs():
    devices = devs(4, nodes=2)  # n0/cpu:0, n0/cpu:1, n1/cpu:0, n1/cpu:1
    trials = [
        tv(1, 0.95, devices=("n0/cpu:0", "n1/cpu:0"), running=True, devices_needed=2),
        tv(2, 0.9, devices=("n1/cpu:1",), running=True),
    ]  # the trial that ran on n0/cpu:1 has left
    plan = Judged().plan(snap(trials, devices=devices))
    assert plan.devices_of(1) == ("n0/cpu:0", "n0/cpu:1")
    assert plan.devices_of(2) == ("n1/cpu:1",)
    assert any("consolidates onto node n0" in n for n in plan.notes)
    # Stays spread (no pointless move) while no node can hold it.
    trials.append(tv(3, 0.9, devices=("n0/cpu:1",), running=True))
    plan = Judged().plan(snap(trials, devices=devices))
    assert plan.devices_of(1) == ("n0/cpu:0", "n1/cpu:0")
    assert plan.devices_of(2) == ("n1/cpu:1",) and plan.devices_of(3) == ("n0/cpu:1",)


def test_new_multi_device_trial_takes_one_node():
    devices = devs(4, nodes=2)
    trials = [tv(1, 0.95, devices=("n0/cpu:0",), running=True), tv(2, None, steps=0, devices_needed=2)]
    plan = Judged().plan(snap(trials, devices=devices))
    assert plan.devices_of(2) == ("n1/cpu:0", "n1/cpu:1")


# ---- sticky placement: time-sliced trials stay on their own devices ------------------------------------------


def _moves(policy, trials, rounds, devices, quantum=1.0):
    """Drive `rounds` rounds; (moves per trial, device time per trial, plans). A move is a placed trial
    that was resident on other devices (a `Migrate`)."""
    cur = {t.id: t for t in trials}
    state: dict = {}
    moves: dict[int, int] = dict.fromkeys(cur, 0)
    plans = []
    for r in range(rounds):
        plan = policy.plan(snap(cur.values(), state=state, now=r * quantum, quantum=quantum, devices=devices))
        plans.append(plan)
        for tid, t in cur.items():
            on = plan.devices_of(tid)
            if on and t.devices and set(on) != set(t.devices):
                moves[tid] += 1
        state = json.loads(json.dumps(plan.state))
        cur = advance(cur, plan, quantum)
    return moves, {tid: t.device_seconds for tid, t in cur.items()}, plans


def _jobs(homes: dict[int, str | None]) -> list[TrialView]:
    """Trace jobs past their guard phase, each resident (parked) on its device; the first of each
    device running."""
    out, seen = [], set()
    for tid, d in homes.items():
        running = d is not None and d not in seen
        seen.add(d)
        out.append(
            TrialView(
                id=tid, search_id=0, arrival=float(tid), steps_done=500, max_steps=10**6, status=R,
                devices=(d,) if d else (), running=running,
            )
        )  # fmt: skip
    return out


def test_sticky_trials_time_slice_on_their_own_devices_without_moving():
    """Three jobs on cpu:0, two on cpu:1: each device rotates its own jobs, nobody moves (loads 3 and
    2 differ by one: a move would not give the mover more device time). Without `sticky` the
    cluster-wide rotation moves jobs every few rounds."""
    devices = devs(2)
    jobs = _jobs({1: "cpu:0", 2: "cpu:0", 3: "cpu:0", 4: "cpu:1", 5: "cpu:1"})
    moves, time, _ = _moves(Judged(packing=False, sticky=True), jobs, 30, devices)
    assert sum(moves.values()) == 0, moves
    assert all(time[i] == pytest.approx(10.0, abs=1.0) for i in (1, 2, 3)), time  # a third of cpu:0 each
    assert all(time[i] == pytest.approx(15.0, abs=1.0) for i in (4, 5)), time
    moves, _, _ = _moves(Judged(packing=False, sticky=False), jobs, 30, devices)
    assert sum(moves.values()) >= 10, moves


def test_sticky_moves_once_to_balance_a_freed_device_then_stays():
    """Four jobs on cpu:0, none on cpu:1 (its job just ended): one move makes the loads 3 and 1, a second
    2 and 2; then nobody moves again, and the device time evens out."""
    jobs = _jobs({1: "cpu:0", 2: "cpu:0", 3: "cpu:0", 4: "cpu:0"})
    moves, time, plans = _moves(Judged(packing=False, sticky=True), jobs, 40, devs(2))
    assert sum(moves.values()) == 2, moves
    assert all(plans[0].devices_of(i) or plans[1].devices_of(i) for i in jobs_ids(jobs))  # all ran early
    assert all(time[i] == pytest.approx(20.0, abs=2.0) for i in time), time


def test_sticky_a_trial_sharing_a_device_with_an_exclusive_one_moves_to_get_turns():
    """Trial 1 turns exclusive on cpu:0, where trial 2 is parked too: 2 would never get a turn there,
    so it moves (once) to cpu:1 and time-slices with 3 and 4; 1 never leaves cpu:0."""
    trials = [
        tv(1, 0.95, devices=("cpu:0",), running=True),
        tv(2, 0.9, devices=("cpu:0",), running=False),
        tv(3, 0.9, devices=("cpu:1",), running=True),
        tv(4, 0.905, devices=("cpu:1",), running=False),
    ]
    moves, time, plans = _moves(Judged(packing=False, kill_threshold=0.0, sticky=True), trials, 12, devs(2))
    assert all(p.devices_of(1) == ("cpu:0",) for p in plans)
    assert moves == {1: 0, 2: 1, 3: 0, 4: 0} and all(time[i] >= 3.0 for i in (2, 3, 4)), (moves, time)


def jobs_ids(jobs: list[TrialView]) -> list[int]:
    return [t.id for t in jobs]


def test_sticky_new_jobs_start_on_the_least_loaded_device():
    """New jobs (no home) take the free devices with the shortest queues first, so queues stay balanced:
    of cpu:1 (three jobs live there) and cpu:2 (one), the older newcomer gets cpu:2."""
    jobs = _jobs({1: "cpu:0", 2: "cpu:1", 3: "cpu:1", 4: "cpu:1", 5: "cpu:2"})
    jobs = [replace(t, running=False) for t in jobs]  # all parked at the round's start
    new = [TrialView(id=i, search_id=0, arrival=100.0 + i, steps_done=0, max_steps=10**6) for i in (9, 10)]
    plan = Judged(packing=False, sticky=True).plan(snap([*jobs, *new], devices=devs(3), searches=()))
    assert plan.devices_of(9) == ("cpu:2",) and plan.devices_of(10) == ("cpu:1",)
    assert plan.devices_of(1) == ("cpu:0",)  # the rest resume at home or wait: nobody moves
    assert plan.running() == {1, 9, 10}


# ---- gang time-slicing (sticky + gang): multi-server jobs on aligned blocks of servers -----------------------


def _big(tid: int, devices: tuple[str, ...], running: bool, need: int = 8) -> TrialView:
    """A trace job past its guard phase needing `need` devices, resident on `devices` (may be none)."""
    return TrialView(
        id=tid, search_id=0, arrival=float(tid), steps_done=500, max_steps=10**6, status=R if devices else Q,
        devices=devices, running=running, devices_needed=need,
    )  # fmt: skip


def _block(devices, *nodes: int) -> tuple[str, ...]:
    return tuple(d.id for d in devices if d.node in {f"n{i}" for i in nodes})


def test_gang_new_multi_server_job_takes_a_whole_aligned_block():
    """Four servers of four devices; a one-GPU job lives on n1. A new 8-GPU job takes the least loaded
    aligned pair of servers (n2, n3) whole. Sticky alone takes the 8 least loaded free devices wherever
    they are: three servers, straddling two pairs."""
    devices = devs(16, 4)
    one = replace(_jobs({1: "n1/cpu:0"})[0], devices_needed=1)
    new = TrialView(id=9, search_id=0, arrival=50.0, steps_done=0, max_steps=10**6, devices_needed=8)
    plan = Judged(packing=False, sticky=True, gang=True).plan(snap([one, new], devices=devices, searches=()))
    assert plan.devices_of(9) == tuple(sorted(_block(devices, 2, 3)))
    assert plan.devices_of(1) == ("n1/cpu:0",)
    plan = Judged(packing=False, sticky=True).plan(snap([one, new], devices=devices, searches=()))
    assert len({d.split("/")[0] for d in plan.devices_of(9)}) == 3


def test_gang_multi_server_jobs_move_once_onto_whole_blocks_and_their_occupants_leave_together():
    """Three 8-GPU jobs share the pair (n0, n1); one-GPU jobs 4 and 5 are parked on n2 and n4. With
    `gang`, jobs 2 and 3 each move once, onto the whole pairs (n2, n3) and (n4, n5): jobs 4 and 5,
    resident there and ranked lower, wait that round (they leave with their block's other occupants)
    and then take turns on their own devices. Nobody moves again (every pair carries one 8-GPU job).
    Sticky alone scatters job 2 over the 8 least loaded free devices, on three servers."""
    devices = devs(24, 6)
    b01 = _block(devices, 0, 1)
    trials = [
        _big(1, b01, True),
        _big(2, b01, False),
        _big(3, b01, False),
        replace(_jobs({4: "n2/cpu:0"})[0], running=False),
        replace(_jobs({5: "n4/cpu:0"})[0], running=False),
    ]
    gang = Judged(packing=False, sticky=True, gang=True, gang_patience=None)  # the block rule alone
    moves, time, plans = _moves(gang, trials, 24, devices)
    assert moves == {1: 0, 2: 1, 3: 1, 4: 0, 5: 0}, moves
    assert plans[0].devices_of(2) == tuple(sorted(_block(devices, 2, 3)))
    assert plans[0].devices_of(3) == tuple(sorted(_block(devices, 4, 5)))
    assert not plans[0].devices_of(4) and not plans[0].devices_of(5)
    assert all(time[i] > 0 for i in time), time  # everyone gets turns
    plan = Judged(packing=False, sticky=True).plan(snap(trials, devices=devices, searches=()))
    assert len({d.split("/")[0] for d in plan.devices_of(2)}) == 3


def test_gang_patience_lets_a_waiting_gang_run_on_devices_left_idle():
    """Two 8-GPU jobs take turns on the pair (n0, n1); 4-GPU jobs run alone on n2 and n4, so n3 and n5 (8
    devices) stand idle, and no pair is free or lighter by two. Without `gang_patience` the two alternate
    on their pair, half the time each, for as long as they live. With patience 0 the job that waits
    takes the 8 idle devices at once (one move, nobody displaced), and both run every round from then
    on, each at home. A patience longer than any wait (two alternating jobs never wait two rounds in a
    row) leaves them alternating."""
    devices = devs(24, 6)
    b01 = _block(devices, 0, 1)
    trials = [
        _big(1, b01, True),
        _big(2, b01, False),
        _big(3, _block(devices, 2), True, need=4),
        _big(4, _block(devices, 4), True, need=4),
    ]
    idle = set(_block(devices, 3, 5))
    knobs = {"packing": False, "sticky": True, "gang": True}
    for patience in (None, 2):
        moves, time, plans = _moves(Judged(**knobs, gang_patience=patience), trials, 12, devices)
        assert sum(moves.values()) == 0, (patience, moves)
        assert time[1] == time[2] == 6 * 8, (patience, time)  # half of 12 rounds, on 8 devices
        assert all(idle.isdisjoint(p.devices_of(i)) for p in plans for i in (1, 2))
    moves, time, plans = _moves(Judged(**knobs, gang_patience=0), trials, 12, devices)
    assert moves == {1: 0, 2: 1, 3: 0, 4: 0}, moves
    assert set(plans[0].devices_of(2)) == idle and set(plans[-1].devices_of(2)) == idle
    assert all(set(p.devices_of(1)) == set(b01) for p in plans)
    assert time[1] == time[2] == 12 * 8, time


def test_gang_packs_only_a_trial_parked_on_the_hosts_own_device():
    """Two devices, trials 1 and 4 run, 2 (parked on cpu:0) and 3 (parked on cpu:1, the slowest) wait.
    Packing picks the slowest waiting trial, 3, and the slowest running host, 1 on cpu:0: 3 would move.
    With sticky + gang it joins the trial running on its own device, 4 on cpu:1, and nobody moves."""
    trials = [
        tv(1, 0.95, devices=("cpu:0",), running=True, rate_solo=10.0, memory_mb=500.0),
        tv(2, 0.95, devices=("cpu:0",), running=False, rate_solo=8.0, memory_mb=500.0),
        tv(3, 0.95, devices=("cpu:1",), running=False, rate_solo=5.0, memory_mb=500.0),
        tv(4, 0.95, devices=("cpu:1",), running=True, rate_solo=12.0, memory_mb=500.0),
    ]
    plan = Judged(top_m=0, sticky=True).plan(snap(trials))
    assert plan.placement["cpu:0"] == (1, 3)
    plan = Judged(top_m=0, sticky=True, gang=True).plan(snap(trials))
    assert plan.placement == {"cpu:0": (1,), "cpu:1": (4, 3)}


# ---- grow-shrink -----------------------------------------------------------------------------------------


def test_elastic_trial_grows_onto_an_idle_device_then_shrinks_for_a_queued_trial():
    policy = Judged(grow_shrink=True, idle_grow_s=30.0)
    e = tv(1, 0.95, devices=("cpu:0",), running=True, elastic=True)
    p0 = policy.plan(snap([e], now=0.0))
    assert p0.devices_of(1) == ("cpu:0",) and p0.state["idle_since"] == {"cpu:1": 0.0}
    p1 = policy.plan(snap([e], now=10.0, state=p0.state))
    assert p1.devices_of(1) == ("cpu:0",)  # idle only 10 s
    p2 = policy.plan(snap([e], now=31.0, state=p1.state))
    assert p2.devices_of(1) == ("cpu:0", "cpu:1")
    assert any("grows onto idle cpu:1" in n for n in p2.notes)
    grown = TrialView(**{**e.__dict__, "devices": ("cpu:0", "cpu:1")})
    p3 = policy.plan(snap([grown], now=32.0, state=p2.state))
    assert p3.devices_of(1) == ("cpu:0", "cpu:1")  # stays grown while nobody needs the device
    assert reconcile(Placement({1: grown.devices}, frozenset({1})), p3) == []
    # A queued trial arrives: shrink at once, it gets the device.
    newcomer = tv(2, None, steps=0, arrival=40.0)
    p4 = policy.plan(snap([grown, newcomer], now=33.0, state=p3.state))
    assert p4.devices_of(1) == ("cpu:0",) and p4.devices_of(2) == ("cpu:1",)
    assert any("shrinks back" in n for n in p4.notes)


def test_no_growth_when_disabled_or_not_elastic():
    e = tv(1, 0.95, devices=("cpu:0",), running=True, elastic=True)
    rigid = tv(1, 0.95, devices=("cpu:0",), running=True, elastic=False)
    for policy, t in ((Judged(grow_shrink=False, idle_grow_s=0.0), e), (Judged(grow_shrink=True), rigid)):
        state: dict = {}
        for now in (0.0, 100.0, 200.0):
            plan = policy.plan(snap([t], now=now, state=state))
            state = plan.state
            assert plan.devices_of(1) == ("cpu:0",)


# ---- purity -----------------------------------------------------------------------------------------------


def test_state_is_json_and_plans_are_deterministic():
    trials = [
        tv(1, 0.95, devices=("cpu:0",), running=True, memory_mb=100.0),
        tv(2, 0.9, devices=("cpu:1",), running=True, rate_solo=3.0, memory_mb=100.0),
        tv(3, 0.91, rate_solo=2.0, memory_mb=100.0),
        tv(4, 0.7, devices=("cpu:2",), running=True),
        tv(5, None, steps=0, arrival=50.0),
        tv(6, 0.92, devices=("cpu:2",), running=False, elastic=True),
    ]
    policy = Judged(grow_shrink=True, idle_grow_s=0.0)
    state: dict = {}
    cur = {t.id: t for t in trials}
    for r in range(6):
        s = snap(cur.values(), n_dev=3, state=state, now=float(r), pairs={(2, 3): (2.5, 1.5)})
        plan = policy.plan(s)
        text = json.dumps(plan.state, allow_nan=False)
        again = policy.plan(s)
        assert again == plan
        # A controller that restarts plans the same from the state as stored (JSON round trip).
        stored = json.loads(json.dumps(state))
        s_json = snap(cur.values(), n_dev=3, state=stored, now=float(r), pairs={(2, 3): (2.5, 1.5)})
        assert policy.plan(s_json) == plan
        # Nothing but str keys, lists, numbers, bools, None and str.
        _assert_json_shape(plan.state)
        state = json.loads(text)
        cur = advance(cur, plan)


def _assert_json_shape(value) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            assert isinstance(k, str)
            _assert_json_shape(v)
    elif isinstance(value, list):
        for v in value:
            _assert_json_shape(v)
    else:
        assert value is None or isinstance(value, str | int | float | bool), type(value)


def test_policy_module_imports_no_heavy_layers():
    import ast
    from pathlib import Path

    policy = Path(__file__).resolve().parents[2] / "app" / "executor" / "policy"
    srcs = sorted((policy / "gandiva").glob("*.py"))
    assert srcs
    mods = set()
    for src in srcs:
        for node in ast.walk(ast.parse(src.read_text())):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods.add(node.module)
    allowed_app = {
        "quanta.executor.policy.knobs",
        "quanta.executor.policy.placement.board",
        "quanta.executor.policy.types",
    }
    for m in mods:
        if m.startswith("quanta"):
            assert m in allowed_app or m.startswith("quanta.executor.policy.gandiva"), m
        else:
            assert m in {"__future__", "math", "collections", "collections.abc", "dataclasses", "typing"}, m


@pytest.mark.parametrize("knobs", [{"top_m": -1}, {"kill_threshold": 1.5}, {"pack_margin": -0.1}])
def test_bad_knobs_are_refused(knobs):
    with pytest.raises(ValueError):
        make_policy("gandiva", **knobs)


def test_jobs_without_a_search_are_time_shared_and_never_judged():
    # Trace jobs (simulator): no SearchView, no curve. Guarded for their first steps, then shared.
    jobs = [
        TrialView(id=i, search_id=0, max_steps=1000, steps_done=s, arrival=float(i), kind="resnet")
        for i, s in ((1, 0), (2, 500), (3, 900))
    ]
    plan = Judged().plan(snap(jobs, n_dev=1, searches=()))
    assert plan.stop == () and plan.state["exclusive"] == []
    assert plan.running() == {1}  # the new job first
    tiers = {k: v["tier"] for k, v in plan.state["trials"].items()}
    assert tiers == {"1": GUARD, "2": "shared", "3": "shared"}
    cur, _, plans = drive(Judged(), jobs[1:], rounds=10, n_dev=1)
    assert {p.devices_of(2) != () for p in plans} == {True, False}  # 2 and 3 alternate


def test_shared_tier_ignores_millisecond_noise_in_device_time():
    # Two trace jobs past their guard phase share one device; each ran one 2 s quantum, the running one
    # measured 4 ms more (a real park's latency). It keeps the device: noise must not cost a switch.
    from quanta.executor.policy.types import ClusterSnapshot, DeviceView, TrialStatus

    def job(tid, running, ds):
        return TrialView(
            id=tid,
            arrival=float(tid),
            status=TrialStatus.RUNNING,
            devices=("cpu:0",),
            running=running,
            steps_done=500,
            max_steps=10_000,
            device_seconds=ds,
        )

    state = {"trials": {str(i): {"tier": "shared", "pass": 0.0, "ds": 0.0, "w": 3.0} for i in (1, 2)}}
    policy = Judged(packing=False, top_m=0)

    def plan(ds_parked):
        trials = (job(1, True, 2.004), job(2, False, ds_parked))
        snap_ = ClusterSnapshot(
            now=10.0, devices=(DeviceView("cpu:0"),), trials=trials, policy_state=state, quantum_s=2.0
        )
        return policy.plan(snap_)

    assert plan(2.0).running() == {1}
    assert plan(0.0).running() == {2}  # a whole quantum behind is not noise: it takes its turn


def test_sticky_jobs_leaving_a_crowded_device_count_the_devices_taken_before_them():
    """cpu:0 carries four jobs, cpu:1 and cpu:2 two each. Job 2 (its home claimed by job 1) moves to
    balance, taking one of the two light devices; job 3 then sees one light device left, which job 2's
    arrival made as loaded as the others (3, 2, 3 against 3, 3, 2 with it), so it stays: one move, not two
    that overshoot (moves by several jobs of one crowded home onto the same light devices in one round
    were most of sticky placement's moves on the Philly traces)."""
    jobs = _jobs({1: "cpu:0", 2: "cpu:0", 3: "cpu:0", 4: "cpu:0", 5: "cpu:1", 6: "cpu:1", 7: "cpu:2", 8: "cpu:2"})
    moves, time, _ = _moves(Judged(packing=False, sticky=True), jobs, 30, devs(3))
    assert sum(moves.values()) == 1, moves
    assert max(time.values()) - min(time.values()) <= 6.0, time


def test_least_loaded_respects_a_cap_and_move_caps_keep_moves_balancing():
    """`least_loaded` with a cap takes only devices carrying at most that many units (None when none is
    free); `move_caps` lets a waiting unit move only where it balances the loads (two below its home)."""
    from quanta.executor.policy.gandiva import placement
    from quanta.executor.policy.placement.board import Board

    trials = _jobs({1: "cpu:0", 2: "cpu:1", 3: "cpu:2", 4: "cpu:3"})
    board = Board(snap(trials, devices=devs(4), searches=()))
    load = {"cpu:0": 4, "cpu:1": 3, "cpu:2": 2, "cpu:3": 5}
    assert placement.least_loaded(board, 1, load) == ("cpu:2",)
    assert placement.least_loaded(board, 1, load, cap=2) == ("cpu:2",)
    assert placement.least_loaded(board, 1, load, cap=1) is None
    assert placement.least_loaded(board, 2, load, cap=3) == ("cpu:1", "cpu:2")
    assert placement.least_loaded(board, 3, load, cap=3) is None
    units = [(t,) for t in trials] + [(TrialView(id=9, search_id=0, arrival=9.0),)]  # 9: no home
    assert placement.move_caps(units, load, {}) == {1: 2, 2: 1, 3: 0, 4: 3}


# ---- quiet rounds (Plan.quiet_until) ------------------------------------------------------------------


def job(tid: int, steps: int = 500, **kw) -> TrialView:
    """A trace job (no search): never judged; its guard is its first 100 steps."""
    kw.setdefault("status", R if kw.get("devices") else Q)
    return TrialView(id=tid, search_id=0, arrival=float(tid), steps_done=steps, max_steps=10_000, rate_solo=5.0, **kw)


def test_a_round_that_changes_nothing_with_nobody_waiting_is_quiet():
    pol = GandivaPolicy()
    trials = [job(1, devices=("cpu:0",), running=True), job(2, devices=("cpu:1",), running=True)]
    plan = pol.plan(snap(trials, n_dev=3, searches=()))
    assert plan.quiet_until == math.inf and plan.devices_of(1) == ("cpu:0",) and plan.devices_of(2) == ("cpu:1",)
    # The same round with any one thing that could still move is not quiet:
    waiting = [*trials, job(3), job(4)]  # more jobs than devices: the rotation decides every quantum
    assert pol.plan(snap(waiting, n_dev=3, searches=())).quiet_until is None
    newcomer = [trials[0], job(2, steps=40, devices=("cpu:1",), running=True)]  # still in the guard
    assert pol.plan(snap(newcomer, n_dev=3, searches=())).quiet_until is None
    starts = [*trials, job(3)]  # a queued job is placed this round: the plan changes something
    assert pol.plan(snap(starts, n_dev=3, searches=())).quiet_until is None
    assert pol.plan(snap(trials, n_dev=3)).quiet_until is None  # a running search: its trials get judged
    grow = GandivaPolicy(GandivaKnobs(grow_shrink=True))  # a free device may be lent after idle_grow_s
    assert grow.plan(snap(trials, n_dev=3, searches=())).quiet_until is None
    assert grow.plan(snap(trials, n_dev=2, searches=())).quiet_until == math.inf
