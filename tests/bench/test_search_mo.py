"""bench/search_mo.py: what counts as reaching a point target (every objective at least as good, every
constraint met), the spec of one search, Syne Tune's config space from a spec's, and one seed of every
system on a tiny budget, started as a user does, writing the table's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.search_mo import SPEC, parse_target, reached, reached_at, syne_config_space, workload_spec

from .conftest import run_script


def test_a_report_reaches_the_target_when_every_objective_is_as_good_and_it_is_feasible():
    spec = workload_spec(SPEC, 3, 10, 60.0, 200, {"accuracy": 0.8, "params_k": 10})
    assert (spec.seed, spec.budget.max_trials, spec.budget.max_steps, spec.budget.max_seconds) == (3, 10, 200, 60.0)
    assert spec.budget.stop_on_target and spec.target == {"accuracy": 0.8, "params_k": 10}
    bound = spec.constraints[0].max
    assert bound is not None
    ok = {"accuracy": 0.8, "params_k": 10.0, "latency_ms": bound}
    assert reached(spec, ok)  # at the target and on the bound: reached
    assert not reached(spec, {**ok, "accuracy": 0.79})
    assert not reached(spec, {**ok, "params_k": 10.5})
    assert not reached(spec, {**ok, "latency_ms": bound + 0.1})  # infeasible
    assert not reached(spec, {"accuracy": 0.9, "params_k": 1.0})  # the constrained value unknown
    assert not reached(spec, {**ok, "accuracy": float("nan")})
    assert reached_at(spec, [(5.0, ok), (2.0, {**ok, "params_k": 99}), (3.0, ok)]) == 3.0
    # The spec's own target and reference; a given target the reference is not worse than drops it.
    assert workload_spec(SPEC, 0, None, 60.0).target == workload_spec(SPEC, 0, None, 60.0, None, None).target
    assert workload_spec(SPEC, 0, None, 60.0, None, {"accuracy": 0.05, "params_k": 500}).reference is None


def test_syne_tune_config_space_and_target_parsing():
    space = syne_config_space(
        {"lr": {"loguniform": [1e-4, 0.1]}, "depth": {"randint": [1, 5]}, "c": {"choice": [4, 8]}}
    )
    assert (space["depth"].lower, space["depth"].upper) == (1, 4)  # Syne Tune's upper bound is inclusive
    assert space["c"].categories == [4, 8] and space["lr"].lower == pytest.approx(1e-4)
    with pytest.raises(ValueError, match="space.opt: choice"):
        syne_config_space({"opt": {"choice": [{"name": "sgd"}, {"name": "adam"}]}})
    assert parse_target("accuracy=0.9, params_k=5") == {"accuracy": 0.9, "params_k": 5.0}
    assert parse_target(None) is None


def test_one_seed_of_every_system_on_a_tiny_budget(tmp_path: Path):
    pytest.importorskip("optuna")  # the peers: the `bench` extra (`make bench` installs it)
    pytest.importorskip("syne_tune")
    out = tmp_path / "search_mo.json"
    proc = run_script(
        "search_mo",
        *("--systems", "default,optuna_motpe,syne_moasha", "--seeds", "0", "--trials", "3"),
        *("--max-steps", "60", "--max-seconds", "40", "--target", "accuracy=0.12,params_k=45"),
        *("--json", str(out)),
        timeout=300,
    )
    assert "time to the point target" in proc.stdout
    data = json.loads(out.read_text())
    assert data["target"] == {"accuracy": 0.12, "params_k": 45.0}
    assert data["constraints"][0]["name"] == "latency_ms"
    assert data["workload"]["seeds"] == [0] and data["workload"]["max_steps"] == 60
    assert set(data["systems"]) == {"default", "optuna_motpe", "syne_moasha"}
    for name, r in data["systems"].items():
        assert set(r) >= {"median_s", "q1_s", "q3_s", "runs_s", "reached", "device_s_median", "runs"}, name
        (run,) = r["runs"]
        assert run["seed"] == 0 and run["reports"] > 0 and 1 <= run["trials"] <= 3, (name, run)
        assert run["wall_s"] > 0 and (run["reached_s"] is None or run["reached_s"] <= run["wall_s"])
    assert set(data["ratios"]) == {"optuna_motpe", "syne_moasha"}
