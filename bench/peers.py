"""Run the same trainable code under Optuna and Ray Tune, for bench/search.py.

Each peer gets a `Trial`-compatible adapter (track/steps/report/device/max_steps), so the trainable
is byte-for-byte the one Quanta runs. Every report is appended to a shared log file as
`wall_time value` lines (O_APPEND writes of one short line are atomic across processes), which is how
time-to-target is measured for every system alike.
"""

from __future__ import annotations

import importlib
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch


def load(ref: str) -> Callable[[dict, Any], None]:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def append_log(path: str, value: float) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{time.time():.6f} {value!r}\n".encode())
    finally:
        os.close(fd)


class AdapterTrial:
    """The subset of `app.sdk.Trial` a trainable uses, reporting to a peer's callback instead."""

    def __init__(self, config: dict, max_steps: int, on_report: Callable[[int, dict[str, float]], None]):
        self.config = config
        self.max_steps = max_steps
        self.elastic = False
        self.step = 0
        self._on_report = on_report

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def devices(self) -> list[torch.device]:
        return [self.device]

    def track(self, **objects: Any) -> None:
        pass

    def steps(self, n: int | None = None) -> Iterator[int]:
        end = self.max_steps if n is None else min(n, self.max_steps)
        for step in range(end):
            yield step
            self.step = step + 1

    def report(self, **metrics: float) -> None:
        self._on_report(self.step, {k: float(v) for k, v in metrics.items()})


# ---- Optuna ---------------------------------------------------------------------------------------


def optuna_params(trial: Any, space: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Sample the spec's space with Optuna's define-by-run API (nested choices become categorical
    indices followed by the chosen option's own parameters)."""
    out: dict[str, Any] = {}
    for name, node in space.items():
        label = f"{prefix}{name}"
        if isinstance(node, Mapping) and len(node) == 1 and next(iter(node)) in _KINDS:
            kind, args = next(iter(node.items()))
            if kind == "uniform":
                out[name] = trial.suggest_float(label, args[0], args[1])
            elif kind == "loguniform":
                out[name] = trial.suggest_float(label, args[0], args[1], log=True)
            elif kind in ("quniform", "qloguniform"):
                out[name] = trial.suggest_float(label, args[0], args[1], step=args[2], log=False)
            elif kind == "normal":
                out[name] = trial.suggest_float(label, args[0] - 3 * args[1], args[0] + 3 * args[1])
            elif kind == "randint":
                out[name] = trial.suggest_int(label, int(args[0]), int(args[1]) - 1)
            elif kind == "choice":
                idx = trial.suggest_categorical(label, list(range(len(args))))
                option = args[idx]
                out[name] = optuna_params(trial, option, f"{label}/{idx}/") if isinstance(option, Mapping) else option
        elif isinstance(node, Mapping):
            out[name] = optuna_params(trial, node, f"{label}/")
        else:
            out[name] = node
    return out


_KINDS = {"uniform", "loguniform", "quniform", "qloguniform", "normal", "randint", "choice"}


def run_optuna(
    spec: Any, seed: int, n_jobs: int, log_path: str, hard: float, max_seconds: float, pruner: str = "sha"
) -> None:
    """TPESampler + SuccessiveHalvingPruner (`pruner="sha"`) or HyperbandPruner (`"hyperband"`), with
    `n_jobs` worker *processes* (one per device) sharing one study in a JournalStorage file: Optuna's
    documented setup for parallel CPU work (threads would share one GIL and halve its speed). Each
    process stops at the hard target; together they run at most the spec's max_trials trials."""
    import multiprocessing as mp

    import optuna

    journal = str(Path(log_path).parent / "optuna-journal.log")
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal))
    optuna.create_study(
        study_name="bench",
        storage=storage,
        direction="maximize" if spec.metric.goal == "maximize" else "minimize",
    )
    ctx = mp.get_context("fork")  # the trainable's module and torch are imported once, before forking
    load(spec.trainable)
    prepare = getattr(importlib.import_module(spec.trainable.partition(":")[0]), "prepare", None)
    if callable(prepare):
        prepare()  # the data set is built once and shared by the workers, as Quanta's template does
    procs = [
        ctx.Process(target=_optuna_worker, args=(spec, seed + 1000 * i, journal, log_path, hard, max_seconds, pruner))
        for i in range(n_jobs)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()


def _optuna_worker(
    spec: Any, seed: int, journal: str, log_path: str, hard: float, max_seconds: float, pruner: str
) -> None:
    import optuna
    from optuna.study import MaxTrialsCallback

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    torch.set_num_threads(1)
    fn = load(spec.trainable)
    metric = spec.metric.name
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal))
    if pruner == "hyperband":
        chosen: Any = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=spec.budget.max_steps)
    else:
        chosen = optuna.pruners.SuccessiveHalvingPruner()
    study = optuna.load_study(
        study_name="bench",
        storage=storage,
        sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=spec.search.n_startup),
        pruner=chosen,
    )

    def objective(ot: Any) -> float:
        params = optuna_params(ot, spec.space)
        config = {"seed": spec.seed, **spec.config, **params}
        last: list[float] = []

        def on_report(step: int, metrics: dict[str, float]) -> None:
            value = metrics.get(metric)
            if value is None or not math.isfinite(value):
                return
            last.append(value)
            append_log(log_path, value)
            if spec.metric.reaches(value) or value >= hard:
                return
            ot.report(value, step)
            if ot.should_prune():
                raise optuna.TrialPruned()

        fn(config, AdapterTrial(config, spec.budget.max_steps, on_report))
        return last[-1] if last else float("nan")

    def stop_at_hard(study: Any, _trial: Any) -> None:
        if _best_in_log(log_path) >= hard:
            study.stop()

    study.optimize(
        objective,
        n_trials=spec.budget.max_trials,
        timeout=max_seconds,
        callbacks=[stop_at_hard, MaxTrialsCallback(spec.budget.max_trials, states=None)],
        catch=(RuntimeError, ValueError),
    )


def _best_in_log(path: str) -> float:
    try:
        values = [float(line.split()[1]) for line in Path(path).read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return -math.inf
    return max(values, default=-math.inf)


# ---- Ray Tune -------------------------------------------------------------------------------------


def _ray_trainable(config: dict) -> None:
    from ray import tune

    torch.set_num_threads(1)
    fn = load(config["__trainable"])
    metric, log_path, max_steps = config["__metric"], config["__log"], config["__max_steps"]
    params = {k: v for k, v in config.items() if not k.startswith("__")}

    def on_report(step: int, metrics: dict[str, float]) -> None:
        value = metrics.get(metric)
        if value is None or not math.isfinite(value):
            return
        append_log(log_path, value)
        tune.report({metric: value, "step": step})

    fn(params, AdapterTrial(params, max_steps, on_report))


def run_ray(spec: Any, seed: int, n_cpus: int, log_path: str, hard: float, max_seconds: float) -> None:
    """HyperOptSearch (TPE) + ASHAScheduler, one CPU per trial, stop all trials at the hard target."""
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.hyperopt import HyperOptSearch

    from app.search.space import compile_space

    fixed = {"seed": spec.seed, **spec.config}
    space = {
        **compile_space(spec.space),
        **fixed,
        "__trainable": spec.trainable,
        "__metric": spec.metric.name,
        "__log": log_path,
        "__max_steps": spec.budget.max_steps,
    }
    mode = "max" if spec.metric.goal == "maximize" else "min"

    class HardTarget(tune.Stopper):
        def __init__(self) -> None:
            self.done = False

        def __call__(self, trial_id: str, result: dict) -> bool:
            value = result.get(spec.metric.name)
            if value is not None and value >= hard:
                self.done = True
            return False

        def stop_all(self) -> bool:
            return self.done

    ray.init(num_cpus=n_cpus, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        tuner = tune.Tuner(
            tune.with_resources(_ray_trainable, {"cpu": 1}),
            tune_config=tune.TuneConfig(
                metric=spec.metric.name,
                mode=mode,
                search_alg=HyperOptSearch(
                    space=space,
                    metric=spec.metric.name,
                    mode=mode,
                    random_state_seed=seed,
                    n_initial_points=spec.search.n_startup,
                ),
                scheduler=ASHAScheduler(time_attr="step", max_t=spec.budget.max_steps, grace_period=100),
                num_samples=spec.budget.max_trials,
                max_concurrent_trials=n_cpus,
                time_budget_s=max_seconds,
                reuse_actors=True,  # one process per CPU for the whole search: torch is imported once
            ),
            run_config=tune.RunConfig(stop=HardTarget(), verbose=0, storage_path=str(Path(log_path).parent / "ray")),
        )
        tuner.fit()
    finally:
        ray.shutdown()
