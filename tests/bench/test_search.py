"""bench/search.py --runs: runs logged for the same experiment are read back by (system, seed); another
experiment's runs and a line cut short by an interrupted write are not. A miss counts as the cap."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.search import ROOT, log_run, miss_or_hit, missing_peers, read_runs, run_key


def _args(max_seconds: float = 900.0) -> argparse.Namespace:
    return argparse.Namespace(
        spec=ROOT / "examples" / "mnist1d_long.yaml",
        trials=100,
        max_steps=None,
        devices=2,
        parallelism=8,
        max_seconds=max_seconds,
    )


def test_runs_of_the_same_experiment_are_read_back_and_others_are_not(tmp_path: Path) -> None:
    targets = {"easy": 0.966, "medium": 0.972, "hard": 0.976}
    key = run_key(_args(), targets)
    assert key["spec"] == "examples/mnist1d_long.yaml"  # the same on every checkout
    other = run_key(_args(max_seconds=300.0), targets)
    run = {"wall_s": 12.0, "reached": {"easy": 3.0, "medium": None, "hard": None}, "exit_code": 0, "reports": 9}
    log = tmp_path / "runs.jsonl"
    lines = [
        json.dumps({**key, "system": "default", "seed": 0, "run": run}),
        json.dumps({**other, "system": "fifo", "seed": 0, "run": run}),
        json.dumps({**key, "system": "optuna", "seed": 1, "run": {**run, "wall_s": 30.0}}),
        json.dumps({**key, "system": "ray", "seed": 1, "run": run})[:40],  # cut short by a kill
    ]
    log.write_text("\n".join(lines) + "\n")
    got = read_runs(log, key)
    assert set(got) == {("default", 0), ("optuna", 1)}
    assert got[("optuna", 1)]["wall_s"] == 30.0
    assert read_runs(log, other) == {("fifo", 0): run}
    assert read_runs(tmp_path / "absent.jsonl", key) == {}
    # The line cut short has no newline: a run logged after it still gets a line of its own.
    log.write_text("\n".join(lines))
    log_run(log, {**key, "system": "ray", "seed": 1, "run": run})
    assert set(read_runs(log, key)) == {("default", 0), ("optuna", 1), ("ray", 1)}


def test_a_miss_counts_as_the_cap_even_when_the_search_gave_up_sooner() -> None:
    assert miss_or_hit(7.5, 9.0, 120.0) == 7.5
    assert miss_or_hit(None, 6.0, 120.0) == 120.0  # out of trials after 6 s: not faster than a hit at 7.5 s
    assert miss_or_hit(None, 130.0, 120.0) == 130.0  # stopped past the cap: its wall time


def test_a_race_names_a_system_it_cannot_run_before_it_starts(monkeypatch) -> None:
    """A peer whose modules are absent would only record misses: the race refuses it by name instead."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    problems = missing_peers(["default", "asha", "ray", "no_such"])
    assert "ray needs ray, not installed" in problems and "unknown system 'no_such'" in problems
    assert "default" not in problems and "asha" not in problems
