"""Syne Tune on the LCBench surrogate, in simulated time: the peer side of bench/lcbench.py.

Syne Tune's documented simulator path for a blackbox of one's own: a `Blackbox` subclass
(`LCBenchBlackbox`) run by `UserBlackboxBackend` (a `SimulatorBackend`) with a `SimulatorCallback`, so
trials advance on a simulated clock and nothing sleeps. The blackbox answers from the very curves
Quanta's simulator uses (`quanta.sim.lcbench.LCBench`: YAHPO Gym's LCBench surrogate, whole curves in one
batched call, cached); Syne Tune's own YAHPO import downloads the data, which cannot be reached here.
`val_accuracy` is reported as a fraction, `time` as cumulative training seconds (Syne Tune's
elapsed-time attribute), `epoch` 1..52 as the resource.

Contract:
- `LCBenchBlackbox(bench)`: `bench` has `params` (name, kind "int"/"float", low, high, log), `epochs`
  and `curves(configs) -> [curve with .time, .val_accuracy]`; the Syne Tune config space is built from
  `params`. `objective_function(config)` (no fidelity) returns an (epochs, 2) array of
  [val_accuracy, time] per epoch; with `fidelity={"epoch": e}` the dict of epoch e.
- `run_syne_method(method, task, workers, hours, seed, targets, stop_at, data_path, bench=None,
  clock="syne")` runs one Syne Tune method (a key of `METHODS`, or of `LEGACY_METHODS` under Syne Tune
  0.14) until `hours` of simulated time have passed or a report reaches `stop_at`, and returns a
  `PeerRun` (`bench/reach.py`): simulated seconds to the first report at or above each target (None
  if never), the best-so-far curve, trials started, simulated and wall seconds.

Two Syne Tune releases: 0.16 (the main environment) ships `METHODS`; MOBSTER, Hyper-Tune and DyHPO
(`LEGACY_METHODS`) went in 0.15, so they run under 0.14.2, the last release with them, in the peer
environment `bench/peer_env.sh` builds (its pins clash with the main one: numpy < 1.27). They are
pause-and-resume schedulers: run as Syne Tune's own benchmarks run them, with the largest epoch a trial
may reach in its config (`MAX_RESOURCE_ATTR`, set to the next rung by the scheduler, read by the backend)
and a paused trial resumed from its checkpoint (the backend skips the epochs it already ran and charges
only the new ones). `bench/peer_env.py` runs them in that environment from `bench/lcbench.py`.

The two clocks (`CLOCKS`):
- `"syne"`: Syne Tune's simulator as documented and as its own benchmarking runs it. Its backend adds
  the real time the tuner and scheduler spend between backend calls to the simulated clock (so
  BOHB's and BORE's model fits cost simulated time, a run depends on the machine's speed and load, and
  the same seed does not give the same run), and when every worker is busy the tuner looks for results
  every `tuner_sleep_time` = 5 simulated seconds, so a freed worker idles until the next look and a
  stopped trial trains on until it.
- `"exact"`: the clock Quanta's simulator gives Quanta (`app/sim/search_bench.py`): decisions cost no
  simulated time and the tuner looks every `EXACT_POLL_S`, so a run is a function of its seed alone.
  The peer's fairest setup: both of its overheads gone.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from syne_tune.blackbox_repository.blackbox import Blackbox
from syne_tune.blackbox_repository.simulated_tabular_backend import UserBlackboxBackend

from bench.reach import PeerRun, improvements, time_to_target

METRIC = "val_accuracy"
TIME_ATTR = "time"
RESOURCE = "epoch"
MAX_RESOURCE_ATTR = "epochs"  # the config key holding the largest epoch a trial may run to
CLOCKS = ("syne", "exact")
# The exact clock's look period: LCBench's median epochs last 1-4 s (a twentieth of them 0.25-1 s), so a freed worker
# waits at most 0.1 s; shorter costs real time for nothing a report's timing could show.
EXACT_POLL_S = 0.1


def syne_space(params: Sequence[Any]) -> dict[str, Any]:
    """Syne Tune domains for LCBench's hyperparameters (log-scaled where the config space says so)."""
    from syne_tune.config_space import lograndint, loguniform, randint, uniform

    out: dict[str, Any] = {}
    for p in params:
        if p.kind == "int":
            out[p.name] = (lograndint if p.log else randint)(int(p.low), int(p.high))
        elif p.kind == "float":
            out[p.name] = (loguniform if p.log else uniform)(float(p.low), float(p.high))
        else:
            raise ValueError(f"params: {p.name} has unknown kind {p.kind!r}")
    return out


class ExactClockBackend(UserBlackboxBackend):
    """Syne Tune's `UserBlackboxBackend` on the exact clock (module docstring). Its `SimulatorBackend`
    starts each method by advancing the simulated clock by the real time spent outside it since its last
    call (`_advance_by_outside_time`: the tuner loop, the scheduler's `suggest` and `on_trial_result`);
    here that one step charges nothing. The hook is private to Syne Tune (0.16 here), so
    `tests/bench/test_syne_lcbench.py` fails if a release renames it rather than letting the charge come
    back unnoticed."""

    def _advance_by_outside_time(self) -> None:
        pass  # decisions are free on Quanta's clock: the peer gets the same


class LCBenchBlackbox(Blackbox):
    """LCBench curves as a Syne Tune `Blackbox` with one fidelity, `epoch` (see the module docstring)."""

    def __init__(self, bench: Any):
        from syne_tune.config_space import randint

        self.bench = bench
        self.epochs = int(bench.epochs)
        self._names = [p.name for p in bench.params]
        super().__init__(
            configuration_space=syne_space(bench.params),
            fidelity_space={RESOURCE: randint(1, self.epochs)},
            objectives_names=[METRIC, TIME_ATTR],
        )

    @property
    def fidelity_values(self) -> np.ndarray:
        return np.arange(1, self.epochs + 1)

    def _objective_function(
        self, configuration: Mapping[str, Any], fidelity: Mapping[str, Any] | None = None, seed: int | None = None
    ) -> Any:
        # Syne Tune adds keys of its own (e.g. the max-resource attribute): the surrogate gets the seven.
        curve = self.bench.curves([{k: configuration[k] for k in self._names}])[0]
        table = np.column_stack([np.asarray(curve.val_accuracy, float), np.asarray(curve.time, float)])
        if fidelity is None:
            return table
        e = int(fidelity[RESOURCE])
        if not 1 <= e <= self.epochs:
            raise ValueError(f"fidelity.{RESOURCE}: {e} is outside 1..{self.epochs}")
        return {METRIC: float(table[e - 1, 0]), TIME_ATTR: float(table[e - 1, 1])}


def _not_deprecated(record: logging.LogRecord) -> bool:
    """Drops Syne Tune 0.14's warning that the legacy schedulers are deprecated (logged at every
    suggestion: thousands of lines a run)."""
    return "is deprecated and will be removed" not in record.getMessage()


def _schedulers() -> dict[str, Callable[[dict[str, Any], int, int], Any]]:
    """Syne Tune 0.16's baselines by our names: (config space, seed, epochs) -> scheduler. ASHA and its
    model-based variants stop trials (Syne Tune's asynchronous successive halving has no pause);
    `hyperband` is ASHA over all of Hyperband's brackets (grace 1, 3, 9, 27 epochs at eta 3)."""
    from syne_tune.optimizer import baselines as b

    def mf(cls: Any, **kw: Any) -> Callable[[dict[str, Any], int, int], Any]:
        return lambda space, seed, epochs: cls(
            space, metric=METRIC, time_attr=RESOURCE, max_t=epochs, do_minimize=False, random_seed=seed, **kw
        )

    def sf(cls: Any) -> Callable[[dict[str, Any], int, int], Any]:
        return lambda space, seed, epochs: cls(space, metric=METRIC, do_minimize=False, random_seed=seed)

    return {
        "random": lambda space, seed, epochs: b.RandomSearch(
            space, metrics=[METRIC], do_minimize=False, random_seed=seed
        ),
        "tpe": sf(b.TPE),
        "asha": mf(b.ASHA),
        "hyperband": mf(b.ASHA, brackets=4),
        "bohb": mf(b.BOHB),
        "asha_bore": mf(b.ASHABORE),
        "asha_cqr": mf(b.ASHACQR),
    }


METHODS = ("random", "tpe", "asha", "hyperband", "bohb", "asha_bore", "asha_cqr")


def _legacy_schedulers() -> dict[str, Callable[[dict[str, Any], int, int], Any]]:
    """Syne Tune 0.14's model-based multi-fidelity methods by our names, set up as its own benchmarks set
    them up (`benchmarking/examples/benchmark_dyhpo/baselines.py`: MOBSTER and Hyper-Tune in promotion
    mode, DyHPO with its own rung system) with the arguments its `default_arguments` passes: metric, mode,
    resource and max-resource attributes, seed. Every other knob is the published default (MOBSTER's
    joint multi-task GP, Hyper-Tune's independent GPs, grace period 1 epoch, eta 3; DyHPO's linear rungs
    1, 3, 5, ... and its SH-promotion probability). `debug_log` off only silences the searchers' logs."""
    from syne_tune.optimizer import legacy_baselines as lb

    def mf(cls: Any, **kw: Any) -> Callable[[dict[str, Any], int, int], Any]:
        return lambda space, seed, epochs: cls(
            space,
            metric=METRIC,
            mode="max",
            resource_attr=RESOURCE,
            max_resource_attr=MAX_RESOURCE_ATTR,
            random_seed=seed,
            search_options={"debug_log": False},
            **kw,
        )

    return {
        "mobster": mf(lb.MOBSTER, type="promotion"),
        "hypertune": mf(lb.HyperTune, type="promotion"),
        "dyhpo": mf(lb.DyHPO),
    }


# Only in Syne Tune 0.14 (the peer environment): pause-and-resume methods (see the module docstring).
LEGACY_METHODS = ("mobster", "hypertune", "dyhpo")


def require_syne_014(method: str) -> None:
    """Raises ValueError naming `method` unless this is Syne Tune 0.14 (the peer environment), the only
    release with the methods only it ships."""
    import syne_tune

    if not syne_tune.__version__.startswith("0.14"):
        raise ValueError(
            f"method: {method!r} needs Syne Tune 0.14 (the peer environment: bench/peer_env.sh), "
            f"this is {syne_tune.__version__}"
        )


def run_syne_method(
    method: str,
    task: str,
    *,
    workers: int,
    hours: float,
    seed: int,
    targets: Mapping[str, float],
    stop_at: float | None = None,
    data_path: str | Path | None = None,
    bench: Any = None,
    clock: str = "syne",
) -> PeerRun:
    """One Syne Tune search on the simulated clock (see the module docstring). `bench` replaces the real
    surrogate (`quanta.sim.lcbench.load_lcbench(task, data_path)`), e.g. with a stand-in in tests; `clock`
    is one of `CLOCKS`."""
    import os

    from syne_tune import StoppingCriterion, Tuner
    from syne_tune.backend.simulator_backend.simulator_callback import SimulatorCallback
    from syne_tune.constants import ST_TUNER_TIME

    legacy = method in LEGACY_METHODS
    if legacy:
        require_syne_014(method)
        factories = _legacy_schedulers()
    else:
        factories = _schedulers()
    if method not in factories:
        known = ", ".join([*METHODS, *LEGACY_METHODS])
        raise ValueError(f"method: unknown {method!r} (known: {known})")
    if clock not in CLOCKS:
        raise ValueError(f"clock: unknown {clock!r} (known: {', '.join(CLOCKS)})")
    if bench is None:
        from quanta.sim.lcbench import load_lcbench

        bench = load_lcbench(task, None if data_path is None else str(data_path))
    budget_s = hours * 3600.0
    # Syne Tune's Bracket picks a trial's bracket with numpy's global generator: seeded for determinism.
    np.random.seed(seed)
    blackbox = LCBenchBlackbox(bench)
    # Pause-and-resume methods stop each run at the rung the scheduler writes into the config.
    resource = {"max_resource_attr": MAX_RESOURCE_ATTR} if legacy else {}
    backend = (
        UserBlackboxBackend(blackbox=blackbox, elapsed_time_attr=TIME_ATTR, seed=seed, **resource)
        if clock == "syne"
        else ExactClockBackend(
            blackbox=blackbox, elapsed_time_attr=TIME_ATTR, seed=seed, tuner_sleep_time=EXACT_POLL_S, **resource
        )
    )
    space = (
        blackbox.configuration_space_with_max_resource_attr(MAX_RESOURCE_ATTR)
        if legacy
        else dict(blackbox.configuration_space)
    )
    scheduler = factories[method](space, seed, blackbox.epochs)
    # The simulated budget is a threshold on the simulated tuner time each result carries (what
    # SimulatorCallback turns max_wallclock_time into), given directly so that the metric threshold
    # survives: SimulatorCallback rebuilds a criterion that has max_wallclock_time without it.
    # StoppingCriterion stops on values strictly above a threshold: the largest float below stop_at
    # makes it stop at a report reaching stop_at exactly, as Quanta's stop_on_target does.
    limits = {ST_TUNER_TIME: budget_s}
    if stop_at is not None:
        limits[METRIC] = float(np.nextafter(stop_at, -np.inf))
    callback = SimulatorCallback()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="syne-lcbench-") as folder:
        old = os.environ.get("SYNETUNE_FOLDER")
        os.environ["SYNETUNE_FOLDER"] = folder  # Syne Tune's run folder (results CSV), removed afterwards
        level = logging.getLogger("syne_tune").level
        logging.getLogger("syne_tune").setLevel(logging.WARNING)
        tuner_log = logging.getLogger("syne_tune.tuner")
        tuner_log.addFilter(_not_deprecated)
        try:
            tuner = Tuner(
                trial_backend=backend,
                scheduler=scheduler,
                stop_criterion=StoppingCriterion(max_metric_value=limits),
                n_workers=workers,
                sleep_time=0,
                results_update_interval=1e9,
                print_update_interval=1e9,
                callbacks=[callback],
                tuner_name=f"lcbench-{task}-{method}-{seed}",
                save_tuner=False,
            )
            with contextlib.redirect_stdout(io.StringIO()):  # Syne Tune prints its progress table
                tuner.run()
        finally:
            logging.getLogger("syne_tune").setLevel(level)
            tuner_log.removeFilter(_not_deprecated)
            if old is None:
                os.environ.pop("SYNETUNE_FOLDER", None)
            else:
                os.environ["SYNETUNE_FOLDER"] = old
    wall = time.perf_counter() - t0
    reports = sorted(
        (float(r[ST_TUNER_TIME]), float(r[METRIC]))
        for r in callback.results
        if METRIC in r and float(r[ST_TUNER_TIME]) <= budget_s
    )
    trial_ids = {r["trial_id"] for r in callback.results if "trial_id" in r}
    return PeerRun(
        method=method,
        time_to_target={k: time_to_target(reports, v) for k, v in targets.items()},
        best_so_far=improvements(reports),
        started=len(trial_ids),
        sim_seconds=min(budget_s, reports[-1][0]) if reports else 0.0,
        wall_seconds=wall,
    )
