"""Syne Tune's multi-objective methods on the LCBench surrogate, in simulated time: the peer side of
bench/lcbench_mo.py.

The same path as `bench/syne_lcbench.py` (a `Blackbox` of the very curves Quanta's simulator replays,
Syne Tune's `UserBlackboxBackend` on the exact clock: decisions cost no simulated time and the tuner looks
for results every `EXACT_POLL_S`), with two objectives: validation accuracy (max) and `train_time_s`, the
training time to the last epoch as measured after each epoch (cumulative seconds / epochs so far x 52:
`quanta.sim.search_bench.train_times`, what Quanta's simulated trial reports). Syne Tune 0.16 takes one
`do_minimize` for every metric, so its schedulers are given `val_error` = 1 - val_accuracy and
`train_time_s`, both minimised; the accounting reads val_accuracy.

The methods Syne Tune 0.16 ships that take several objectives (`MO_METHODS`), each as its documentation
and examples set it up, every knob at its default:
- `moasha`: `MOASHA` (multi-objective asynchronous successive halving: non-dominated sorting with an
  epsilon-net at each rung; grace period 1 epoch, reduction factor 3, one bracket, `max_t` 52 epochs;
  it stops the trials it does not promote).
- `morea`: `MultiObjectiveRegularizedEvolution` (population 100, sample 10, non-dominated priority)
  under Syne Tune's `SingleFidelityScheduler`: every trial trains all 52 epochs.
  Both read their non-dominated sort through `ranked_priority()`: as 0.16 ships it, the sort's order is
  read as if it were each trial's priority (see there), which makes MO-ASHA stop trials that dominate
  their rung. `moasha_asis` runs MO-ASHA exactly as shipped, for the record.
- `random`: random search with both metrics (single fidelity): `SingleFidelityScheduler` with
  `MultiObjectiveRandomSearcher`, what its searcher factory builds for "random_search" with two metrics
  (0.16's `RandomSearch` baseline passes a single-objective searcher, which the scheduler refuses).
- `ehvi`: `EHVI` (BoTorch's qLogEHVI on one GP per objective, single fidelity; its acquisition
  optimised by gradient, as shipped). It needs BoTorch (`pip install 'quanta[ehvi]'`), which the main
  environment does not install: `ehvi_missing()` says so, and the benchmark leaves it out of `all` then.
`MORandomScalarizationBayesOpt` and `MOLinearScalarizationBayesOpt` are gone from 0.16's baselines (the
searcher behind them imports a module the release no longer has), and 0.16 has no NSGA-II. From Syne Tune
0.14.2, in the peer environment (`bench/peer_env.py`):
- `rsbo`: `MORandomScalarizationBayesOpt` (`_legacy_schedulers`). Its `NSGA2` refuses more than one
  worker, and `MOLinearScalarizationBayesOpt` sums the objectives with fixed weights (here an error and a
  number of seconds), so neither runs.

`run_syne_mo(method, task, workers, hours, seed, reference, goal, ...)` runs one search until `hours` of
simulated time have passed or the front of its reports dominates `goal` of hypervolume up to `reference`
(accuracy, seconds), or until its wall-time cap, and returns every report as (seconds, val_accuracy,
train_time_s) in time order.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.reach import FrontTracker
from bench.syne_lcbench import (
    EXACT_POLL_S,
    RESOURCE,
    TIME_ATTR,
    ExactClockBackend,
    LCBenchBlackbox,
    _not_deprecated,
    require_syne_014,
)

METRIC = "val_accuracy"
ERROR = "val_error"  # 1 - val_accuracy: what Syne Tune minimises
TRAIN_TIME = "train_time_s"
MO_METHODS = ("moasha", "morea", "random", "ehvi", "moasha_asis")


def ehvi_missing() -> str | None:
    """Why `ehvi` cannot run here, or None. Syne Tune's EHVI module imports BoTorch, GPyTorch and
    linear_operator inside a `try` that only logs an ImportError, so a missing piece (BoTorch 0.15 also
    needs `pyre_extensions`) would surface mid-run as a NameError; this imports the same names first.
    BoTorch 0.18's fused log-EHVI refuses the float32 tensors Syne Tune 0.16 hands it ("expected scalar
    type Double but found Float"); `quanta[ehvi]` pins the versions measured with."""
    try:
        import botorch  # type: ignore[import-not-found]
        from botorch.acquisition.multi_objective import (  # type: ignore[import-not-found]  # noqa: F401
            qLogExpectedHypervolumeImprovement,
        )
        from linear_operator.utils.errors import NotPSDError  # type: ignore[import-not-found]  # noqa: F401
    except ImportError as exc:
        return f"Syne Tune's EHVI needs botorch, gpytorch and linear_operator (pip install 'quanta[ehvi]'): {exc}"
    major_minor = tuple(int(x) for x in str(botorch.__version__).split(".")[:2])
    if major_minor >= (0, 18):
        return f"Syne Tune 0.16's EHVI fails on botorch {botorch.__version__} (float32 inputs); install 'quanta[ehvi]'"
    return None


class LCBenchMOBlackbox(LCBenchBlackbox):
    """`LCBenchBlackbox` with two more objectives per epoch: `val_error` and `train_time_s`."""

    def __init__(self, bench: Any):
        super().__init__(bench)
        self.objectives_names = [METRIC, TIME_ATTR, ERROR, TRAIN_TIME]

    def _objective_function(
        self, configuration: Mapping[str, Any], fidelity: Mapping[str, Any] | None = None, seed: int | None = None
    ) -> Any:
        curve = self.bench.curves([{k: configuration[k] for k in self._names}])[0]
        acc = np.asarray(curve.val_accuracy, float)
        secs = np.asarray(curve.time, float)
        train = secs / np.arange(1, len(secs) + 1) * self.epochs
        table = np.column_stack([acc, secs, 1.0 - acc, train])
        if fidelity is None:
            return table
        e = int(fidelity[RESOURCE])
        if not 1 <= e <= self.epochs:
            raise ValueError(f"fidelity.{RESOURCE}: {e} is outside 1..{self.epochs}")
        return dict(zip(self.objectives_names, (float(v) for v in table[e - 1]), strict=True))


def ranked_priority() -> Any:
    """Syne Tune's non-dominated priority as its callers read it. `MOPriority.__call__` promises "a vector
    ... that gives priority for the different elements (lower elements are picked first)", and MOASHA's
    rungs (`asha.Bracket`: the newcomer's rank is that of `priorities[-1]`) and MO-REA's parent choice
    (`score = priorities[i]`) read it so; 0.16's `NonDominatedPriority` returns the sorted order itself
    (the indices, best first), so a newcomer that dominates its whole rung can be stopped and one
    dominated by it promoted. This returns each element's place in that order (the inverse permutation):
    the same sort, non-dominated fronts with Syne Tune's epsilon-net, read as documented."""
    from syne_tune.optimizer.schedulers.multiobjective.multiobjective_priority import NonDominatedPriority

    class RankedNonDominatedPriority(NonDominatedPriority):  # type: ignore[misc]
        def priority_unsafe(self, objectives: np.ndarray) -> np.ndarray:
            order = np.asarray(super().priority_unsafe(objectives), dtype=int)
            ranks = np.empty(len(order), dtype=int)
            ranks[order] = np.arange(len(order))
            return ranks

    return RankedNonDominatedPriority()


def _schedulers() -> dict[str, Callable[[dict[str, Any], int, int], Any]]:
    """Syne Tune 0.16's multi-objective methods by our names: (config space, seed, epochs) -> scheduler.
    MO-ASHA and MO-REA get `ranked_priority()` (their default sort, read as documented); `moasha_asis`
    is MO-ASHA with 0.16's priority as it ships, kept to show what that costs."""
    from syne_tune.optimizer import baselines as b
    from syne_tune.optimizer.schedulers.multiobjective import MultiObjectiveRegularizedEvolution
    from syne_tune.optimizer.schedulers.multiobjective.moasha import MOASHA
    from syne_tune.optimizer.schedulers.searchers.random_searcher import MultiObjectiveRandomSearcher
    from syne_tune.optimizer.schedulers.single_fidelity_scheduler import SingleFidelityScheduler

    metrics = [ERROR, TRAIN_TIME]
    return {
        "moasha": lambda space, seed, epochs: MOASHA(
            space,
            metrics=metrics,
            do_minimize=True,
            time_attr=RESOURCE,
            max_t=epochs,
            multiobjective_priority=ranked_priority(),
            random_seed=seed,
        ),
        "moasha_asis": lambda space, seed, epochs: MOASHA(
            space, metrics=metrics, do_minimize=True, time_attr=RESOURCE, max_t=epochs, random_seed=seed
        ),
        "morea": lambda space, seed, epochs: SingleFidelityScheduler(
            space,
            metrics=metrics,
            do_minimize=True,
            searcher=MultiObjectiveRegularizedEvolution(
                space, multiobjective_priority=ranked_priority(), random_seed=seed
            ),
            random_seed=seed,
        ),
        # baselines.RandomSearch hands a single-objective searcher to a scheduler that refuses it with two
        # metrics (0.16): the scheduler as its searcher factory builds it for "random_search" instead.
        "random": lambda space, seed, epochs: SingleFidelityScheduler(
            space,
            metrics=metrics,
            do_minimize=True,
            searcher=MultiObjectiveRandomSearcher(space, random_seed=seed),
            random_seed=seed,
        ),
        "ehvi": lambda space, seed, epochs: b.EHVI(space, metrics=metrics, do_minimize=True, random_seed=seed),
    }


def _legacy_schedulers() -> dict[str, Callable[[dict[str, Any], int, int], Any]]:
    """Syne Tune 0.14.2's multi-objective method that 0.16 no longer ships, by our name (the peer
    environment, `bench/peer_env.py`), at its published defaults under Syne Tune's FIFO scheduler (every
    trial trains all 52 epochs): `rsbo` (`MORandomScalarizationBayesOpt`: one GP per objective, each
    suggestion minimising the lower confidence bound of a random linear scalarisation; its searcher
    sees each trial's latest report). 0.14.2's `NSGA2` is not here: its searcher refuses to suggest while
    a trial is pending ("NSGA-2 does not support asynchronous scheduling ... set num_workers = 1"), so it
    cannot run with the benchmark's 4 workers. `debug_log` off only silences the searcher's logs."""
    from syne_tune.optimizer import legacy_baselines as lb

    metrics = [ERROR, TRAIN_TIME]
    return {
        "rsbo": lambda space, seed, epochs: lb.MORandomScalarizationBayesOpt(
            space, metric=metrics, mode="min", random_seed=seed, search_options={"debug_log": False}
        ),
    }


# Only in Syne Tune 0.14.2 (the peer environment).
LEGACY_MO_METHODS = ("rsbo",)


@dataclass
class MORun:
    """One multi-objective search on the simulated clock: its reports (seconds, val_accuracy,
    train_time_s) in time order up to its end, trials started, simulated and wall seconds, and whether it
    ended at its hypervolume goal (`reached`) rather than its budget, or was `cut` at its wall-time cap
    before either (its `sim_seconds` are then how far it got)."""

    reports: list[tuple[float, float, float]] = field(default_factory=list)
    started: int = 0
    sim_seconds: float = 0.0
    wall_seconds: float = 0.0
    reached: bool = False
    cut: bool = False


def run_syne_mo(
    method: str,
    task: str,
    *,
    workers: int,
    hours: float,
    seed: int,
    reference: tuple[float, float],
    goal: float,
    data_path: str | Path | None = None,
    bench: Any = None,
    max_wall_s: float | None = None,
) -> MORun:
    """One Syne Tune multi-objective search (module docstring) on the exact clock. `bench` replaces the
    real surrogate (tests). `max_wall_s` caps the wall time: a run still short of its goal and budget
    then ends `cut` (a GP-based method can take hours of CPU on a hard task). Raises ValueError naming an
    unknown method, ImportError for `ehvi` without BoTorch."""
    from syne_tune import StoppingCriterion, Tuner
    from syne_tune.backend.simulator_backend.simulator_callback import SimulatorCallback
    from syne_tune.constants import ST_TUNER_TIME

    if method in LEGACY_MO_METHODS:
        require_syne_014(method)
        factories = _legacy_schedulers()
    elif method in MO_METHODS:
        factories = _schedulers()
    else:
        raise ValueError(f"method: unknown {method!r} (known: {', '.join((*MO_METHODS, *LEGACY_MO_METHODS))})")
    if method == "ehvi" and (why := ehvi_missing()) is not None:
        raise ImportError(why)
    if bench is None:
        from quanta.sim.lcbench import load_lcbench

        bench = load_lcbench(task, None if data_path is None else str(data_path))
    budget_s = hours * 3600.0
    np.random.seed(seed)  # MOASHA samples configurations and brackets from numpy's global generator
    blackbox = LCBenchMOBlackbox(bench)
    backend = ExactClockBackend(
        blackbox=blackbox, elapsed_time_attr=TIME_ATTR, seed=seed, tuner_sleep_time=EXACT_POLL_S
    )
    scheduler = factories[method](dict(blackbox.configuration_space), seed, blackbox.epochs)
    tracker = FrontTracker(reference)
    run = MORun()

    class Watch(SimulatorCallback):
        """Keeps every report within the budget and notes when the front reaches the goal."""

        def on_trial_result(self, trial: Any, status: str, result: dict[str, Any], decision: str) -> None:
            super().on_trial_result(trial, status, result, decision)
            at = float(result[ST_TUNER_TIME])
            if METRIC in result and at <= budget_s:
                point = (at, float(result[METRIC]), float(result[TRAIN_TIME]))
                run.reports.append(point)
                if tracker.add(point[1], point[2]) >= goal:
                    run.reached = True
            if max_wall_s is not None and not run.reached and time.perf_counter() - t0 > max_wall_s:
                run.cut = True

    @dataclass
    class UntilGoal(StoppingCriterion):
        """Syne Tune's criterion (the simulated budget) or the hypervolume goal, whichever comes first."""

        def __call__(self, status: Any) -> bool:
            return run.reached or run.cut or super().__call__(status)

    callback = Watch()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="syne-lcbench-mo-") as folder:
        old = os.environ.get("SYNETUNE_FOLDER")
        os.environ["SYNETUNE_FOLDER"] = folder
        level = logging.getLogger("syne_tune").level
        logging.getLogger("syne_tune").setLevel(logging.WARNING)
        tuner_log = logging.getLogger("syne_tune.tuner")
        tuner_log.addFilter(_not_deprecated)  # 0.14's legacy schedulers warn at every suggestion
        try:
            tuner = Tuner(
                trial_backend=backend,
                scheduler=scheduler,
                stop_criterion=UntilGoal(max_metric_value={ST_TUNER_TIME: budget_s}),
                n_workers=workers,
                sleep_time=0,
                results_update_interval=1e9,
                print_update_interval=1e9,
                callbacks=[callback],
                tuner_name=f"lcbench-mo-{task}-{method}-{seed}",
                save_tuner=False,
            )
            with contextlib.redirect_stdout(io.StringIO()):
                tuner.run()
        finally:
            logging.getLogger("syne_tune").setLevel(level)
            tuner_log.removeFilter(_not_deprecated)
            if old is None:
                os.environ.pop("SYNETUNE_FOLDER", None)
            else:
                os.environ["SYNETUNE_FOLDER"] = old
    run.wall_seconds = time.perf_counter() - t0
    run.reports.sort()
    run.started = len({r["trial_id"] for r in callback.results if "trial_id" in r})
    run.sim_seconds = min(budget_s, run.reports[-1][0]) if run.reports else 0.0
    return run
