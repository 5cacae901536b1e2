"""bench/dehb_lcbench.py: DEHB's simulated event loop on the exact clock, driven by a scripted optimiser
with DEHB's ask/tell shape on a stand-in surrogate (no ONNX, no DEHB: DEHB itself runs in the peer
environment, tests/bench/test_peer_env.py)."""

from __future__ import annotations

import pytest

from bench.dehb_lcbench import run_dehb, simulate
from quanta.sim.lcbench import Curve, Param


class StandIn:
    """Config x in [0, 1]; epochs of 10 s * (1 + x) each (so each config has its own pace); accuracy
    x * e / 6 after epoch e."""

    epochs = 6
    params = (Param("x", "float", 0.0, 1.0, False),)

    def curves(self, configs):
        return [
            Curve(tuple(10.0 * (1 + c["x"]) * e for e in range(1, 7)), tuple(c["x"] * e / 6 for e in range(1, 7)))
            for c in configs
        ]


class Scripted:
    """DEHB's ask/tell shape: asks cycle through (x, fidelity) pairs; tells are recorded."""

    def __init__(self, asks):
        self.asks = list(asks)
        self.n = 0
        self.told: list[tuple[dict, dict]] = []

    def ask(self):
        x, fidelity = self.asks[self.n % len(self.asks)]
        self.n += 1
        return {"config": {"x": x, "unused": 1}, "fidelity": fidelity, "config_id": self.n}

    def tell(self, info, result):
        self.told.append((info, result))


def test_a_jobs_reports_are_the_surrogates_epochs_from_its_start_and_it_holds_its_worker_until_its_last():
    opt = Scripted([(0.5, 2.9), (0.0, 6.0)])  # fidelity 2.9 -> 2 epochs (int, as hposuite maps DEHB's)
    trace = simulate(StandIn(), workers=2, budget_s=200.0, seed=0, optimizer=opt)
    curves = StandIn().curves([{"x": j.config["x"]} for j in trace.jobs])
    for job, curve in zip(trace.jobs, curves, strict=True):
        assert job.config == {"x": job.config["x"]}  # only the surrogate's params
        assert job.reports == [(job.start + curve.time[e], curve.val_accuracy[e]) for e in range(job.epochs)]
        assert job.end == job.start + curve.time[job.epochs - 1]
    # Worker 1: x=0.5 for 2 epochs of 15 s (ends 30), then x=0.5 again ...; worker 2: x=0.0 for 6 epochs
    # of 10 s (ends 60). Each freed worker starts the next ask at the instant its job ended.
    first, second, third = trace.jobs[:3]
    assert (first.epochs, first.start, first.end) == (2, 0.0, 30.0)
    assert (second.epochs, second.start, second.end) == (6, 0.0, 60.0)
    assert third.start == 30.0
    starts = sorted(j.start for j in trace.jobs)
    ends = sorted(j.end for j in trace.jobs)
    assert all(s in {0.0, *ends} for s in starts)  # no idle time: a job starts at 0 or when one ended
    # never more than two jobs at once
    for t in starts:
        assert sum(j.start <= t < j.end for j in trace.jobs) <= 2


def test_dehb_is_told_the_error_of_the_last_epoch_and_the_jobs_training_seconds():
    opt = Scripted([(0.6, 2.0)])
    simulate(StandIn(), workers=1, budget_s=100.0, seed=0, optimizer=opt)
    info, result = opt.told[0]
    assert info["config"]["x"] == 0.6
    assert result == {"fitness": pytest.approx(1 - 0.6 * 2 / 6), "cost": pytest.approx(32.0)}  # 2 x 16 s


def test_jobs_ending_at_one_instant_are_all_told_before_the_next_asks():
    opt = Scripted([(0.0, 1.0)])  # every job: 1 epoch of 10 s
    order: list[str] = []
    ask, tell = opt.ask, opt.tell
    opt.ask = lambda: order.append("ask") or ask()  # type: ignore[method-assign]
    opt.tell = lambda i, r: order.append("tell") or tell(i, r)  # type: ignore[method-assign]
    simulate(StandIn(), workers=3, budget_s=25.0, seed=0, optimizer=opt)
    assert order[:9] == ["ask"] * 3 + ["tell"] * 3 + ["ask"] * 3


def test_the_search_stops_at_the_first_report_reaching_the_target_and_counts_nothing_later(monkeypatch):
    # x=0.9: 0.9 * e / 6 reaches 0.6 at epoch 4, 4 x 19 s = 76 s after its start.
    asks = [(0.9, 6.0), (0.1, 6.0)]
    opt = Scripted(asks)
    trace = simulate(StandIn(), workers=2, budget_s=10_000.0, seed=0, stop_at=0.6, optimizer=opt)
    assert trace.stopped_at == pytest.approx(76.0)
    assert max(t for t, _ in trace.reports) == pytest.approx(76.0)
    # Told before the hit: only x=0.1's job (6 x 11 s = 66 s); the next job started at 66 s.
    assert [(i["config"]["x"], r["cost"]) for i, r in opt.told] == [(0.1, pytest.approx(66.0))]
    assert [j.start for j in trace.jobs] == [0.0, 0.0, pytest.approx(66.0)]
    # run_dehb's accounting on the same search (its DEHB replaced by the script)
    monkeypatch.setattr("bench.dehb_lcbench._quiet_dehb", lambda **kw: Scripted(asks))
    targets = {"hard": 0.6, "x": 0.1}
    run = run_dehb("standin", workers=2, hours=1.0, seed=0, targets=targets, stop_at=0.6, bench=StandIn())
    assert run.time_to_target["hard"] == pytest.approx(76.0) and run.sim_seconds == pytest.approx(76.0)
    assert run.time_to_target["x"] == pytest.approx(19.0)  # x=0.9's first epoch: 0.15
    assert run.started == 3 and run.best_so_far[-1] == (pytest.approx(76.0), pytest.approx(0.6))


def test_the_budget_cuts_reports_after_it():
    trace = simulate(StandIn(), workers=1, budget_s=45.0, seed=0, optimizer=Scripted([(0.0, 6.0)]))
    assert trace.stopped_at == 45.0
    assert [t for t, _ in trace.reports] == [10.0, 20.0, 30.0, 40.0]


def test_a_seeded_search_is_the_same_every_time_and_bad_arguments_are_refused():
    a = simulate(StandIn(), workers=3, budget_s=300.0, seed=0, optimizer=Scripted([(0.3, 2.0), (0.7, 6.0)]))
    b = simulate(StandIn(), workers=3, budget_s=300.0, seed=0, optimizer=Scripted([(0.3, 2.0), (0.7, 6.0)]))
    assert a == b
    with pytest.raises(ValueError, match="workers"):
        simulate(StandIn(), workers=0, budget_s=1.0, seed=0, optimizer=Scripted([(0.1, 1.0)]))
