"""examples/mnist1d_mo.yaml, the search with two objectives (accuracy, parameter count) and a latency
constraint, run for real through `quanta run` on a tiny budget: every report of every trial carries both
objectives and the constrained value, and a point target that the first reports meet ends the search
with exit code 0."""

from __future__ import annotations

import json

import pytest
import yaml

from examples.mnist1d_mo import DepthCNN, param_count
from quanta.db.store import Store
from quanta.sdk import Trial
from quanta.spec import load_spec
from tests.integration.test_quanta_run import ROOT, quanta_run

SPEC = ROOT / "examples" / "mnist1d_mo.yaml"


def tiny(**over: object) -> dict:
    """The example's spec on a tiny budget: 3 trials of 100 steps (reports at steps 0, 50 and 99), 2 at once."""
    spec = yaml.safe_load(SPEC.read_text())
    spec["budget"] = {"max_trials": 3, "max_steps": 100, "max_seconds": 120}
    spec["parallelism"] = 2
    spec["search"] = {"n_startup": 3}
    return {**spec, **over}


def test_spec_names_two_objectives_a_latency_constraint_and_a_point_target():
    spec = load_spec(SPEC)
    assert [(o.name, o.goal) for o in spec.metrics] == [("accuracy", "maximize"), ("params_k", "minimize")]
    assert [(c.name, c.max) for c in spec.constraints] == [("latency_ms", spec.constraints[0].max)]
    assert spec.point_target() is not None and set(spec.target or {}) == {"accuracy", "params_k"}
    assert {"channels", "depth"} <= set(spec.space)  # width and depth are searched
    # The smallest and largest networks of the space, to the parameter (what `params_k` reports).
    assert param_count(DepthCNN(4, 1)) == 4 * 5 + 4 + 4 * 20 * 10 + 10
    assert 30_000 < param_count(DepthCNN(64, 4)) < 50_000


@pytest.mark.slow  # trains: a few seconds
def test_trainable_reports_both_objectives_and_the_latency_standalone():
    trial = Trial.standalone({"channels": 8, "depth": 2, "eval_every": 5}, max_steps=10)
    from examples import mnist1d_mo

    mnist1d_mo.train(trial.config, trial)
    assert [s for s, _ in trial.history] == [0, 5, 9]
    sizes = {m["params_k"] for _, m in trial.history}
    assert sizes == {param_count(DepthCNN(8, 2)) / 1000}
    assert len({m["latency_ms"] for _, m in trial.history}) == 1  # measured once, for the architecture
    assert all(0 < m["latency_ms"] < 1000 and 0 <= m["accuracy"] <= 1 for _, m in trial.history)


def test_a_tiny_search_reports_every_objective_and_the_constrained_value(tmp_path):
    code, output, out = quanta_run(tmp_path, tiny(target={"accuracy": 0.99, "params_k": 0.1}))  # out of reach
    assert code == 3, output  # the budget is spent, the target is not reached
    result = json.loads(out.read_text())
    assert [t["status"] for t in result["trials"]] == ["completed"] * 3, output
    store = Store(f"sqlite:///{tmp_path}/q.db")
    for t in result["trials"]:
        rows = store.reports(t["id"])
        assert [r.step for r in rows] == [0, 50, 99]
        params = t["params"]
        size_k = param_count(DepthCNN(int(params["channels"]), int(params["depth"]))) / 1000
        for r in rows:
            assert r.metrics["params_k"] == pytest.approx(size_k)
            assert 0 <= r.metrics["accuracy"] <= 1 and 0 < r.metrics["latency_ms"] < 1000


def test_a_point_target_the_first_reports_meet_ends_the_search_with_exit_0(tmp_path):
    # Every network of the space is under 50k parameters and beats 0 accuracy; the latency bound is loose.
    spec = tiny(target={"accuracy": 0.0, "params_k": 50}, constraints=[{"name": "latency_ms", "max": 1000}])
    del spec["reference"]  # the example's (chance accuracy) is not below this target
    spec["budget"]["max_trials"] = 20
    spec["budget"]["max_steps"] = 2000
    code, output, out = quanta_run(tmp_path, spec)
    assert code == 0, output
    result = json.loads(out.read_text())
    assert len(result["trials"]) < 20  # ended at the target, long before the budget
