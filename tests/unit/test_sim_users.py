"""Many users in the simulator (`quanta.sim.users`, `simulate(..., shares=...)`): dealing jobs to users,
`--shares` files, the share layer end to end with invariants checked, and the per-user report."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pytest

from quanta.sim.driver import simulate
from quanta.sim.traces import TraceJob, synthetic
from quanta.sim.users import assign_users, jain, parse_shares, user_report, user_summary


def jobs(n=40, seed=3, gap=30.0, rate=10.0) -> list[TraceJob]:
    mix = (("A", 1, 3.0), ("B", 2, 1.0))
    return synthetic(n, seed=seed, mean_interarrival_s=gap, mix=mix, median_steps=2000, sigma=0.7, rate=rate)


def test_assign_users_is_deterministic_skewed_and_interleaved():
    dealt = assign_users(jobs(400), 8)
    assert dealt == assign_users(jobs(400), 8)
    counts = Counter(j.user for j in dealt)
    assert set(counts) == {f"u{i}" for i in range(8)}
    ordered = [counts[f"u{i}"] for i in range(8)]
    assert ordered == sorted(ordered, reverse=True) and ordered[0] > 5 * ordered[-1]  # skewed
    assert counts["u0"] == pytest.approx(400 / sum(1 / (i + 1) for i in range(8)), abs=2)
    assert {j.user for j in dealt[:20]} >= {"u0", "u1", "u2", "u3"}  # interleaved in time


def test_a_trace_with_its_own_users_keeps_them():
    own = [replace(j, user="vc1" if j.id % 2 else "vc2") for j in jobs(10)]
    assert [j.user for j in assign_users(own, 8)] == [j.user for j in own]


def test_parse_shares(tmp_path):
    assert parse_shares("none") is None
    assert parse_shares("equal") == {}
    good = tmp_path / "w.json"
    good.write_text(json.dumps({"u0": 2, "u1": 0.5}))
    assert parse_shares(str(good)) == {"u0": 2.0, "u1": 0.5}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"u0": -1}))
    with pytest.raises(ValueError, match=r"bad.json.*'u0'"):
        parse_shares(str(bad))
    with pytest.raises(ValueError, match="missing.json"):
        parse_shares(str(tmp_path / "missing.json"))
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(ValueError, match="JSON object"):
        parse_shares(str(tmp_path / "list.json"))


def test_jain_index():
    assert jain([1, 1, 1]) == pytest.approx(1.0)
    assert jain([1, 0, 0, 0]) == pytest.approx(0.25)


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "gandiva"])
def test_one_user_with_shares_simulates_exactly_as_without(policy):
    """One user: the share layer is one group, planned by the policy alone; every job's figures agree."""
    trace = [replace(j, user="solo") for j in jobs()]
    kw = dict(gpus=4, gpus_per_server=4, quantum_s=30, check=True)
    plain = simulate(trace, policy, **kw)
    shared = simulate(trace, policy, shares={}, **kw)
    assert [(r["id"], r["jct_s"]) for r in shared.jobs] == [(r["id"], r["jct_s"]) for r in plain.jobs]
    assert shared.summary["migrations"] == plain.summary["migrations"]


def test_shares_protect_a_light_user_from_a_heavy_one():
    """u1 submits a few jobs among u0's many: with equal shares her jobs run on her half of the cluster at
    once, without them they queue behind u0's under fifo; invariants are checked after every event."""
    trace = assign_users(jobs(60, gap=5.0), 2)  # u0 gets 2/3 of the jobs, arriving in a burst
    kw = dict(gpus=4, gpus_per_server=4, quantum_s=30, check=True)
    plain = simulate(trace, "fifo", **kw)
    shared = simulate(trace, "fifo", shares={}, **kw)
    mean = {}
    for name, res in (("plain", plain), ("shared", shared)):
        per: dict[str, list[float]] = {"u0": [], "u1": []}
        for r in res.jobs:
            per[r["user"]].append(r["jct_s"])
        mean[name] = {u: sum(v) / len(v) for u, v in per.items()}
    assert mean["shared"]["u1"] < 0.8 * mean["plain"]["u1"]
    assert shared.summary["utilization"] > 0.5


def test_a_rho_bound_lies_between_strict_shares_and_none():
    """With shares guaranteed only to users behind a bound, the light user u1 is protected less than by
    strict shares (but more than by none) and the heavy u0 capped less: each user's mean JCT lies between
    the two; invariants are checked after every event."""
    from quanta.executor.policy.knobs import ShareKnobs

    trace = assign_users(jobs(60, gap=5.0), 2)
    kw = dict(gpus=4, gpus_per_server=4, quantum_s=30, check=True)
    runs = {
        "none": simulate(trace, "fifo", **kw),
        "strict": simulate(trace, "fifo", shares={}, **kw),
        "bound": simulate(trace, "fifo", shares={}, share_knobs=ShareKnobs(rho_bound=1.2, window_s=300.0), **kw),
    }
    mean: dict[str, dict[str, float]] = {}
    for name, res in runs.items():
        per: dict[str, list[float]] = {"u0": [], "u1": []}
        for r in res.jobs:
            per[r["user"]].append(r["jct_s"])
        mean[name] = {u: sum(v) / len(v) for u, v in per.items()}
    assert mean["strict"]["u1"] < mean["bound"]["u1"] < mean["none"]["u1"]
    assert mean["none"]["u0"] < mean["bound"]["u0"] < mean["strict"]["u0"]


def test_user_report_with_ideal_runs():
    trace = assign_users(jobs(30, gap=10.0), 3)
    res = simulate(trace, "gandiva", gpus=4, gpus_per_server=4, quantum_s=30, shares={}, check=False)
    report = user_summary(trace, res.jobs, "gandiva", gpus=4, gpus_per_server=4, quantum_s=30, kind="v100", weights={})
    assert set(report["users"]) == {"u0", "u1", "u2"}
    for u, row in report["users"].items():
        assert row["rho"] == pytest.approx(row["mean_jct_s"] / row["ideal_mean_jct_s"])
        largest = max(j.devices for j in trace if j.user == u)
        assert row["fair_devices"] == max(1, largest)  # floor(4 / 3) = 1, raised to its largest job
        assert row["jobs"] == sum(1 for j in trace if j.user == u)
    assert report["max_rho"] == max(r["rho"] for r in report["users"].values())
    assert 0 < report["jain_index"] <= 1


def test_user_report_arithmetic():
    trace = [TraceJob(0, "A", 10, 0.0, 1, 1.0, "a"), TraceJob(1, "A", 10, 0.0, 1, 1.0, "b")]
    rows = [{"id": 0, "jct_s": 20.0}, {"id": 1, "jct_s": 10.0}]
    report = user_report(trace, rows, 2, {"a": 1.0}, lambda mine, devices: [10.0])
    assert report["users"]["a"]["rho"] == pytest.approx(2.0)
    assert report["users"]["b"]["rho"] == pytest.approx(1.0)
    assert report["max_rho"] == pytest.approx(2.0)
    assert report["jain_index"] == pytest.approx(jain([0.5, 1.0]))
    fast = user_report(trace, rows, 2, {}, lambda mine, devices: [40.0])  # both faster than alone: x capped at 1
    assert fast["jain_index"] == pytest.approx(1.0) and fast["jain_index_uncapped"] < 1.0


def test_a_fair_share_of_a_mix_keeps_the_mix_in_whole_servers():
    from quanta.sim.users import fair_mix

    assert fair_mix("v100", 100, 4, 12, jobs()) == ("v100", 12)
    # 25 of 200 GPUs: 12.5 of each kind, in whole servers of 4 (at least one of each kind).
    assert fair_mix("v100=100,p100=100", 200, 4, 25, jobs()) == ("v100=12,p100=12", 24)
    assert fair_mix("v100=100,k80=100", 200, 4, 2, jobs()) == ("v100=4,k80=4", 8)
    # A job asking for more than the share's kinds hold gets servers added (rate jobs run anywhere).
    big = [TraceJob(0, "A", 100, 0.0, 16, rate=1.0)]
    assert fair_mix("v100=100,p100=100", 200, 4, 8, big) == ("v100=8,p100=8", 16)


def test_users_on_a_kind_mix_report_rho():
    trace = assign_users(jobs(24), 2)
    kw = dict(gpus=8, gpus_per_server=4, quantum_s=30, kind="v100=4,k80=4")
    res = simulate(trace, "fifo", check=True, **kw)
    rep = user_summary(trace, res.jobs, "fifo", weights={}, **kw)
    assert set(rep["users"]) == {"u0", "u1"} and all(u["rho"] > 0 for u in rep["users"].values())
