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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from quanta.devices import cpu_devices
from quanta.sdk import Trial


def load(ref: str) -> Callable[[dict, Any], None]:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def append_log(path: str, value: float) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{time.time():.6f} {value!r}\n".encode())
    finally:
        os.close(fd)


class AdapterTrial(Trial):
    """A real `quanta.sdk.Trial` without a controller (as `Trial.standalone()` makes), whose reports also go
    to a peer's callback `on_report(step, metrics)`. Being the SDK's own class, it runs every trainable
    Quanta runs, loops Quanta does not own included (`quanta.integrations`: Lightning, the Hugging Face
    Trainer), unchanged.

    With `checkpoint_path`, a report also makes a checkpoint due: it is written at the next mini-batch
    boundary (where the tracked state is exactly what the next step starts from, as Quanta's own
    checkpoints are) or when the trainable returns (`flush()`), and `on_checkpoint(path, step, metrics)`
    is then called with the report it follows. With `resume=True` and a file at `checkpoint_path`,
    `track()` restores it and `steps()` goes on from its step (a peer that pauses and resumes trials:
    Ray Tune's HyperBand for BOHB)."""

    def __init__(
        self,
        config: dict,
        max_steps: int,
        on_report: Callable[[int, dict[str, float]], None],
        *,
        trial_id: int = 0,
        checkpoint_path: str | None = None,
        resume: bool = False,
        on_checkpoint: Callable[[str, int, dict[str, float]], None] | None = None,
    ):
        super().__init__(
            trial_id, config, max_steps, cpu_devices(1)[:1], checkpoint_path=checkpoint_path, resume=resume
        )
        self._on_report = on_report
        self._on_checkpoint = on_checkpoint
        self._due: tuple[int, dict[str, float]] | None = None

    def report(self, **metrics: float) -> None:
        super().report(**metrics)
        step, clean = self.history[-1]
        self._on_report(step, clean)
        if self._checkpoint_path and self._on_checkpoint is not None:
            self._due = (step, clean)

    def _between_steps(self, final: bool = False) -> None:
        self.flush()

    def flush(self) -> None:
        """Write the checkpoint a report made due, if any, and hand it to `on_checkpoint`."""
        if self._due is None or self._on_checkpoint is None:
            return
        step, metrics = self._due
        self._due = None
        path = self.checkpoint()
        if path is not None:
            self._on_checkpoint(path, step, metrics)


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


def conditional(space: Mapping[str, Any]) -> bool:
    """True when some parameter exists only under one option of a choice (a nested choice)."""
    for node in space.values():
        if isinstance(node, Mapping) and len(node) == 1 and next(iter(node)) in _KINDS:
            kind, args = next(iter(node.items()))
            if kind == "choice" and any(isinstance(o, Mapping) for o in args):
                return True
        elif isinstance(node, Mapping) and conditional(node):
            return True
    return False


def tpe_sampler(spec: Any, seed: int) -> Any:
    """Optuna's TPE as its documentation recommends for this search, stated rather than left to the
    installed version's defaults: multivariate TPE (the default for one objective since Optuna 5),
    the constant liar for trials still running (parallel workers; the default since 5), and the group
    decomposition of the space where the space is conditional (`group=True`: without it multivariate
    TPE samples a conditional space's parameters independently), after the spec's own number of
    random start-up trials."""
    import warnings

    import optuna

    with warnings.catch_warnings():  # `multivariate`/`group`/`constant_liar` are marked experimental in 3.x-4.x
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed,
            n_startup_trials=spec.search.n_startup,
            multivariate=True,
            group=conditional(spec.space),
            constant_liar=True,
        )


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
    study = optuna.load_study(study_name="bench", storage=storage, sampler=tpe_sampler(spec, seed), pruner=chosen)

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
            if spec.metric.reaches(value) or past(value, hard, spec):
                return
            ot.report(value, step)
            if ot.should_prune():
                raise optuna.TrialPruned()

        fn(config, AdapterTrial(config, spec.budget.max_steps, on_report))
        return last[-1] if last else float("nan")

    def stop_at_hard(study: Any, _trial: Any) -> None:
        if past(_best_in_log(log_path, spec), hard, spec):
            study.stop()

    study.optimize(
        objective,
        n_trials=spec.budget.max_trials,
        timeout=max_seconds,
        callbacks=[stop_at_hard, MaxTrialsCallback(spec.budget.max_trials, states=None)],
        catch=(RuntimeError, ValueError),
    )


def past(value: float, target: float, spec: Any) -> bool:
    """`value` is at `target` or beyond it, in the direction of the spec's metric's goal (compared as
    losses, `MetricSpec.loss`)."""
    return bool(spec.metric.loss(value) <= spec.metric.loss(target))


def _best_in_log(path: str, spec: Any) -> float:
    """The best value in a reports log, by the spec's metric's goal (the worst possible if none)."""
    try:
        values = [float(line.split()[1]) for line in Path(path).read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        values = []
    worst = -math.inf if spec.metric.goal == "maximize" else math.inf
    return min(values, key=spec.metric.loss, default=worst)


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

    from quanta.search.space import compile_space

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
            if value is not None and past(value, hard, spec):
                self.done = True
            return False

        def stop_all(self) -> bool:
            return self.done

    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # no CSV/JSON/TensorBoard files per trial
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
                # grace 100 steps, at most the budget (ASHA refuses a grace above max_t)
                scheduler=ASHAScheduler(
                    time_attr="step", max_t=spec.budget.max_steps, grace_period=min(100, spec.budget.max_steps)
                ),
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


# ---- Ray Tune BOHB --------------------------------------------------------------------------------


def configspace(space: Mapping[str, Any], seed: int) -> Any:
    """The spec's space as a ConfigSpace `ConfigurationSpace` for BOHB (TuneBOHB takes one directly):
    parameters named by their path joined with "|" (not "/": Ray Tune splits a configuration's keys
    at "/" into nested dicts), a nested choice as a categorical of option
    indices whose options' own parameters are active only under that index (`EqualsCondition`).
    `quniform`/`qloguniform` are sampled continuous and rounded by `decode_flat`; constants are not
    parameters (`decode_flat` puts them back)."""
    import ConfigSpace as CS

    cs = CS.ConfigurationSpace(seed=seed)

    def add(node_space: Mapping[str, Any], prefix: str, parent: tuple[Any, int] | None) -> None:
        for name, node in node_space.items():
            label = f"{prefix}{name}"
            hp: Any = None
            if isinstance(node, Mapping) and len(node) == 1 and next(iter(node)) in _KINDS:
                kind, args = next(iter(node.items()))
                if kind in ("uniform", "quniform"):
                    hp = CS.UniformFloatHyperparameter(label, float(args[0]), float(args[1]))
                elif kind in ("loguniform", "qloguniform"):
                    hp = CS.UniformFloatHyperparameter(label, float(args[0]), float(args[1]), log=True)
                elif kind == "normal":
                    mu, sigma = float(args[0]), float(args[1])  # cut at 3 sigma, as `optuna_params` does
                    lower, upper = mu - 3 * sigma, mu + 3 * sigma
                    hp = CS.NormalFloatHyperparameter(label, mu=mu, sigma=sigma, lower=lower, upper=upper)
                elif kind == "randint":
                    hp = CS.UniformIntegerHyperparameter(label, int(args[0]), int(args[1]) - 1)
                elif kind == "choice":
                    hp = CS.CategoricalHyperparameter(label, list(range(len(args))))
                cs.add(hp)
                if parent is not None:
                    cs.add(CS.EqualsCondition(hp, parent[0], parent[1]))
                if kind == "choice":
                    for idx, option in enumerate(args):
                        if isinstance(option, Mapping):
                            add(option, f"{label}|{idx}|", (hp, idx))
            elif isinstance(node, Mapping):
                add(node, f"{label}|", parent)

    add(space, "", None)
    return cs


def decode_flat(space: Mapping[str, Any], flat: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The trainable's config from a flat configuration of `configspace`'s parameters: nested choices
    rebuilt from their index, q-spaced values rounded to their multiple, constants as the spec has them."""
    out: dict[str, Any] = {}
    for name, node in space.items():
        label = f"{prefix}{name}"
        if isinstance(node, Mapping) and len(node) == 1 and next(iter(node)) in _KINDS:
            kind, args = next(iter(node.items()))
            value = flat[label]
            if kind in ("quniform", "qloguniform"):
                value = round(float(value) / float(args[2])) * float(args[2])
            elif kind == "randint":
                value = int(value)
            elif kind == "choice":
                option = args[int(value)]
                value = decode_flat(option, flat, f"{label}|{int(value)}|") if isinstance(option, Mapping) else option
            out[name] = value
        elif isinstance(node, Mapping):
            out[name] = decode_flat(node, flat, f"{label}|")
        else:
            out[name] = node
    return out


def _ray_bohb_trainable(flat: dict, run: dict) -> None:
    """One Ray Tune trial under BOHB: the trainable with the decoded config, reporting each evaluation
    to Tune together with a checkpoint of the trial (written at the next mini-batch boundary), so that a
    trial HyperBand pauses at a rung resumes where it stopped when promoted, not from step 0."""
    import shutil
    import tempfile

    from ray import tune

    torch.set_num_threads(1)
    fn = load(run["trainable"])
    metric, log_path = run["metric"], run["log"]
    params = {**run["fixed"], **decode_flat(run["space"], flat)}
    work = Path(tempfile.mkdtemp(prefix="ray-bohb-"))
    local = work / "trial.pt"
    resume = False
    restored = tune.get_checkpoint()
    if restored is not None:
        with restored.as_directory() as folder:
            shutil.copy(Path(folder) / "trial.pt", local)
        resume = True

    def on_report(step: int, metrics: dict[str, float]) -> None:
        value = metrics.get(metric)
        if value is not None and math.isfinite(value):
            append_log(log_path, value)

    def on_checkpoint(path: str, step: int, metrics: dict[str, float]) -> None:
        value = metrics.get(metric)
        if value is None or not math.isfinite(value):
            return
        folder = Path(tempfile.mkdtemp(dir=work))
        shutil.copy(path, folder / "trial.pt")
        tune.report({metric: value, "step": step}, checkpoint=tune.Checkpoint.from_directory(str(folder)))
        shutil.rmtree(folder, ignore_errors=True)

    trial = AdapterTrial(
        params,
        run["max_steps"],
        on_report,
        checkpoint_path=str(local),
        resume=resume,
        on_checkpoint=on_checkpoint,
    )
    try:
        fn(params, trial)
        trial.flush()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_ray_bohb(spec: Any, seed: int, n_cpus: int, log_path: str, hard: float, max_seconds: float) -> None:
    """Ray Tune's BOHB as its documentation sets it up: TuneBOHB (hpbandster's model-based searcher on a
    ConfigSpace space) with HyperBandForBOHB (max_t the step budget, eta 3), one CPU per trial, trials
    checkpointed at each report so that a paused trial resumes; stops all trials at the hard target."""
    import ray
    from ray import tune
    from ray.tune.schedulers import HyperBandForBOHB
    from ray.tune.search.bohb import TuneBOHB

    mode = "max" if spec.metric.goal == "maximize" else "min"
    run = {
        "trainable": spec.trainable,
        "metric": spec.metric.name,
        "log": log_path,
        "max_steps": spec.budget.max_steps,
        "space": spec.space,
        "fixed": {"seed": spec.seed, **spec.config},
    }

    class HardTarget(tune.Stopper):
        def __init__(self) -> None:
            self.done = False

        def __call__(self, trial_id: str, result: dict) -> bool:
            value = result.get(spec.metric.name)
            if value is not None and past(value, hard, spec):
                self.done = True
            return False

        def stop_all(self) -> bool:
            return self.done

    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # no CSV/JSON/TensorBoard files per trial
    ray.init(num_cpus=n_cpus, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        tuner = tune.Tuner(
            tune.with_resources(tune.with_parameters(_ray_bohb_trainable, run=run), {"cpu": 1}),
            tune_config=tune.TuneConfig(
                metric=spec.metric.name,
                mode=mode,
                search_alg=TuneBOHB(space=configspace(spec.space, seed), metric=spec.metric.name, mode=mode, seed=seed),
                scheduler=HyperBandForBOHB(time_attr="step", max_t=spec.budget.max_steps, reduction_factor=3),
                num_samples=spec.budget.max_trials,
                max_concurrent_trials=n_cpus,
                time_budget_s=max_seconds,
                reuse_actors=True,
            ),
            run_config=tune.RunConfig(
                stop=HardTarget(),
                verbose=0,
                storage_path=str(Path(log_path).parent / "ray"),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
            ),
        )
        tuner.fit()
    finally:
        ray.shutdown()
