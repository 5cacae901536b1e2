"""PyTorch Lightning and the Hugging Face Trainer as Quanta trials (app/integrations/), with the real
libraries and tiny real models on CPU devices: a trial parked and moved many times, and one released
at a step limit and started again from its checkpoint in a new process, report exactly what an
uninterrupted run of the same trial reports; a short search runs through `quanta run`; outside Quanta
the callbacks run standalone."""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path

import pytest

from quanta.api.settings import Settings
from quanta.db.store import Store
from quanta.devices import parse_devices
from quanta.executor.actions import Exited, Migrate, Parked, Release, Reported, Resumed, Run, Suspend
from quanta.executor.runtime.local import LocalRuntime
from quanta.sdk import Trial
from quanta.spec import load_spec
from tests.integration.helpers import collect_until_exit, launches
from tests.integration.test_quanta_run import ROOT, quanta_run

# name: (trainable, config, metric, eval_every, step limit for the release, park offset). Both park right
# after the report that reaches the limit: a Lightning trial at the end of that validation, a Trainer
# trial at the start of the next step (before the step count moves).
CASES = {
    "lightning": (
        "examples.lightning_mnist1d:train",
        {"steps": 120, "eval_every": 20, "channels": 8, "lr": 0.01, "batch_size": 64},
        "accuracy",
        20,
        50,
        0,
    ),
    "hf": (
        "examples.hf_tiny:train",
        {"steps": 60, "eval_every": 10, "hidden": 16, "lr": 3e-3, "batch_size": 32, "train_size": 640},
        "eval_accuracy",
        10,
        25,
        0,
    ),
}


@pytest.fixture(autouse=True)
def _output_dirs(tmp_path, monkeypatch):
    """The examples' own logs (Lightning's CSV logger, the Trainer's output_dir) go to the test's dir."""
    monkeypatch.setenv("QUANTA_LIGHTNING_LOGS", str(tmp_path / "lightning_logs"))
    monkeypatch.setenv("QUANTA_HF_OUTPUT", str(tmp_path / "hf"))


@pytest.mark.parametrize("path", ["examples/lightning_mnist1d.yaml", "examples/hf_tiny.yaml"])
def test_example_specs_parse_and_their_trainables_are_allowed_by_default(path):
    spec = load_spec(ROOT / path)
    module, func = spec.trainable.split(":")
    assert Settings().allows(module)  # `quanta serve` accepts them with the default allowlist
    mod = importlib.import_module(module)
    assert callable(getattr(mod, func)) and callable(mod.prepare)
    assert spec.metric.name == {"examples.lightning_mnist1d": "accuracy", "examples.hf_tiny": "eval_accuracy"}[module]


@pytest.fixture
def one_thread():
    """Standalone runs in this process: one torch thread (two threads on a busy 2-core machine spin)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def reports(events, tid, replay=False):
    """(step, metrics) of trial `tid`'s reports; `replay`: those a later process sent again from the spool."""
    return [(e.step, e.metrics) for e in events if isinstance(e, Reported) and e.trial_id == tid and e.replay == replay]


@pytest.mark.parametrize("name", sorted(CASES))
def test_parked_moved_and_restarted_trials_report_exactly_what_an_uninterrupted_one_does(name, tmp_path):
    trainable, cfg, metric, every, limit, park_offset = CASES[name]
    module = trainable.partition(":")[0]
    table = {t: (trainable, cfg) for t in (1, 2, 3)}
    rt = LocalRuntime(parse_devices("cpu:2"), launches(tmp_path, table, resume=True), warm_modules=[module])
    try:
        rt.apply(1, [Run(1, ("cpu:0",))])
        reference = reports(collect_until_exit(rt, {1}, timeout=120), 1)
        # The loop's own step count: one report per evaluation, the last at the step budget.
        assert [s for s, _ in reference] == list(range(every, cfg["steps"] + 1, every))
        assert all(0.0 <= m[metric] <= 1.0 for _, m in reference)

        # Trial 2: parked at batch boundaries and moved between the two devices all along.
        rt.apply(2, [Run(2, ("cpu:0",))])
        events: list = []
        round_no, device = 3, "cpu:0"
        deadline = time.monotonic() + 120
        while not any(isinstance(e, Exited) for e in events) and time.monotonic() < deadline:
            time.sleep(0.02)
            rt.apply(round_no, [Suspend(2)])
            device = "cpu:1" if device == "cpu:0" else "cpu:0"
            rt.apply(round_no + 1, [Migrate(2, (device,))])
            round_no += 2
            events += rt.poll(0)
        if not any(isinstance(e, Exited) for e in events):
            events += collect_until_exit(rt, {2}, timeout=60)
        assert sum(isinstance(e, Parked) for e in events) >= 3
        assert sum(isinstance(e, Resumed) and e.migrated for e in events) >= 3
        assert [e.status for e in events if isinstance(e, Exited)] == ["completed"]
        assert reports(events, 2) == reference  # bit for bit

        # Trial 3: parks itself after its first report at or past the limit, is released (checkpoint,
        # the process ends), then runs again in a new process restored from the checkpoint.
        rt.apply(round_no, [Run(3, ("cpu:1",), until=limit)])
        first = []
        deadline = time.monotonic() + 120
        while not any(isinstance(e, Parked) for e in first) and time.monotonic() < deadline:
            first += rt.poll(0.2)
        (parked,) = [e for e in first if isinstance(e, Parked)]
        reached = min(s for s, _ in reference if s >= limit)
        assert parked.at_limit and parked.step == reached + park_offset
        rt.apply(round_no + 1, [Release(3)])
        first += collect_until_exit(rt, {3})
        exits = [e for e in first if isinstance(e, Exited) and e.trial_id == 3]
        assert [e.status for e in exits] == ["released"], exits
        exited = exits[0]
        assert exited.steps == parked.step
        assert Path(tmp_path / "ckpt-3.pt").exists()
        rt.apply(round_no + 2, [Run(3, ("cpu:0",))])
        second = collect_until_exit(rt, {3}, timeout=120)
        later = reports(second, 3)
        assert later and later[0][0] == reached + every  # went on from the checkpoint, not from step 0
        assert reports(first, 3) + later == reference
        assert reports(second, 3, replay=True) == reports(first, 3)  # the first process's, sent again
    finally:
        rt.close()


# How many times its case's evaluation interval a trial evaluates at in the time-sliced search: each trial
# must outlast several 0.3 s quanta, or two devices finish the first two before the third needs a park
# (the Lightning case's 80 mini-batches took 0.2 s on a fast machine).
SLICED_EVERY = {"lightning": 10, "hf": 1}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_short_search_runs_through_the_integration(name, tmp_path):
    """`quanta run`: three trials on two CPU devices, time-sliced (so parked and resumed)."""
    trainable, cfg, metric, every, _, _ = CASES[name]
    every *= SLICED_EVERY[name]
    config = {k: v for k, v in cfg.items() if k not in ("steps", "lr")} | {"eval_every": every}
    spec = {
        "name": f"{name}-tiny",
        "trainable": trainable,
        "space": {"lr": {"loguniform": [0.003, 0.03]}},
        "metric": {"name": metric, "goal": "maximize", "target": 2.0},  # unreachable: every trial runs out
        "budget": {"max_trials": 3, "max_steps": 4 * every, "max_seconds": 240},
        "parallelism": 3,
        "search": {"algorithm": "random"},
        "scheduler": {"policy": "timeslice", "quantum_s": 0.3},
        "config": config,
    }
    code, output, out = quanta_run(tmp_path, spec)
    assert code == 3, output  # budget spent without reaching the (unreachable) target
    result = json.loads(out.read_text())
    assert [t["status"] for t in result["trials"]] == ["completed"] * 3, output
    assert all(t["steps"] == 4 * every and 0 <= t["metric"] <= 1 for t in result["trials"])
    store = Store(f"sqlite:///{tmp_path}/q.db")
    for t in result["trials"]:
        assert [r.step for r in store.reports(t["id"])] == [every, 2 * every, 3 * every, 4 * every]
    assert store.latencies("park"), "time-sliced trials are parked at batch boundaries"


def test_lightning_callback_outside_quanta_runs_standalone(tmp_path, one_thread):
    from examples import lightning_mnist1d
    from quanta.integrations.lightning import QuantaCallback

    cfg = {"eval_every": 20, "channels": 8}
    trial = Trial.standalone(cfg, max_steps=40, metric="accuracy")
    lightning_mnist1d.train(cfg, trial)
    assert [s for s, _ in trial.history] == [20, 40] and trial.step == 40
    assert not QuantaCallback().trial.controlled  # no trial given: a standalone one
    with pytest.raises(TypeError, match="expected the trainable's Trial"):
        QuantaCallback("not a trial")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="'val_acc' was not logged; logged: .*'accuracy'"):
        lightning_mnist1d.train(cfg, Trial.standalone(cfg, max_steps=20, metric="val_acc"))


def test_transformers_callback_outside_quanta_runs_standalone(tmp_path, one_thread):
    from examples import hf_tiny
    from quanta.integrations.transformers import QuantaTrainerCallback

    cfg = {"eval_every": 10, "hidden": 16, "train_size": 320}
    trial = Trial.standalone(cfg, max_steps=20, metric="eval_accuracy")
    hf_tiny.train(cfg, trial)
    assert [s for s, _ in trial.history] == [10, 20] and trial.step == 20
    assert set(trial.history[-1][1]) == {"eval_accuracy", "eval_loss"}  # timings are not reported
    assert not QuantaTrainerCallback().trial.controlled
    with pytest.raises(TypeError, match="expected the trainable's Trial"):
        QuantaTrainerCallback(3)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="'accuracy' was not logged; logged: .*'eval_accuracy'"):
        hf_tiny.train(cfg, Trial.standalone(cfg, max_steps=10, metric="accuracy"))


# ---- several objectives and constraints per report -------------------------------------------------

SEARCHED = ("accuracy", "params_k", "latency_ms")  # two objectives and a constrained value, as a spec names them


def _lightning_module_with_costs(cfg: dict):
    """examples/lightning_mnist1d.py's module, logging its parameter count and a latency beside its accuracy
    (what a user adds to an unchanged module for a search with several objectives and a constraint)."""
    from examples.lightning_mnist1d import MNIST1DModule

    class WithCosts(MNIST1DModule):
        def validation_step(self, batch, batch_idx):
            super().validation_step(batch, batch_idx)
            self.log("params_k", sum(p.numel() for p in self.parameters()) / 1000.0)
            self.log("latency_ms", cfg.get("latency_ms", 1.5))

    return WithCosts(8, 0.0, 0.01, "adam")


def _fit_lightning(trial: Trial, cfg: dict, steps: int, **callback: object) -> None:
    import lightning.pytorch as pl
    import torch

    from examples.lightning_mnist1d import loaders
    from quanta.integrations.lightning import QuantaCallback

    torch.manual_seed(0)
    module = _lightning_module_with_costs(cfg)
    train_loader, val_loader = loaders({"seed": 0, "batch_size": 64})
    trainer = pl.Trainer(
        max_steps=steps,
        max_epochs=-1,
        val_check_interval=10,
        check_val_every_n_epoch=None,
        accelerator="cpu",
        devices=1,
        callbacks=[QuantaCallback(trial, **callback)],  # type: ignore[arg-type]
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, train_loader, val_loader)


def test_lightning_callback_reports_every_objective_and_constrained_value_in_one_report(one_thread):
    trial = Trial.standalone({}, max_steps=20, metrics=SEARCHED)
    assert trial.metric == "accuracy" and trial.metrics == SEARCHED
    _fit_lightning(trial, {}, 20)
    assert [s for s, _ in trial.history] == [10, 20]
    for _, metrics in trial.history:
        assert set(SEARCHED) <= set(metrics)  # all three in each report, beside the losses
        assert 0 <= metrics["accuracy"] <= 1 and metrics["latency_ms"] == 1.5
        assert metrics["params_k"] == pytest.approx(0.858)  # examples.mnist1d.CNN1D(8)

    # A name the search reads that the module never logs: a KeyError naming it, before any report.
    missing = Trial.standalone({}, max_steps=10, metrics=(*SEARCHED, "memory_mb"))
    with pytest.raises(KeyError, match="the search's metric 'memory_mb' was not logged; logged: .*'latency_ms'"):
        _fit_lightning(missing, {}, 10)
    assert missing.history == []
    # `metrics=` on the callback overrides the trial's names.
    given = Trial.standalone({}, max_steps=10, metric="accuracy")
    with pytest.raises(KeyError, match="metrics 'a', 'b' were not logged"):
        _fit_lightning(given, {}, 10, metrics=["accuracy", "a", "b"])


def test_lightning_callback_sends_a_non_finite_objective_of_a_multi_objective_search(one_thread):
    """A search with several objectives stores a non-finite one as such (ranked last); a single-objective
    search's non-finite objective is left out of the report, as before."""
    several = Trial.standalone({}, max_steps=10, metrics=("accuracy", "latency_ms"))
    _fit_lightning(several, {"latency_ms": float("inf")}, 10)
    ((_, metrics),) = several.history
    assert metrics["latency_ms"] == float("inf") and "accuracy" in metrics
    one = Trial.standalone({}, max_steps=10, metric="latency_ms")
    _fit_lightning(one, {"latency_ms": float("nan")}, 10)
    ((_, metrics),) = one.history
    assert "latency_ms" not in metrics and "accuracy" in metrics


def _hf_train(trial: Trial, steps: int, **callback: object) -> None:
    """examples/hf_tiny.py's model and data under a Trainer whose `compute_metrics` returns the model's
    parameter count and a latency beside its accuracy."""
    import numpy as np
    from transformers import Trainer, TrainingArguments

    from examples.hf_tiny import DEFAULTS, build_model, datasets
    from quanta.integrations.transformers import QuantaTrainerCallback

    cfg = {**DEFAULTS, "hidden": 16, "train_size": 320}
    model = build_model(cfg)
    size_k = sum(p.numel() for p in model.parameters()) / 1000.0

    def compute_metrics(pred):
        logits = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
        acc = float((np.argmax(logits, axis=-1) == pred.label_ids).mean())
        return {"accuracy": acc, "params_k": size_k, "latency_ms": 2.5}

    train_set, eval_set = datasets(int(cfg["train_size"]))
    args = TrainingArguments(
        output_dir=str(Path(trial.config["out"])),
        max_steps=steps,
        per_device_train_batch_size=32,
        per_device_eval_batch_size=500,
        learning_rate=3e-3,
        eval_strategy="steps",
        eval_steps=10,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        compute_metrics=compute_metrics,
        callbacks=[QuantaTrainerCallback(trial, **callback)],  # type: ignore[arg-type]
    )
    trainer.train()


def test_transformers_callback_reports_every_objective_and_constrained_value_in_one_report(tmp_path, one_thread):
    searched = ("eval_accuracy", "eval_params_k", "eval_latency_ms")  # the Trainer prefixes them with eval_
    trial = Trial.standalone({"out": str(tmp_path / "a")}, max_steps=20, metrics=searched)
    _hf_train(trial, 20)
    assert [s for s, _ in trial.history] == [10, 20]
    for _, metrics in trial.history:
        assert set(metrics) == {*searched, "eval_loss"}  # one report holds them all (timings left out)
        assert 0 <= metrics["eval_accuracy"] <= 1 and metrics["eval_latency_ms"] == 2.5
        assert metrics["eval_params_k"] > 1
    missing = Trial.standalone({"out": str(tmp_path / "b")}, max_steps=10, metrics=(*searched, "eval_memory_mb"))
    with pytest.raises(KeyError, match="'eval_memory_mb' was not logged; logged: .*'eval_params_k'"):
        _hf_train(missing, 10)
    with pytest.raises(TypeError, match="a list of names, not one string"):
        _hf_train(Trial.standalone({"out": str(tmp_path / "c")}, max_steps=10), 10, metrics="eval_accuracy")


def lightning_with_costs(config: dict, trial: Trial) -> None:
    """A trainable for `quanta run`: the module above, logging accuracy, parameter count and latency."""
    _fit_lightning(trial, config, trial.max_steps)


def test_a_search_with_two_objectives_and_a_constraint_runs_through_the_lightning_callback(tmp_path):
    """`quanta run` of a Pareto search whose trials are Lightning fits: each report of each trial holds both
    objectives and the constrained value, and the search ranks them (the budget ends it: the target is out
    of reach)."""
    spec = {
        "name": "lightning-pareto",
        "trainable": "tests.integration.test_integrations:lightning_with_costs",
        "space": {"x": {"uniform": [0.0, 1.0]}},  # the fits differ by nothing the module reads
        "metrics": [{"name": "accuracy", "goal": "maximize"}, {"name": "params_k", "goal": "minimize"}],
        "constraints": [{"name": "latency_ms", "max": 2.0}],
        "target": {"accuracy": 0.999, "params_k": 0.001},
        "budget": {"max_trials": 2, "max_steps": 30, "max_seconds": 240},
        "parallelism": 2,
        "search": {"algorithm": "random"},
    }
    code, output, out = quanta_run(tmp_path, spec)
    assert code == 3, output
    result = json.loads(out.read_text())
    assert [t["status"] for t in result["trials"]] == ["completed"] * 2, output
    store = Store(f"sqlite:///{tmp_path}/q.db")
    for t in result["trials"]:
        rows = store.reports(t["id"])
        assert [r.step for r in rows] == [10, 20, 30]
        assert all(set(SEARCHED) <= set(r.metrics) and r.metrics["latency_ms"] == 1.5 for r in rows)
