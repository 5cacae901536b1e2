"""The spec space: validation errors name the field path; compiled spaces sample what they say."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hyperopt.base import Domain
from hyperopt.pyll.stochastic import sample

from quanta.search.space import KINDS, SpaceError, compile_space, is_dimension, validate_space
from quanta.spec import SpecError, parse_spec

NESTED = {
    "lr": {"loguniform": [1e-4, 1e-1]},
    "optimizer": {
        "choice": [
            {"name": "sgd", "momentum": {"uniform": [0, 0.99]}},
            {"name": "adam"},
        ]
    },
}


def draws(space, n=200, seed=0):
    hp_space = compile_space(space)
    rng = np.random.default_rng(seed)
    return [sample(hp_space, rng=rng) for _ in range(n)]


# -- each kind compiles and samples inside its bounds ---------------------------------------------


def test_uniform():
    xs = [d["x"] for d in draws({"x": {"uniform": [-2, 3]}})]
    assert all(-2 <= x <= 3 for x in xs)
    assert max(xs) - min(xs) > 4  # spreads over the range


def test_loguniform():
    xs = [d["x"] for d in draws({"x": {"loguniform": [1e-5, 1e-1]}})]
    assert all(1e-5 <= x <= 1e-1 for x in xs)
    assert min(xs) < 1e-4 and max(xs) > 1e-2  # log-spread, not linear


def test_quniform_multiples_of_q():
    xs = [d["x"] for d in draws({"x": {"quniform": [0, 100, 10]}})]
    assert all(0 <= x <= 100 and x % 10 == 0 for x in xs)
    assert len(set(xs)) > 5


def test_qloguniform_multiples_of_q():
    xs = [d["x"] for d in draws({"x": {"qloguniform": [8, 512, 8]}})]
    assert all(8 <= x <= 512 and x % 8 == 0 for x in xs)


def test_normal():
    xs = np.array([d["x"] for d in draws({"x": {"normal": [3, 0.5]}}, n=400)])
    assert abs(xs.mean() - 3) < 0.15
    assert 0.4 < xs.std() < 0.6


@pytest.mark.parametrize(("low", "high"), [(0, 4), (2, 9), (-3, 2), (5, 6)])
def test_randint_low_inclusive_high_exclusive(low, high):
    xs = {int(d["n"]) for d in draws({"n": {"randint": [low, high]}}, n=300)}
    assert xs == set(range(low, high))


def test_randint_accepts_integral_floats():
    xs = {int(d["n"]) for d in draws({"n": {"randint": [1.0, 4.0]}}, n=100)}
    assert xs == {1, 2, 3}


def test_choice_of_constants():
    xs = {d["act"] for d in draws({"act": {"choice": ["relu", "tanh", None, 3]}})}
    assert xs == {"relu", "tanh", None, 3}


def test_choice_of_dicts_is_nested():
    seen = set()
    for d in draws(NESTED):
        opt = d["optimizer"]
        assert isinstance(opt, dict)
        seen.add(opt["name"])
        if opt["name"] == "sgd":
            assert set(opt) == {"name", "momentum"} and 0 <= opt["momentum"] <= 0.99
        else:
            assert opt == {"name": "adam"}
        assert 1e-4 <= d["lr"] <= 1e-1
    assert seen == {"sgd", "adam"}


def test_constants_and_nested_mappings_pass_through():
    (d,) = draws({"batch": 64, "model": {"act": "relu", "width": {"randint": [8, 9]}}}, n=1)
    assert d == {"batch": 64, "model": {"act": "relu", "width": 8}}


def test_labels_are_the_paths():
    domain = Domain(lambda c: 0.0, compile_space({**NESTED, "model": {"width": {"randint": [1, 4]}}}))
    assert set(domain.params) == {"lr", "optimizer", "optimizer/0/momentum", "model/width"}


def test_is_dimension():
    assert all(is_dimension({k: [0, 1]}) for k in KINDS)
    assert not is_dimension({"uniform": [0, 1], "extra": 1})
    assert not is_dimension({"name": "sgd"})
    assert not is_dimension([0, 1])


# -- validation errors name the path ----------------------------------------------------------------


def error(space) -> SpaceError:
    with pytest.raises(SpaceError) as info:
        validate_space(space)
    return info.value


@pytest.mark.parametrize(
    ("space", "path", "reason"),
    [
        ({"x": {"uniform": [1, 0]}}, "space.x.uniform", "low < high"),
        ({"x": {"uniform": [0]}}, "space.x.uniform", "[low, high]"),
        ({"x": {"uniform": "0, 1"}}, "space.x.uniform", "[low, high]"),
        ({"x": {"uniform": [0, "1"]}}, "space.x.uniform", "numbers"),
        ({"x": {"uniform": [0, True]}}, "space.x.uniform", "numbers"),
        ({"x": {"uniform": [0, math.inf]}}, "space.x.uniform", "finite"),
        ({"x": {"loguniform": [0, 1]}}, "space.x.loguniform", "0 < low"),
        ({"x": {"quniform": [0, 1]}}, "space.x.quniform", "[low, high, q]"),
        ({"x": {"quniform": [0, 1, 0]}}, "space.x.quniform", "q > 0"),
        ({"x": {"qloguniform": [-1, 1, 1]}}, "space.x.qloguniform", "0 < low"),
        ({"x": {"normal": [0, 0]}}, "space.x.normal", "sigma > 0"),
        ({"x": {"normal": [0]}}, "space.x.normal", "[mu, sigma]"),
        ({"n": {"randint": [0, 2.5]}}, "space.n.randint", "integers"),
        ({"n": {"randint": [3, 3]}}, "space.n.randint", "low < high"),
        ({"a": {"choice": []}}, "space.a", "non-empty"),
        ({"a": {"choice": "relu"}}, "space.a", "non-empty list"),
        ({"a": {"choice": [[1, 2]]}}, "space.a.choice[0]", "a list is not a dimension"),
        ({"a": {"unifrom": [0, 1]}}, "space.a", "unknown kind 'unifrom'"),
        ({"a": [0, 1]}, "space.a", "a list is not a dimension"),
        ({"a": {"b": object()}}, "space.a.b", "unsupported value"),
        ({"": 1}, "space", "non-empty strings"),
    ],
)
def test_errors_name_the_path(space, path, reason):
    err = error(space)
    assert err.path == path
    assert reason in err.reason
    assert str(err).startswith(f"{path}: ")


def test_nested_choice_error_path():
    space = {"optimizer": {"choice": [{"name": "sgd", "momentum": {"uniform": [1, 0]}}, {"name": "adam"}]}}
    assert error(space).path == "space.optimizer.choice[0].momentum.uniform"
    space["optimizer"]["choice"][0]["momentum"] = {"unifrm": [0, 0.99]}
    assert error(space).path == "space.optimizer.choice[0].momentum"
    space["optimizer"]["choice"][1] = {"name": "adam", "beta": {"loguniform": [0, 1]}}
    space["optimizer"]["choice"][0]["momentum"] = {"uniform": [0, 0.99]}
    assert error(space).path == "space.optimizer.choice[1].beta.loguniform"


def test_root_must_be_a_mapping():
    with pytest.raises(SpaceError) as info:
        validate_space([1, 2])  # type: ignore[arg-type]
    assert info.value.path == "space"


def test_space_error_is_a_value_error():
    assert issubclass(SpaceError, ValueError)


def test_compile_validates_first():
    with pytest.raises(SpaceError):
        compile_space({"x": {"uniform": [1, 0]}})


def test_valid_spaces_pass():
    validate_space(NESTED)
    validate_space({"a": 1, "b": "s", "c": None, "d": True, "e": {}, "f": {"g": {"normal": [0, 1]}}})


def test_spec_reports_space_paths():
    spec = {
        "name": "s",
        "trainable": "examples.m:train",
        "metric": {"name": "acc"},
        "space": {"optimizer": {"choice": [{"name": "sgd", "momentum": {"uniform": [1, 0]}}]}},
    }
    with pytest.raises(SpecError) as info:
        parse_spec(spec)
    ((path, reason),) = info.value.errors
    assert path.startswith("space.optimizer.choice[0].momentum")
    assert "low < high" in reason


def test_colliding_labels_are_refused_at_validation():
    """`a/b` and a nested `a: {b: ...}` share HyperOpt's label `a/b`: HyperOpt would refuse the space
    only when the search starts (DuplicateLabel); validation names the field instead."""
    space = {"a/b": {"uniform": [0, 1]}, "a": {"b": {"uniform": [0, 1]}}}
    with pytest.raises(SpaceError) as info:
        validate_space(space)
    assert info.value.path == "space.a.b" and "a/b" in info.value.reason
    nested = {"opt": {"choice": [{"lr": {"uniform": [0, 1]}}]}, "opt/0/lr": {"uniform": [0, 1]}}
    with pytest.raises(SpaceError, match="opt/0/lr"):
        validate_space(nested)
    validate_space({"a": {"b": {"uniform": [0, 1]}}, "c": {"uniform": [0, 1]}})  # no collision: fine
