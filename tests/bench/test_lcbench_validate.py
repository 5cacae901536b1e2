"""The live run's measures that `bench/lcbench_validate.py` hands to the simulator (no live run here)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.lcbench_validate import step_overhead_s


def report(trial: int, step: int, at: float) -> SimpleNamespace:
    return SimpleNamespace(trial_id=trial, step=step, at=at)


def test_step_overhead_compares_consecutive_reports_with_the_scaled_curve_and_skips_parks():
    times = {1: [1.0, 2.0, 3.0, 4.0], 2: [2.0, 4.0, 6.0]}  # cumulative surrogate seconds per epoch
    scale = 0.5
    reports = [
        report(1, 0, 100.0),
        report(1, 1, 100.51),  # 0.5 s of epoch + 0.01
        report(1, 2, 150.0),  # parked at 120 in between: not an epoch's length
        report(1, 3, 150.52),  # + 0.02
        report(2, 0, 200.0),
        report(2, 2, 202.0),  # a step missing: not consecutive
    ]
    got = step_overhead_s(reports, times, {1: [120.0]}, scale)
    assert got == pytest.approx(0.015)
    assert step_overhead_s(reports[:1], times, {}, scale) is None


def test_the_live_against_simulated_check_starts(yahpo, tmp_path, monkeypatch):
    """One seed of fifo + random for a few simulated minutes, live (trials sleeping through the
    surrogate's epochs at 1/100 of their time) and simulated with the live run's costs."""
    import json

    from bench.lcbench_validate import main
    from quanta.sim.lcbench_trial import PRELOAD_ENV

    monkeypatch.setenv(PRELOAD_ENV, "")  # the live run sets it for its template: restored afterwards
    out = tmp_path / "validate.json"
    main(["--task", "3945", "--systems", "fifo_random", "--seeds", "0", "--workers", "1", "--hours", "0.03",
          "--scale", "0.01", "--json", str(out)])  # fmt: skip
    (run,) = json.loads(out.read_text())["runs"]
    assert run["system"] == "fifo_random" and run["trials_started"]["live"] >= 1
    assert run["trials_started"]["sim"] >= 1 and "start" in run["live_costs_s"]
