"""bench/search.py starts: one tiny search per system, run as the race runs it (Quanta as a `quanta
run` process, each peer in a process of its own), each timed to its targets from its report log."""

from __future__ import annotations

import importlib.util

import pytest

from bench.search import ROOT, one_run, workload_spec

TARGETS = {"easy": 0.05, "medium": 0.1, "hard": 0.99}  # hard out of reach: every search spends its budget


def _race(system: str, max_s: float = 60.0) -> dict:
    spec = workload_spec(ROOT / "examples" / "mnist1d.yaml", system, 0, 2, 60, TARGETS["hard"], max_s, 2)
    return one_run(system, spec, 1, TARGETS, max_s)


def test_quanta_runs_as_a_user_runs_it_and_is_timed_from_its_launch():
    r = _race("default")
    assert r["exit_code"] == 3, "the budget is spent without reaching the hard target (exit 3)"
    assert r["reports"] > 0 and 0 < r["first_step_s"] < r["wall_s"]
    assert r["reached"]["easy"] is not None and r["reached"]["hard"] is None


@pytest.mark.parametrize(("system", "package"), [("optuna", "optuna"), ("ray", "ray"), ("ray_bohb", "hpbandster")])
def test_each_peer_runs_the_same_trainable(system, package):
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed (pip install -e '.[bench]')")
    # Ray's HyperBandForBOHB keeps trials paused at a rung until its bracket fills, which 2 trials never
    # do: the search ends at its time cap, kept short here.
    r = _race(system, 30.0 if system == "ray_bohb" else 60.0)
    assert r["exit_code"] == 0 and r["reports"] > 0 and r["reached"]["hard"] is None
