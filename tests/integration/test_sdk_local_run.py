"""`quanta.sdk.run`: a search run in the caller's process, as in a notebook, with real trial processes."""

from __future__ import annotations

import importlib.util

import pytest
import yaml

from quanta.sdk import LocalRun, run
from quanta.spec import SpecError

TINY = {
    "name": "in-process",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"loguniform": [0.003, 0.1]}, "hidden": {"choice": [8, 32]}},
    "metric": {"name": "accuracy", "goal": "maximize", "target": 0.95},
    "budget": {"max_trials": 4, "max_steps": 300, "max_seconds": 120},
    "parallelism": 2,
    "search": {"algorithm": "tpe", "n_startup": 2},
    "config": {"report_every": 25, "sleep_s": 0.001},
}


def test_run_returns_the_result_and_a_dataframe_of_trials(tmp_path):
    pytest.importorskip("pandas")
    db = f"sqlite:///{tmp_path}/q.db"
    out = run(TINY, devices="cpu:2", db=db, workdir=tmp_path / "work", progress=False)
    assert isinstance(out, LocalRun)
    result, trials = out
    assert result["status"] in ("completed", "stopped") and result["db"] == db
    assert result["reached"] is True and result["best_metric"] >= 0.95
    assert set(result["best_params"]) == {"lr", "hidden"}
    assert len(trials) == len(result["trials"]) >= 1
    assert {"id", "status", "best_metric", "steps", "params.lr", "params.hidden"} <= set(trials.columns)
    assert trials["best_metric"].max() == pytest.approx(result["best_metric"])


def test_a_spec_file_runs_the_same_way(tmp_path):
    pytest.importorskip("pandas")
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**TINY, "budget": {"max_trials": 1, "max_steps": 50}}))
    result, trials = run(path, devices="cpu:1", db=f"sqlite:///{tmp_path}/q.db", workdir=tmp_path / "w", progress=False)
    assert result["name"] == "in-process" and len(trials) == 1


def test_bad_input_is_refused_before_anything_is_stored(tmp_path, monkeypatch):
    db = tmp_path / "q.db"
    url = f"sqlite:///{db}"
    with pytest.raises(SpecError, match="budget.max_trials"):
        run({**TINY, "budget": {"max_trials": 0}}, db=url, progress=False)
    with pytest.raises(SpecError, match="trainable"):
        run({**TINY, "trainable": "no_such_module_here:train"}, db=url, progress=False)
    with pytest.raises(ValueError, match="cpu:x|device"):
        run(TINY, devices="cpu:x", db=url, progress=False)
    assert not db.exists()

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pandas" else real(name, *a))
    with pytest.raises(ImportError, match=r"quanta\[notebook\]"):
        run(TINY, db=url, progress=False)
    assert not db.exists()


def test_resume_goes_on_with_more_trials_in_this_process(tmp_path):
    pytest.importorskip("pandas")
    from quanta.db.errors import Conflict
    from quanta.sdk import resume

    db, work = f"sqlite:///{tmp_path}/q.db", tmp_path / "work"
    spec = {**TINY, "metric": {"name": "accuracy", "target": 1.5}, "budget": {"max_trials": 1, "max_steps": 60}}
    first, _ = run(spec, devices="cpu:2", db=db, workdir=work, progress=False)
    with pytest.raises(Conflict, match="give more trials"):  # its one trial done: nothing to go on with
        resume(first["search_id"], devices="cpu:2", db=db, workdir=work, progress=False)
    result, trials = resume(first["search_id"], trials=2, devices="cpu:2", db=db, workdir=work, progress=False)
    assert result["search_id"] == first["search_id"] and result["status"] == "completed"
    assert list(trials["number"]) == [0, 1, 2] and trials["params.lr"].nunique() == 3
    assert trials.loc[0, "params.lr"] == first["trials"][0]["params"]["lr"]  # the first one kept as it was
    with pytest.raises(KeyError):
        resume(99, db=db, workdir=work, progress=False)
