"""The spec's `tracking` block: a tiny search with real trial processes writes each trial's reports to
TensorBoard, MLflow and W&B (offline), and what each library wrote is read back with that library and
compared with the reports the controller stored. Each tracker's test is skipped when its library is not
installed (the `tensorboard`, `mlflow` and `wandb` extras); the search runs once with those that are."""

from __future__ import annotations

import importlib.util
import json
import os
import struct
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from quanta.db.store import Store
from quanta.devices import parse_devices
from quanta.spec import parse_spec
from quanta.stored_search import run_search

INSTALLED = {name: importlib.util.find_spec(name) is not None for name in ("tensorboard", "mlflow", "wandb")}
BLOCKS = {
    "tensorboard": {"dir": "tb"},
    "mlflow": {"tracking_uri": "sqlite:///track/mlflow.db", "experiment": "tracked"},
    "wandb": {"project": "tracked", "dir": "wb"},
}
SPEC = {
    "name": "tracked",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"loguniform": [0.003, 0.1]}, "hidden": {"choice": [8, 32]}},
    "metric": {"name": "accuracy", "goal": "maximize"},
    "budget": {"max_trials": 3, "max_steps": 60, "max_seconds": 120},
    "parallelism": 2,
    "search": {"algorithm": "random"},
    "scheduler": {"policy": "fifo"},
    "config": {"report_every": 10},
}


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One search with every installed tracker, run in an empty folder (the trackers' paths are relative
    to it); the result, the folder, and the reports the controller stored, by trial id."""
    if not any(INSTALLED.values()):
        pytest.skip("no tracking library installed (pip install 'quanta[tracking]')")
    folder = tmp_path_factory.mktemp("tracking")
    spec = parse_spec({**SPEC, "tracking": {k: v for k, v in BLOCKS.items() if INSTALLED[k]}})
    assert spec.tracking_problem() is None
    db = f"sqlite:///{folder}/q.db"
    here = os.getcwd()
    os.chdir(folder)
    try:
        result = run_search(spec, parse_devices("cpu:2"), db=db, workdir=folder / "work")
    finally:
        os.chdir(here)
    reports: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for row in Store(db).search_reports(result["search_id"]):
        reports[row.trial_id].append((row.step, row.metrics["accuracy"]))
    assert len(reports) == len(result["trials"]) == 3
    return {"result": result, "folder": folder, "reports": dict(reports)}


def _trials(tracked: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {t["id"]: t for t in tracked["result"]["trials"]}


def test_tensorboard_event_files_hold_every_report(tracked):
    if not INSTALLED["tensorboard"]:
        pytest.skip("tensorboard is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trials = _trials(tracked)
    group = tracked["folder"] / "tb" / f"tracked-{tracked['result']['search_id']}"
    for trial_id, reports in tracked["reports"].items():
        acc = EventAccumulator(str(group / f"trial-{trials[trial_id]['number']}"))
        acc.Reload()
        written = [(e.step, pytest.approx(e.value)) for e in acc.Scalars("accuracy")]
        assert written == sorted(reports)
        assert (
            json.loads(acc.Tensors("params/text_summary")[0].tensor_proto.string_val[0].decode())
            == trials[trial_id]["params"]
        )


def test_mlflow_runs_hold_every_report_params_and_status(tracked):
    if not INSTALLED["mlflow"]:
        pytest.skip("mlflow is not installed")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tracked['folder'] / 'track' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tracked")
    runs = {int(r.data.tags["quanta.trial_id"]): r for r in client.search_runs([experiment.experiment_id])}
    trials = _trials(tracked)
    assert set(runs) == set(tracked["reports"])
    for trial_id, reports in tracked["reports"].items():
        run = runs[trial_id]
        history = client.get_metric_history(run.info.run_id, "accuracy")
        assert sorted((m.step, pytest.approx(m.value)) for m in history) == sorted(reports)
        params = trials[trial_id]["params"]
        assert run.data.params == {"lr": str(params["lr"]), "hidden": str(params["hidden"])}
        status = {"completed": "FINISHED", "stopped": "KILLED", "killed": "KILLED", "failed": "FAILED"}
        assert run.info.status == status[trials[trial_id]["status"]]
        assert run.info.run_name == f"tracked-{tracked['result']['search_id']}/trial-{trials[trial_id]['number']}"


def _wandb_records(path: Path) -> list[bytes]:
    """The records of a W&B run file (`run-*.wandb`): a 7-byte header, then LevelDB's log format (32 KiB
    blocks of records, each with a 7-byte header: CRC, length, type full/first/middle/last)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    out, pos, part = [], 7, b""
    while pos + 7 <= len(data):
        room = 32768 - pos % 32768
        if room < 7:
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            break
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            part = chunk
        elif kind == 3:
            part += chunk
        else:
            out.append(part + chunk)
    return out


def test_wandb_offline_runs_hold_every_report_and_config(tracked):
    if not INSTALLED["wandb"]:
        pytest.skip("wandb is not installed")
    from wandb.proto import wandb_internal_pb2

    trials = {f"tracked-{tracked['result']['search_id']}/trial-{t['number']}": t for t in _trials(tracked).values()}
    found = {}
    for path in (tracked["folder"] / "wb" / "wandb").glob("offline-run-*/run-*.wandb"):
        name, config, history = None, {}, []
        for data in _wandb_records(path):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                name = record.run.display_name
                config = {i.key: json.loads(i.value_json) for i in record.run.config.update if i.key != "_wandb"}
            elif kind == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
                history.append((record.history.step.num, pytest.approx(items["accuracy"])))
        found[name] = (config, history)
    assert set(found) == set(trials)
    for name, (config, history) in found.items():
        trial = trials[name]
        assert config == trial["params"]
        assert history == sorted(tracked["reports"][trial["id"]])
