"""The share layer (`quanta.executor.policy.share`) on hand-built snapshots: weights, equal split among a
user's searches, work conservation and give-back, each search's own policy inside its share, rho."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

import pytest

from quanta.executor.policy import make_policy
from quanta.executor.policy.knobs import ShareKnobs
from quanta.executor.policy.share import (
    SharePolicy,
    bounded_shares,
    fair_shares,
    groups_of,
    shares_of,
    water_fill,
)
from quanta.executor.policy.types import ClusterSnapshot, DeviceView, Plan, SearchView, TrialStatus, TrialView
from quanta.search.judge import judge

R = TrialStatus.RUNNING


def devs(n: int) -> tuple[DeviceView, ...]:
    return tuple(DeviceView(f"cpu:{i}", f"n{i // 4}") for i in range(n))


def search_trials(search_id: int, n: int, first_id: int, arrival: float = 0.0) -> list[TrialView]:
    return [TrialView(id=first_id + i, search_id=search_id, arrival=arrival + i * 1e-3) for i in range(n)]


def snap(trials, searches, n_dev, state=None, now=0.0, weights=None) -> ClusterSnapshot:
    return ClusterSnapshot(
        now=now,
        devices=devs(n_dev),
        trials=tuple(trials),
        searches=tuple(searches),
        policy_state=state or {},
        quantum_s=1.0,
        user_weights=weights or {},
    )


class World:
    """Drives a policy round after round (one quantum each): trials run where the plan puts them and
    gain device time; `device_s[user]` counts what each user got."""

    def __init__(self, policy, trials: Sequence[TrialView], searches: Sequence[SearchView], n_dev: int, **kw):
        self.policy, self.n_dev, self.kw = policy, n_dev, kw
        self.trials = {t.id: t for t in trials}
        self.searches = {s.id: s for s in searches}
        self.state: Mapping = {}
        self.now = 0.0
        self.device_s: Counter[str] = Counter()
        self.last: Plan | None = None

    def owner(self, t: TrialView) -> str:
        return self.searches[t.search_id].owner if t.search_id in self.searches else t.owner

    def round(self, quantum: float = 1.0) -> Plan:
        s = snap(self.trials.values(), self.searches.values(), self.n_dev, self.state, self.now, **self.kw)
        plan = self.policy.plan(s)
        assert set(plan.placement) <= {d.id for d in s.devices}
        self.state, self.last = plan.state, plan
        for tid, t in list(self.trials.items()):
            on = plan.devices_of(tid)
            if on:
                self.device_s[self.owner(t)] += quantum * len(on)
            self.trials[tid] = TrialView(
                id=t.id,
                search_id=t.search_id,
                owner=t.owner,
                arrival=t.arrival,
                status=R if on or t.status == R else t.status,
                devices=on or t.devices,
                running=bool(on),
                device_seconds=t.device_seconds + quantum * len(on),
                devices_needed=t.devices_needed,
                steps_done=t.steps_done + (10 if on else 0),
                max_steps=t.max_steps,
            )
        self.now += quantum
        return plan

    def drop_search(self, search_id: int) -> None:
        self.trials = {k: t for k, t in self.trials.items() if t.search_id != search_id}
        self.searches.pop(search_id)

    def users_on(self, plan: Plan) -> Counter[str]:
        return Counter(self.owner(self.trials[i]) for ids in plan.placement.values() for i in ids)


def share(policy: str = "timeslice", **knobs) -> SharePolicy:
    base = make_policy(policy)
    return SharePolicy(base, ShareKnobs(**knobs))


# ---- the arithmetic ---------------------------------------------------------------------------------


def test_water_fill_gives_unused_share_to_the_others_by_weight():
    out = water_fill(10, {"a": 1, "b": 1, "c": 2}, {"a": 1, "b": 100, "c": 100})
    assert out["a"] == pytest.approx(1)
    assert out["b"] == pytest.approx(3)  # the 9 left split 1:2
    assert out["c"] == pytest.approx(6)
    assert sum(out.values()) == pytest.approx(10)


def test_fair_shares_split_users_by_weight_then_a_users_searches_equally():
    trials = search_trials(1, 10, 100) + search_trials(2, 10, 200) + search_trials(3, 10, 300)
    searches = [SearchView(1, owner="ann"), SearchView(2, owner="ann"), SearchView(3, owner="bob")]
    s = snap(trials, searches, 12)
    groups = groups_of(s)
    fair = fair_shares(12, groups, {"ann": 1.0, "bob": 2.0}, {g.key: 10 for g in groups})
    assert fair == pytest.approx({"s1": 2.0, "s2": 2.0, "s3": 8.0})


def test_bounded_shares_guarantee_the_protected_and_divide_the_rest_by_demand():
    trials = search_trials(1, 10, 100) + search_trials(2, 10, 200) + search_trials(3, 10, 300)
    searches = [SearchView(1, owner="ann"), SearchView(2, owner="bob"), SearchView(3, owner="cy")]
    groups = groups_of(snap(trials, searches, 12))
    weights = {"ann": 1.0, "bob": 1.0, "cy": 1.0}
    demand = {"s1": 2, "s2": 12, "s3": 4}
    fair = fair_shares(12, groups, weights, demand)
    # every user protected: the fair shares themselves; none: in proportion to demand
    assert bounded_shares(12, groups, weights, demand, {"ann", "bob", "cy"}) == pytest.approx(fair)
    assert bounded_shares(12, groups, weights, demand, set()) == pytest.approx({"s1": 4 / 3, "s2": 8.0, "s3": 8 / 3})
    # cy protected: her fair 4 first (2 for ann, 5 for bob, 5 for cy: capped at her demand of 4), then the
    # 8 left by what each still wants: ann 2, bob 12 (of 14 wanted: 8 * 2/14 and 8 * 12/14)
    out = bounded_shares(12, groups, weights, demand, {"cy"})
    assert out == pytest.approx({"s1": 8 * 2 / 14, "s2": 8 * 12 / 14, "s3": 4.0})
    assert sum(out.values()) == pytest.approx(12)


# ---- in rounds --------------------------------------------------------------------------------------


def test_weights_are_honoured_over_rounds():
    trials = search_trials(1, 6, 100) + search_trials(2, 6, 200)
    searches = [SearchView(1, owner="ann"), SearchView(2, owner="bob")]
    w = World(share(), trials, searches, 4, weights={"ann": 3.0, "bob": 1.0})
    for _ in range(40):
        plan = w.round()
        assert w.users_on(plan) == {"ann": 3, "bob": 1}
    assert w.device_s["ann"] == pytest.approx(3 * w.device_s["bob"])


def test_fractional_shares_alternate_so_time_is_equal():
    """3 devices, 2 users: 1.5 each, i.e. 1 and 2 in turn; over 20 quanta within one quantum."""
    trials = search_trials(1, 4, 100) + search_trials(2, 4, 200)
    searches = [SearchView(1, owner="ann"), SearchView(2, owner="bob")]
    w = World(share(), trials, searches, 3)
    counts = set()
    for _ in range(20):
        plan = w.round()
        counts.add(tuple(sorted(w.users_on(plan).values())))
    assert counts == {(1, 2)}
    assert abs(w.device_s["ann"] - w.device_s["bob"]) <= 1.0
    assert w.device_s["ann"] + w.device_s["bob"] == 60


def test_a_users_searches_split_its_share_equally():
    trials = search_trials(1, 8, 100) + search_trials(2, 8, 200) + search_trials(3, 8, 300)
    searches = [SearchView(1, owner="ann"), SearchView(2, owner="ann"), SearchView(3, owner="bob")]
    w = World(share(), trials, searches, 8)
    per_search: Counter[int] = Counter()
    for _ in range(10):
        plan = w.round()
        for ids in plan.placement.values():
            for i in ids:
                per_search[w.trials[i].search_id] += 1
    assert per_search == {1: 20, 2: 20, 3: 40}


def test_work_conserving_and_give_back_within_one_quantum():
    """bob wants one device of four: ann gets the other three; when bob's demand grows to four, he
    has his two back at the next round."""
    ann = search_trials(1, 6, 100)
    bob = search_trials(2, 1, 200)
    searches = [SearchView(1, owner="ann"), SearchView(2, owner="bob")]
    w = World(share(), ann + bob, searches, 4)
    for _ in range(5):
        plan = w.round()
        assert w.users_on(plan) == {"ann": 3, "bob": 1}
        assert len(plan.placement) == 4  # no device idle
    for t in search_trials(2, 3, 210, arrival=w.now):
        w.trials[t.id] = t
    plan = w.round()
    assert w.users_on(plan) == {"ann": 2, "bob": 2}


def test_idle_user_lends_all_and_a_finished_search_hands_its_share_over():
    ann = search_trials(1, 4, 100)
    bob = search_trials(2, 4, 200)
    searches = [SearchView(1, owner="ann"), SearchView(2, owner="bob")]
    w = World(share(), ann + bob, searches, 4)
    assert w.users_on(w.round()) == {"ann": 2, "bob": 2}
    w.drop_search(2)
    assert w.users_on(w.round()) == {"ann": 4}


def test_devices_left_empty_by_big_trials_are_borrowed():
    """ann's trials need 2 devices each and her share is 3 of 6: the device she cannot use goes to bob,
    whose trials need 1 (work conservation inside a round)."""
    ann = [TrialView(id=100 + i, search_id=1, arrival=i * 1e-3, devices_needed=2) for i in range(3)]
    bob = search_trials(2, 6, 200)
    searches = [SearchView(1, owner="ann"), SearchView(2, owner="bob")]
    w = World(share(), ann + bob, searches, 6)
    plan = w.round()
    assert len(plan.placement) == 6
    on = w.users_on(plan)
    assert on["ann"] in (2, 4) and on["ann"] + on["bob"] == 6


class Judging:
    """A policy planned as the controller plans it without the share layer: judged first (for a policy
    with `judge_knobs`), the judge's state carried in `judge_state`."""

    def __init__(self, policy):
        self.policy, self.name, self.judge_state = policy, policy.name, {}

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        if self.policy.judge_knobs is not None:
            judged = judge(snapshot, self.policy.judge_knobs, self.judge_state)
            self.judge_state = judged.state
            snapshot = replace(snapshot, verdicts=judged.verdicts)
        return self.policy.plan(snapshot)


@pytest.mark.parametrize("inner", ["fifo", "timeslice", "tiresias", "gandiva", "asha"])
def test_one_group_plans_exactly_as_its_policy_alone(inner):
    """A single user with a single search: the same placement, stops (with their reasons), holds and limits as
    the search's policy on the same snapshot, round after round (each with its own carried state)."""
    trials = search_trials(1, 7, 100)
    searches = [SearchView(1, owner="ann", max_steps=200)]
    alone = Judging(make_policy(inner))
    layered = SharePolicy(make_policy(inner), policy_of=lambda sid: None)
    wa = World(alone, trials, searches, 3)
    wb = World(layered, trials, searches, 3)
    for _ in range(12):
        pa, pb = wa.round(), wb.round()
        assert (pa.placement, pa.stop, pa.hold, pa.release, dict(pa.limits), dict(pa.reasons)) == (
            pb.placement,
            pb.stop,
            pb.hold,
            pb.release,
            dict(pb.limits),
            dict(pb.reasons),  # the verdicts that stop trials travel with the stops
        )
        assert pb.state["groups"]["s1"]["state"] == dict(pa.state)


def test_each_search_plans_with_its_own_policy_inside_its_share():
    """ann's search runs fifo (never preempts, oldest first), bob's timeslice (rotates): inside their two
    devices each, fifo keeps the same two trials while timeslice rotates all four."""
    policies = {1: make_policy("fifo"), 2: make_policy("timeslice")}
    layered = SharePolicy(make_policy("timeslice"), policy_of=policies.get)
    ann = search_trials(1, 4, 100)
    bob = search_trials(2, 4, 200)
    searches = [SearchView(1, owner="ann"), SearchView(2, owner="bob")]
    w = World(layered, ann + bob, searches, 4)
    ran: Counter[int] = Counter()
    for _ in range(8):
        plan = w.round()
        ran.update(plan.running())
        assert w.users_on(plan) == {"ann": 2, "bob": 2}
    assert {t for t in ran if t < 200} == {100, 101}  # fifo: the two oldest only
    assert {t for t in ran if t >= 200} == {200, 201, 202, 203}  # timeslice: everyone in turn
    assert all(ran[t] == 4 for t in (200, 201, 202, 203))


def test_trace_jobs_are_grouped_by_their_owner():
    jobs = [TrialView(id=i, owner="ann" if i < 6 else "bob", arrival=i) for i in range(8)]
    w = World(share("fifo"), jobs, [], 4)
    plan = w.round()
    assert w.users_on(plan) == {"ann": 2, "bob": 2}


def test_rho_is_reported_and_rises_for_a_user_who_cannot_use_its_share():
    """ann's trials need 2 devices each; of 5 devices her share is 2.5, of which she can use 2 (bob
    borrows the rest): her rho (ideal / used device time) settles above 1, bob's below."""
    ann = [TrialView(id=100 + i, search_id=1, arrival=i * 1e-3, devices_needed=2) for i in range(3)]
    bob = search_trials(2, 6, 200)
    searches = [SearchView(1, owner="ann"), SearchView(2, owner="bob")]
    w = World(share(window_s=20.0), ann + bob, searches, 5)
    for _ in range(40):
        plan = w.round()
        assert len(plan.placement) == 5  # work-conserving
    acc = shares_of(w.state)
    assert acc["ann"]["rho"] == pytest.approx(2.5 / 2, rel=0.05)
    assert acc["bob"]["rho"] == pytest.approx(2.5 / 3, rel=0.05)
    notes = " ".join(w.last.notes)
    assert "user ann" in notes and "rho 1.2" in notes


def history(used: Mapping[str, float], ideal: float, window_s: float) -> dict:
    """A carried share state: each user's device-seconds used, all with the same ideal and fair time."""
    rates = {"used_rate": 2.0, "fair_rate": 2.0, "ideal_rate": 2.0}
    return {
        "share": {
            "at": 0.0,
            "window_s": window_s,
            "users": {u: {"used": x, "fair": ideal, "ideal": ideal, **rates} for u, x in used.items()},
        },
        "groups": {},
    }


def test_the_knob_favours_the_user_with_the_worst_rho():
    """bob's window says he had a third of his ideal device time (rho 2), ann more than hers: with
    `favour_worst_rho` bob gets 3 of 4 devices, without it 2; with the knob he catches up over rounds."""
    ann, bob = search_trials(1, 8, 100), search_trials(2, 8, 200)
    searches = [SearchView(1, owner="ann"), SearchView(2, owner="bob")]
    state = history({"ann": 60.0, "bob": 20.0}, ideal=40.0, window_s=100.0)
    for knob, bob_gets in ((False, 2), (True, 3)):
        w = World(share(favour_worst_rho=knob, window_s=100.0), ann + bob, searches, 4)
        w.state, w.now = state, 1.0
        assert w.users_on(w.round())["bob"] == bob_gets
    w = World(share(favour_worst_rho=True, window_s=100.0), ann + bob, searches, 4)
    w.state, w.now = state, 1.0
    rhos = []
    for _ in range(30):
        w.round()
        rhos.append(shares_of(w.state)["bob"]["rho"])
    assert rhos[-1] < rhos[0]  # the worst rho improves


def test_rho_bound_guarantees_shares_only_to_users_behind_it():
    """Of 4 devices ann wants 6 and bob 2 (trials of one device each). With every user's share
    guaranteed each gets 2; with `rho_bound` the users within the bound divide the
    cluster by demand, until one falls behind it: from then on it has its fair share again."""
    ann = search_trials(1, 6, 100)
    bob = search_trials(2, 2, 200)
    searches = [SearchView(1, owner="ann"), SearchView(2, owner="bob")]
    strict = World(share(window_s=10.0), ann + bob, searches, 4)
    assert strict.users_on(strict.round()) == {"ann": 2, "bob": 2}
    # both on the books within the bound (rho 1): divided by demand, 6:2 of 4 devices = 3 and 1
    state = history({"ann": 40.0, "bob": 40.0}, ideal=40.0, window_s=10.0)
    w = World(share(window_s=10.0, rho_bound=1.5), ann + bob, searches, 4)
    w.state, w.now = state, 1.0
    assert w.users_on(w.round()) == {"ann": 3, "bob": 1}
    # bob had a third of his ideal (rho 3 > 1.5): his fair share (2) is guaranteed again
    state = history({"ann": 60.0, "bob": 20.0}, ideal=60.0, window_s=10.0)
    w = World(share(window_s=10.0, rho_bound=1.5), ann + bob, searches, 4)
    w.state, w.now = state, 1.0
    assert w.users_on(w.round()) == {"ann": 2, "bob": 2}
    notes = {n.split(":")[1].strip().split()[1]: n for n in w.last.notes if n.startswith("share: user")}
    assert "share guaranteed" in notes["bob"] and "share guaranteed" not in notes["ann"]
    # over rounds bob, held to 1 of his ideal 2 devices, settles near the bound (rho ~1.5), never far above
    w = World(share(window_s=10.0, rho_bound=1.5), ann + bob, searches, 4)
    rhos = []
    for _ in range(60):
        w.round()
        rhos.append(shares_of(w.state)["bob"].get("rho"))
    assert max(rhos[20:]) < 1.5 * 1.2 and min(rhos[20:]) > 1.0


def test_state_survives_a_json_round_trip():
    import json

    trials = search_trials(1, 3, 100) + search_trials(2, 3, 200)
    searches = [SearchView(1, owner="ann"), SearchView(2, owner="bob")]
    w = World(share("gandiva"), trials, searches, 2)
    for _ in range(3):
        w.round()
        w.state = json.loads(json.dumps(w.state))
    assert set(shares_of(w.state)) == {"ann", "bob"}
