"""The spec of a search with several objectives or constraints: what is accepted, and each bad combination
refused naming its field."""

from __future__ import annotations

import pytest

from quanta.search.pareto import Bound, Objective
from quanta.spec import SpecError, parse_spec

BASE = {"name": "mo", "trainable": "m:f", "space": {"lr": {"loguniform": [1e-4, 1e-1]}}}
TWO = [{"name": "accuracy", "goal": "maximize"}, {"name": "latency_ms", "goal": "minimize"}]


def test_two_objectives_with_a_constraint_and_a_point_target():
    spec = parse_spec(
        {
            **BASE,
            "metrics": TWO,
            "constraints": [{"name": "params_m", "max": 5.0}],
            "target": {"accuracy": 0.9, "latency_ms": 5},
        }
    )
    assert spec.pareto and spec.objectives == (Objective("accuracy"), Objective("latency_ms", "minimize"))
    assert spec.bounds == (Bound("params_m", None, 5.0),)
    assert spec.metric.name == "accuracy" and spec.metric.target is None  # the first objective, for one-metric readers
    assert spec.point_target() == (-0.9, 5.0)
    assert parse_spec(spec.model_dump(mode="json")) == spec  # a dumped spec is accepted back
    assert parse_spec(spec.model_dump(mode="json"), stored=True) == spec


def test_a_hypervolume_target_with_its_reference():
    spec = parse_spec(
        {**BASE, "metrics": TWO, "target": {"hypervolume": 12.5}, "reference": {"accuracy": 0.5, "latency_ms": 50}}
    )
    assert spec.point_target() is None and spec.reference_losses() == (-0.5, 50.0)


def test_a_single_metric_spec_is_unchanged_and_may_be_constrained():
    plain = parse_spec({**BASE, "metric": {"name": "acc", "target": 0.9}})
    assert not plain.pareto and plain.objectives == (Objective("acc"),) and plain.metrics == ()
    bounded = parse_spec({**BASE, "metric": {"name": "acc", "target": 0.9}, "constraints": [{"name": "mb", "max": 4}]})
    assert bounded.pareto and bounded.has_target


@pytest.mark.parametrize(
    ("extra", "field", "says"),
    [
        ({"metrics": [TWO[0], TWO[0]]}, "metrics[1].name", "named twice"),
        ({"metrics": [TWO[0]]}, "metrics", "2-4 objectives"),
        ({"metrics": TWO * 3}, "metrics", "at most 4"),
        ({"metrics": TWO, "metric": {"name": "loss"}}, "metric", "not both"),
        ({"metrics": TWO, "target": {"accuracy": 0.9}}, "target", "latency_ms"),
        ({"metrics": TWO, "target": {"accuracy": 0.9, "latency_ms": 5, "f1": 1}}, "target.f1", "not an objective"),
        ({"metrics": TWO, "target": {"hypervolume": 3.0}}, "reference", "reference point"),
        (
            {"metrics": TWO, "target": {"hypervolume": -1}, "reference": {"accuracy": 0, "latency_ms": 9}},
            "target.hypervolume",
            "above 0",
        ),
        (
            {
                "metrics": TWO,
                "target": {"accuracy": 0.9, "latency_ms": 5},
                "reference": {"accuracy": 0.95, "latency_ms": 50},
            },
            "reference.accuracy",
            "wrong side",
        ),
        (
            {
                "metrics": TWO,
                "target": {"accuracy": 0.9, "latency_ms": 5},
                "reference": {"accuracy": 0.5, "latency_ms": 1},
            },
            "reference.latency_ms",
            "wrong side",
        ),
        ({"metrics": TWO, "reference": {"accuracy": 0.5}}, "reference", "latency_ms"),
        ({"metric": {"name": "acc"}, "target": {"acc": 0.9}}, "target", "metric.target"),
        ({"metric": {"name": "acc"}, "constraints": [{"name": "mb"}]}, "constraints[0]", "max, min"),
        (
            {"metric": {"name": "acc"}, "constraints": [{"name": "mb", "min": 5, "max": 1}]},
            "constraints[0]",
            "nothing would be feasible",
        ),
        (
            {"metric": {"name": "acc"}, "constraints": [{"name": "mb", "max": 1}, {"name": "mb", "min": 0}]},
            "constraints[1].name",
            "twice",
        ),
    ],
)
def test_bad_combinations_name_their_field(extra, field, says):
    with pytest.raises(SpecError) as err:
        parse_spec({**BASE, **extra})
    paths = [p for p, _ in err.value.errors]
    assert field in paths, err.value.errors
    assert says in dict(err.value.errors)[field]
