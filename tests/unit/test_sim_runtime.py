"""SimRuntime on its own: rates alone, packed (the measured pair rates) and spread across servers,
mechanism costs, and the events the controller measures from."""

from __future__ import annotations

import pytest

from quanta.executor.actions import (
    Exited,
    Migrate,
    Parked,
    Profiled,
    Release,
    Reported,
    Resumed,
    Run,
    Started,
    Stop,
    Suspend,
)
from quanta.sim.jobs import reporting_job
from quanta.sim.runtime import InvariantError, JobSpec, SimCosts, SimRuntime, StepCurve
from quanta.sim.throughputs import Throughputs

A, B = ("A", 1), ("B", 1)
BIG = ("A", 2)


def table() -> Throughputs:
    solo = {"v100": {A: 10.0, B: 4.0, BIG: 18.0}, "v100_unconsolidated": {A: 10.0, B: 4.0, BIG: 12.0}}
    pairs = {"v100": {A: {B: (6.0, 3.0)}, B: {A: (3.0, 6.0)}, BIG: {}}}
    return Throughputs(solo, pairs)


def runtime(servers=2, per_server=2, costs=SimCosts(0, 0, 0, 0), **kw) -> SimRuntime:
    return SimRuntime(servers, per_server, throughputs=table(), costs=costs, max_per_device=2, **kw)


def drain(rt: SimRuntime, until: float) -> list:
    events = []
    while rt.now() < until:
        events += rt.poll(until - rt.now())
    return events + rt.poll(0)


def test_devices_are_grouped_in_servers():
    rt = runtime(servers=3, per_server=4)
    devs = rt.devices()
    assert len(devs) == 12 and len({d.node for d in devs}) == 3
    assert [d.id for d in devs][:5] == ["s000/g0", "s000/g1", "s000/g2", "s000/g3", "s001/g0"]


def test_solo_job_runs_at_its_solo_rate_and_completes():
    rt = runtime()
    rt.register(1, JobSpec("A", 1000, 1))
    rt.apply(1, [Run(1, ("s000/g0",))])
    events = drain(rt, 200)
    ex = [e for e in events if isinstance(e, Exited)]
    assert len(ex) == 1 and ex[0].status == "completed" and ex[0].steps == 1000
    assert ex[0].at == pytest.approx(100.0)  # 1000 steps at 10/s
    assert ex[0].device_seconds == pytest.approx(100.0)
    assert isinstance(events[0], Started)
    prof = [e for e in events if isinstance(e, Profiled)]
    assert prof and all(e.packed_with == () and e.rate == pytest.approx(10.0) for e in prof)
    assert rt.first_at[1] == pytest.approx(10.0)  # 100 mini-batches at 10/s


def test_two_jobs_on_one_device_run_at_the_measured_pair_rates():
    rt = runtime()
    rt.register(1, JobSpec("A", 600, 1))
    rt.register(2, JobSpec("B", 600, 1))
    rt.apply(1, [Run(1, ("s000/g0",)), Run(2, ("s000/g0",))])
    assert rt.job_rate(1) == 6.0 and rt.job_rate(2) == 3.0
    events = drain(rt, 300)
    packed = [e for e in events if isinstance(e, Profiled) and e.packed_with]
    assert {(e.trial_id, e.packed_with) for e in packed} == {(1, (2,)), (2, (1,))}
    assert all(e.rate == pytest.approx(6.0 if e.trial_id == 1 else 3.0) for e in packed)
    done = {e.trial_id: e.at for e in events if isinstance(e, Exited)}
    assert done[1] == pytest.approx(100.0)  # 600 / 6
    # B: 300 steps by t=100 at 3/s, then alone at 4/s: 300 more in 75 s.
    assert done[2] == pytest.approx(175.0)
    solo_after = [e for e in events if isinstance(e, Profiled) and e.trial_id == 2 and not e.packed_with]
    assert solo_after and all(e.rate == pytest.approx(4.0) for e in solo_after)
    assert rt.packs_kept == 1 and rt.packs_undone == 0


def test_unmeasured_pair_time_shares_the_device():
    rt = runtime()
    rt.register(1, JobSpec("A", 100, 1))
    rt.register(2, JobSpec("A", 100, 1))  # (A, A) is not in the pair table
    rt.apply(1, [Run(1, ("s000/g0",)), Run(2, ("s000/g0",))])
    assert rt.job_rate(1) == rt.job_rate(2) == pytest.approx(5.0)


def test_multi_device_job_spread_over_servers_runs_unconsolidated():
    rt = runtime()
    rt.register(1, JobSpec("A", 180, 2))
    rt.apply(1, [Run(1, ("s000/g0", "s000/g1"))])
    assert rt.job_rate(1) == 18.0  # one server: consolidated rate
    rt = runtime()
    rt.register(1, JobSpec("A", 180, 2))
    rt.apply(1, [Run(1, ("s000/g0", "s001/g0"))])
    assert rt.job_rate(1) == 12.0  # two servers: the unconsolidated rate
    rt = runtime()
    rt.register(1, JobSpec("A", 180, 2))
    rt.register(2, JobSpec("A", 180, 2))
    rt.apply(1, [Run(1, ("s000/g0", "s000/g1")), Run(2, ("s000/g0", "s001/g0"))])
    # Sharing s000/g0 (a multi-GPU pair is unmeasured: time-sharing halves each), job 2 also spread.
    assert rt.job_rate(1) == pytest.approx(18.0 * 0.5)
    assert rt.job_rate(2) == pytest.approx(12.0 * 0.5)


def test_suspend_resume_and_migration_cost_time():
    costs = SimCosts(start_s=0.0, suspend_s=0.1, resume_s=0.5, migrate_s=1.5)
    rt = runtime(costs=costs)
    rt.register(1, JobSpec("A", 1000, 1))
    rt.apply(1, [Run(1, ("s000/g0",))])
    drain(rt, 10)
    assert rt.progress(1)[0] == pytest.approx(100.0)
    rt.apply(2, [Suspend(1)])
    ev = rt.poll(0)
    assert isinstance(ev[-1], Parked) and ev[-1].park_ms == pytest.approx(100.0)
    drain(rt, 20)
    assert rt.progress(1)[0] == pytest.approx(100.0)  # parked: no progress
    rt.apply(3, [Run(1, ("s000/g0",))])  # resume where it was parked: 0.5 s
    ev = rt.poll(0)
    assert isinstance(ev[0], Resumed) and not ev[0].migrated
    drain(rt, 30)
    assert rt.progress(1)[0] == pytest.approx(100.0 + 10 * 9.5)
    rt.apply(4, [Migrate(1, ("s001/g1",))])  # move: 1.5 s without progress
    ev = rt.poll(0)
    assert any(isinstance(e, Resumed) and e.migrated for e in ev)
    drain(rt, 40)
    assert rt.progress(1)[0] == pytest.approx(195.0 + 10 * 8.5)
    assert rt.migrations == 1 and rt.residency()[1].devices == ("s001/g1",)


def test_stop_kills_and_apply_is_idempotent_per_round():
    rt = runtime()
    rt.register(1, JobSpec("A", 1000, 1))
    rt.apply(1, [Run(1, ("s000/g0",))])
    rt.apply(1, [Run(1, ("s000/g0",))])  # same round again: nothing more
    assert [type(e) for e in rt.poll(0)] == [Started]
    drain(rt, 5)
    rt.apply(2, [Stop(1, "policy")])
    ex = [e for e in rt.poll(0) if isinstance(e, Exited)]
    assert ex[0].status == "killed" and ex[0].steps == 50
    assert rt.residency() == {}


def test_capacity_is_enforced():
    rt = runtime()
    for i in (1, 2, 3):
        rt.register(i, JobSpec("A", 100, 1))
    with pytest.raises(InvariantError):
        rt.apply(1, [Run(1, ("s000/g0",)), Run(2, ("s000/g0",)), Run(3, ("s000/g0",))])


def test_unpacking_a_pack_while_one_keeps_running_counts_as_undone():
    rt = runtime()
    rt.register(1, JobSpec("A", 10_000, 1))
    rt.register(2, JobSpec("B", 10_000, 1))
    rt.apply(1, [Run(1, ("s000/g0",)), Run(2, ("s000/g0",))])
    drain(rt, 30)
    rt.apply(2, [Migrate(2, ("s000/g1",))])
    assert rt.packs_undone == 1 and rt.packs_kept == 0
    assert rt.job_rate(1) == 10.0 and rt.job_rate(2) == 4.0
    rt.check()


def test_a_pack_is_counted_once_per_pair_however_often_it_is_sliced_out_and_back():
    rt = runtime()
    rt.register(1, JobSpec("A", 6000, 1))
    rt.register(2, JobSpec("B", 6000, 1))
    rt.apply(1, [Run(1, ("s000/g0",)), Run(2, ("s000/g0",))])
    drain(rt, 10)
    for rnd in range(2, 8, 2):  # both parked together, then resumed together: the same pack
        rt.apply(rnd, [Suspend(1), Suspend(2)])
        rt.apply(rnd + 1, [Run(1, ("s000/g0",)), Run(2, ("s000/g0",))])
        drain(rt, rt.now() + 10)
    assert rt.pack_stretches == 4
    assert (rt.packs_kept, rt.packs_undone) == (1, 0)
    rt.apply(9, [Suspend(2)])  # split while job 1 keeps computing: the pair is undone
    drain(rt, rt.now() + 10)
    assert (rt.packs_kept, rt.packs_undone) == (0, 1)


def test_a_released_job_ends_its_process_keeps_its_progress_and_starts_again_from_there():
    rt = runtime(costs=SimCosts(start_s=1.0, suspend_s=0, resume_s=0, migrate_s=0))
    rt.register(1, JobSpec("A", 1000, 1))
    rt.apply(1, [Run(1, ("s000/g0",))])
    drain(rt, 41.0)  # 1 s start, then 40 s at 10/s: 400 steps
    rt.apply(2, [Release(1)])
    (ex,) = [e for e in rt.poll(0) if isinstance(e, Exited)]
    assert ex.status == "released" and ex.steps == 400
    assert 1 not in rt.residency()
    rt.apply(3, [Run(1, ("s001/g1",))])
    events = drain(rt, 200.0)
    (started,) = [e for e in events if isinstance(e, Started)]
    assert started.step == 400
    (done,) = [e for e in events if isinstance(e, Exited)]
    assert done.status == "completed" and done.steps == 1000
    assert done.at == pytest.approx(41.0 + 1.0 + 60.0)  # a new start costs its start time again


# ---- reporting jobs (search trials replayed from a learning-curve surrogate) ---------------------------

# Steps of 4, 2, 2, 2 solo seconds: the first one is slow, as a first epoch often is.
CURVE = StepCurve((4.0, 6.0, 8.0, 10.0), "acc", (0.1, 0.4, 0.3, 0.7))


def reports(events) -> list[tuple[int, float, float]]:
    return [(e.step, e.metrics["acc"], e.at) for e in events if isinstance(e, Reported)]


def test_a_reporting_job_reports_every_step_at_the_curves_times_and_completes():
    rt = runtime()
    rt.register(1, reporting_job("lc", CURVE))
    rt.apply(1, [Run(1, ("s000/g0",))])
    events = drain(rt, 50)
    # The SDK reports the index of the iteration that just ended: step k-1 after k steps.
    assert reports(events) == [(0, 0.1, 4.0), (1, 0.4, 6.0), (2, 0.3, 8.0), (3, 0.7, 10.0)]
    (ex,) = [e for e in events if isinstance(e, Exited)]
    assert ex.status == "completed" and ex.steps == 4 and ex.at == pytest.approx(10.0)
    assert rt.reports == 4
    rt.check()


def test_a_reporting_job_runs_only_its_budget_of_steps():
    rt = runtime()
    rt.register(1, reporting_job("lc", CURVE, steps=2))
    rt.apply(1, [Run(1, ("s000/g0",))])
    events = drain(rt, 50)
    assert [s for s, _, _ in reports(events)] == [0, 1]
    (ex,) = [e for e in events if isinstance(e, Exited)]
    assert ex.steps == 2 and ex.at == pytest.approx(6.0)
    with pytest.raises(ValueError, match="strictly increasing"):
        StepCurve((1.0, 1.0), "acc", (0.1, 0.2))


def test_a_reporting_job_carries_its_curves_further_metrics_in_every_report():
    curve = StepCurve((4.0, 6.0), "acc", (0.1, 0.4), (("secs", (208.0, 156.0)),))
    rt = runtime()
    rt.register(1, reporting_job("lc", curve))
    rt.apply(1, [Run(1, ("s000/g0",))])
    got = [(e.step, e.metrics) for e in drain(rt, 50) if isinstance(e, Reported)]
    assert got == [(0, {"acc": 0.1, "secs": 208.0}), (1, {"acc": 0.4, "secs": 156.0})]
    with pytest.raises(ValueError, match="'secs' has 1 values for 2 steps"):
        StepCurve((4.0, 6.0), "acc", (0.1, 0.4), (("secs", (1.0,)),))
    with pytest.raises(ValueError, match="own metric"):
        StepCurve((4.0, 6.0), "acc", (0.1, 0.4), (("acc", (1.0, 2.0)),))


def test_a_reporting_job_parks_itself_after_its_first_report_at_its_until_step_and_resumes():
    rt = runtime(costs=SimCosts(start_s=0, suspend_s=0.1, resume_s=0.5, migrate_s=1.5))
    rt.register(1, reporting_job("lc", CURVE))
    rt.apply(1, [Run(1, ("s000/g0",), until=1)])
    events = drain(rt, 50)
    assert [s for s, _, _ in reports(events)] == [0, 1]
    (parked,) = [e for e in events if isinstance(e, Parked)]
    assert parked.at_limit and parked.park_ms == 0 and parked.step == 2 and parked.at == pytest.approx(6.0)
    assert rt.residency()[1].running is False and rt.residency()[1].steps == 2
    assert rt.limit_parks == 1 and rt.suspends == 0 and rt.parked_ids == {1}
    rt.apply(2, [Run(1, ("s000/g0",))])  # resumed without a limit: runs to the end (0.5 s resume cost)
    events = drain(rt, 100)
    assert [(s, at) for s, _, at in reports(events)] == [(2, pytest.approx(52.5)), (3, pytest.approx(54.5))]
    assert [e.status for e in events if isinstance(e, Exited)] == ["completed"]


def test_a_reporting_job_suspended_mid_step_finishes_that_step_after_resuming():
    rt = runtime()
    rt.register(1, reporting_job("lc", CURVE))
    rt.apply(1, [Run(1, ("s000/g0",))])
    drain(rt, 5.0)  # step 2 (2 s long) is half done
    rt.apply(2, [Suspend(1)])
    rt.poll(0)
    drain(rt, 20.0)
    rt.apply(3, [Run(1, ("s000/g0",))])
    events = drain(rt, 100)
    assert [(s, at) for s, _, at in reports(events)] == [(1, pytest.approx(21.0)), (2, 23.0), (3, 25.0)]
    prof = [e for e in events if isinstance(e, Profiled)]
    assert prof and all(e.rate == pytest.approx(0.5) for e in prof)  # 2 s steps after the first
    rt.check()


def test_two_reporting_jobs_sharing_a_device_time_share_it_at_every_step():
    rt = runtime()
    rt.register(1, reporting_job("lc", CURVE))
    rt.register(2, reporting_job("lc", CURVE))
    rt.apply(1, [Run(1, ("s000/g0",)), Run(2, ("s000/g0",))])  # an unmeasured pair: half speed each
    events = drain(rt, 50)
    for tid in (1, 2):
        got = [e.at for e in events if isinstance(e, Reported) and e.trial_id == tid]
        assert got == pytest.approx([8.0, 12.0, 16.0, 20.0])
    rt.check()


def test_a_released_reporting_job_restarts_from_its_steps():
    rt = runtime()
    rt.register(1, reporting_job("lc", CURVE))
    rt.apply(1, [Run(1, ("s000/g0",), until=0)])
    drain(rt, 10)  # parked itself at 4 s after step 1
    rt.apply(2, [Release(1)])
    (ex,) = [e for e in rt.poll(0) if isinstance(e, Exited)]
    assert ex.status == "released" and ex.steps == 1
    rt.apply(3, [Run(1, ("s000/g1",))])
    events = drain(rt, 50)
    assert [s for s, _, _ in reports(events)] == [1, 2, 3]
    assert next(e for e in events if isinstance(e, Started)).step == 1
