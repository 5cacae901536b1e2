"""The spec's `tracking` block and `TrackingHub`, without the tracking libraries: what a spec may ask
for, and how the hub drives trackers (one run per trial, started once, ended once, a failing tracker
left out for its search while the others go on)."""

from __future__ import annotations

import importlib.util
import logging

import pytest

from quanta.integrations.tracking import TrackingHub, TrialInfo
from quanta.integrations.tracking import hub as hub_module
from quanta.integrations.tracking.base import flat_params, numeric
from quanta.spec import SpecError, parse_spec

BASE = {
    "name": "s",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"uniform": [0.0, 1.0]}},
    "metric": {"name": "accuracy"},
}


def spec(tracking: dict):
    return parse_spec({**BASE, "tracking": tracking})


def test_a_spec_without_tracking_tracks_nothing():
    assert parse_spec(BASE).tracking.enabled() == {}
    assert parse_spec(BASE).tracking_problem() is None


@pytest.mark.parametrize(
    ("tracking", "field"),
    [
        ({"tensorboard": {"dir": "/etc/runs"}}, "tracking.tensorboard.dir"),
        ({"tensorboard": {"dir": "runs/../../x"}}, "tracking.tensorboard.dir"),
        ({"mlflow": {"tracking_uri": "http://mlflow.internal:5000"}}, "tracking.mlflow.tracking_uri"),
        ({"mlflow": {"tracking_uri": "sqlite:////var/lib/mlflow.db"}}, "tracking.mlflow.tracking_uri"),
        ({"wandb": {"project": "p", "mode": "online"}}, "tracking.wandb.mode"),
        ({"wandb": {"mode": "offline"}}, "tracking.wandb.project"),
        ({"neptune": {}}, "tracking.neptune"),
    ],
)
def test_only_local_offline_tracking_is_accepted(tracking, field):
    with pytest.raises(SpecError) as err:
        spec(tracking)
    assert field in [path for path, _ in err.value.errors]


def test_defaults_and_what_is_missing(monkeypatch):
    s = spec({"tensorboard": {}, "mlflow": {}, "wandb": {"project": "p"}})
    assert s.tracking.tensorboard.dir == "runs" and s.tracking.mlflow.tracking_uri == "sqlite:///mlflow.db"
    assert list(s.tracking.enabled()) == ["tensorboard", "mlflow", "wandb"]
    # tensorboard and wandb found, mlflow not (whatever this machine has)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else object())
    assert s.tracking_problem() == "tracking.mlflow needs the mlflow package: pip install 'quanta[mlflow]' (or mlflow)"


def test_flat_params_and_numeric_reports():
    params = {"lr": 0.1, "opt": {"name": "sgd", "momentum": 0.9}, "sizes": [1, 2], "none": None}
    assert flat_params(params) == {"lr": 0.1, "opt.name": "sgd", "opt.momentum": 0.9, "sizes": "[1, 2]", "none": "null"}
    assert numeric({"a": 1, "b": 0.5, "c": None, "d": float("nan"), "e": "x", "f": True}) == {"a": 1.0, "b": 0.5}


class Fake:
    def __init__(self, calls: list, name: str, fail_on: str | None = None):
        self.calls, self.name, self.fail_on = calls, name, fail_on

    def _call(self, what: str, *args):
        self.calls.append((self.name, what, *args))
        if what == self.fail_on:
            raise OSError(f"{self.name} cannot {what}")

    def start(self, trial):
        self._call("start", trial.trial_id)

    def log(self, trial_id, step, at, metrics):
        self._call("log", trial_id, step, dict(metrics))

    def end(self, trial_id, status):
        self._call("end", trial_id, status)

    def close(self):
        self._call("close")


def test_the_hub_runs_one_run_per_trial_and_survives_a_failing_tracker(monkeypatch, tmp_path, caplog):
    calls: list = []

    def make(name, block, trial, base):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return Fake(calls, name, fail_on="log" if name == "mlflow" else None)

    monkeypatch.setattr(hub_module, "make_tracker", make)
    tracking = spec({"tensorboard": {}, "mlflow": {}, "wandb": {"project": "p"}}).tracking
    hub = TrackingHub(tmp_path)
    t1, t2 = TrialInfo(1, "s", 10, 0, {"lr": 0.1}), TrialInfo(1, "s", 11, 1, {"lr": 0.2})
    with caplog.at_level(logging.WARNING, logger="quanta.tracking"):
        hub.report(t1, tracking, 0, 1.0, {"accuracy": 0.5, "note": "text only"})
        hub.report(t2, tracking, 0, 1.0, {"accuracy": 0.4})
        hub.report(t1, tracking, 10, 2.0, {"accuracy": 0.7})
        hub.report(t1, tracking, 20, 3.0, {"note": "nothing numeric: dropped"})
        hub.ended(10, "completed")
        hub.close()
    tb = [c[1:] for c in calls if c[0] == "tensorboard"]
    assert tb == [
        ("start", 10),
        ("log", 10, 0, {"accuracy": 0.5}),
        ("start", 11),
        ("log", 11, 0, {"accuracy": 0.4}),
        ("log", 10, 10, {"accuracy": 0.7}),
        ("end", 10, "completed"),
        ("close",),
    ]
    # mlflow failed at its first log: closed, and left out from then on; wandb never started.
    assert [c[1:] for c in calls if c[0] == "mlflow"] == [("start", 10), ("log", 10, 0, {"accuracy": 0.5}), ("close",)]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert any("tracking.wandb of search 1 cannot start (ImportError" in w for w in warnings)
    assert any("tracking.mlflow of search 1 failed (OSError: mlflow cannot log)" in w for w in warnings)
