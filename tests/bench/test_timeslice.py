"""bench/timeslice.py starts: four trials of the benchmark's MLP time-sliced on one CPU device, their
parks and resumes measured (a tiny version of the efficiency run)."""

from __future__ import annotations

from bench.timeslice import pct, run_search


def test_four_trials_time_sliced_on_one_device_all_finish_and_park(tmp_path):
    r = run_search("timeslice", 0.2, 600, 64, tmp_path)
    assert r["steps"] == 4 * 600 and r["wall_s"] > 0
    assert r["park_ms"] and r["resume_ms"], "trials longer than a quantum take turns"
    assert 0 < r["busy_fraction"] <= 1.0 + 1e-6


def test_percentiles_pick_the_nearest_rank():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert (pct(xs, 0), pct(xs, 50), pct(xs, 99), pct(xs, 100)) == (1.0, 3.0, 5.0, 5.0)
    assert pct([], 50) != pct([], 50)  # nan: no parks measured
