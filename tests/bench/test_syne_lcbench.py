"""bench/syne_lcbench.py: the Syne Tune Blackbox over LCBench curves, and a short simulated Syne Tune
search on a tiny stand-in surrogate (no ONNX): real Syne Tune, simulated clock."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

pytest.importorskip("syne_tune", reason="Syne Tune is installed by `make dev` (see the Makefile)")

from bench.syne_lcbench import LCBenchBlackbox, run_syne_method  # noqa: E402


@dataclass(frozen=True)
class P:
    name: str
    kind: str
    low: float
    high: float
    log: bool


@dataclass(frozen=True)
class Curve:
    time: tuple[float, ...]
    val_accuracy: tuple[float, ...]


class StandIn:
    """Two hyperparameters, 6 epochs of 10 s each; accuracy rises towards 1 - |lr - 0.01| * 10 - (u-3)^2/100."""

    epochs = 6
    params = (P("lr", "float", 1e-4, 1e-1, True), P("units", "int", 1, 5, False))

    def __init__(self):
        self.calls: list[dict] = []

    def curves(self, configs):
        out = []
        for c in configs:
            self.calls.append(dict(c))
            top = 1 - abs(c["lr"] - 0.01) * 10 - (c["units"] - 3) ** 2 / 100
            out.append(Curve(tuple(10.0 * e for e in range(1, 7)), tuple(top * e / 6 for e in range(1, 7))))
        return out


def test_blackbox_answers_whole_curves_and_single_epochs_from_the_surrogate():
    bench = StandIn()
    bb = LCBenchBlackbox(bench)
    assert set(bb.configuration_space) == {"lr", "units"}
    assert list(bb.fidelity_values) == [1, 2, 3, 4, 5, 6]
    cfg = {"lr": 0.01, "units": 3}
    table = bb.objective_function(cfg)
    assert table.shape == (6, 2)
    np.testing.assert_allclose(table[:, 0], [e / 6 for e in range(1, 7)])
    np.testing.assert_allclose(table[:, 1], [10.0 * e for e in range(1, 7)])
    assert bb.objective_function(cfg, fidelity={"epoch": 3}) == {"val_accuracy": 0.5, "time": 30.0}
    assert bench.calls[0] == {"lr": 0.01, "units": 3}
    with pytest.raises(ValueError, match="epoch"):
        bb.objective_function(cfg, fidelity={"epoch": 7})


def test_the_config_space_keeps_log_scales_and_integer_bounds():
    from syne_tune.config_space import Float, Integer

    space = LCBenchBlackbox(StandIn()).configuration_space
    assert isinstance(space["lr"], Float)
    assert space["lr"].lower == pytest.approx(1e-4) and space["lr"].upper == pytest.approx(1e-1)
    assert isinstance(space["units"], Integer) and (space["units"].lower, space["units"].upper) == (1, 5)
    rng = np.random.RandomState(0)
    draws = [space["lr"].sample(random_state=rng) for _ in range(400)]
    assert np.median(np.log10(draws)) == pytest.approx(-2.5, abs=0.3)  # uniform in log10 over [-4, -1]


@pytest.mark.parametrize("method", ["random", "asha"])
def test_a_simulated_search_reports_times_to_target_on_the_simulated_clock(method):
    targets = {"medium": 0.5, "hard": 0.9}
    run = run_syne_method(method, "standin", workers=2, hours=0.5, seed=0, targets=targets, bench=StandIn())
    again = run_syne_method(method, "standin", workers=2, hours=0.5, seed=0, targets=targets, bench=StandIn())
    # The same seed gives the same search; Syne Tune's simulated clock also adds the tuner's real
    # processing time (milliseconds), so times agree to well under one epoch, not bit for bit.
    assert run.time_to_target.keys() == again.time_to_target.keys()
    for k, t in run.time_to_target.items():
        assert (t is None) == (again.time_to_target[k] is None)
        assert t is None or t == pytest.approx(again.time_to_target[k], abs=1.0)
    assert run.started >= 2
    # Epochs last 10 simulated seconds: no report can come before the first epoch ends, and a 0.5
    # before epoch 3 of the best possible configuration.
    assert run.time_to_target["medium"] is not None and run.time_to_target["medium"] >= 30.0
    assert run.best_so_far and all(t <= 1800.0 for t, _ in run.best_so_far)
    values = [v for _, v in run.best_so_far]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert run.sim_seconds <= 1800.0
    assert run.wall_seconds < 120.0


def test_the_search_stops_at_the_hard_target():
    targets = {"medium": 0.5, "hard": 0.6}
    run = run_syne_method(
        "random", "standin", workers=2, hours=2.0, seed=1, targets=targets, stop_at=0.6, bench=StandIn()
    )
    hit = run.time_to_target["hard"]
    assert hit is not None
    # The tuner stops at the first results that reach it: the last report counted is within a few
    # epochs (10 s each) of the hit, far from the 2-hour budget.
    assert hit <= run.sim_seconds < hit + 60.0


def test_unknown_method_is_refused_by_name():
    with pytest.raises(ValueError, match="method"):
        run_syne_method("nope", "x", workers=1, hours=1, seed=0, targets={}, bench=StandIn())


@pytest.mark.parametrize("method", ["random", "asha"])
def test_on_the_exact_clock_a_seed_gives_the_same_run_bit_for_bit(method):
    targets = {"medium": 0.5, "hard": 0.9}
    runs = [
        run_syne_method(
            method, "standin", workers=2, hours=0.2, seed=3, targets=targets, bench=StandIn(), clock="exact"
        )
        for _ in range(2)
    ]
    # Decisions cost no simulated time: the same seed, the same reports at the same simulated times.
    assert runs[0].time_to_target == runs[1].time_to_target
    assert runs[0].best_so_far == runs[1].best_so_far and runs[0].started == runs[1].started
    assert runs[0].time_to_target["medium"] is not None and runs[0].time_to_target["medium"] >= 30.0


def test_the_exact_clock_wastes_no_worker_time_between_trials():
    # Random search, one worker, trials of 6 epochs x 10 s: on the exact clock each trial starts within
    # one look (0.1 s) of the previous one's end, so n trials end by about 60 n s; Syne Tune's own clock
    # looks every 5 s and charges the tuner's real time, so its trials end later.
    targets = {"medium": 2.0}  # never reached: the search runs its whole half hour
    exact = run_syne_method(
        "random", "standin", workers=1, hours=0.5, seed=0, targets=targets, bench=StandIn(), clock="exact"
    )
    syne = run_syne_method("random", "standin", workers=1, hours=0.5, seed=0, targets=targets, bench=StandIn())
    assert exact.started >= 1800 // 61
    assert syne.started < exact.started


def test_the_exact_clock_hooks_a_method_syne_tune_still_has_and_unknown_clocks_are_refused():
    from syne_tune.backend.simulator_backend.simulator_backend import SimulatorBackend

    # The exact clock overrides this private method; if a Syne Tune release renames it, the charge
    # would silently come back: fail here instead.
    assert callable(getattr(SimulatorBackend, "_advance_by_outside_time", None))
    with pytest.raises(ValueError, match="clock"):
        run_syne_method("random", "x", workers=1, hours=1, seed=0, targets={}, bench=StandIn(), clock="wall")


@pytest.mark.parametrize("method", ["mobster", "hypertune", "dyhpo"])
def test_the_methods_syne_tune_dropped_are_refused_here_naming_the_peer_environment(method):
    # They run under Syne Tune 0.14 in the peer environment (bench/peer_env.py, tests/bench/test_peer_env.py).
    with pytest.raises(ValueError, match="peer environment"):
        run_syne_method(method, "x", workers=1, hours=1, seed=0, targets={}, bench=StandIn(), clock="exact")
