"""DEHB on the LCBench surrogate, in simulated time on the exact clock: a peer in bench/lcbench.py.

DEHB (`dehb` 0.1.2, Awad et al. 2021: differential evolution inside Hyperband's brackets) through its
ask/tell interface, driven by a simulated event loop of this module's own with `workers` workers, on
the exact clock the other LCBench systems get (`bench/syne_lcbench.py`, `CLOCKS`):
- DEHB's fidelity is the number of epochs: min 1, max the task's 52, eta 3 (DEHB's default), so its
  rungs are 52 / 3**k = 1.93, 5.78, 17.3 and 52 epochs; a job runs `int(fidelity)` epochs (1, 5, 17,
  52), the mapping the hposuite interface to DEHB uses for integer fidelities.
- A job (a configuration at a fidelity) trains from scratch: DEHB evaluates a promoted configuration
  again at the higher fidelity, it does not continue the lower one. It holds a worker from its start
  until the surrogate's cumulative time of its last epoch has passed, and reports every epoch e it
  trains at start + the surrogate's time of epoch e, as every other system's trials report each epoch.
- When a job ends DEHB is told fitness = 1 - val_accuracy of its last epoch (DEHB minimises) and
  cost = its training seconds. Decisions take no simulated time: every job ending at an instant is
  told, then each freed worker starts DEHB's next job at that same instant (DEHB's own `run` loop
  collects all finished jobs before submitting new ones).
- The search stops at the first report at or above `stop_at`, or after `hours` of simulated time;
  reports later than that do not count. The same seed gives the same run, bit for bit.

DEHB needs numpy < 2, so this runs in the peer environment (`bench/peer_env.sh`); `bench/peer_env.py`
runs it from `bench/lcbench.py` as system `dehb_exact`.

Contract:
- `dehb_space(params, seed)`: LCBench's hyperparameters as a ConfigSpace (log scales and integer
  bounds kept), as `syne_lcbench.syne_space` gives them to Syne Tune.
- `run_dehb(task, workers, hours, seed, targets, stop_at, data_path, bench=None) -> PeerRun` (the
  result type of Syne Tune's runs too): simulated seconds to each target, best-so-far curve, jobs started,
  simulated and wall seconds. `bench` replaces the real surrogate (tests use a stand-in).
- `simulate(bench, workers, budget_s, seed, stop_at) -> DehbTrace`: the event loop alone, with every
  job's start, epochs and reports, for tests.
"""

from __future__ import annotations

import heapq
import logging
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.reach import PeerRun, improvements, time_to_target

ETA = 3  # DEHB's default
MIN_EPOCHS = 1


def dehb_space(params: Sequence[Any], seed: int) -> Any:
    """A ConfigSpace of LCBench's hyperparameters (log-scaled where the config space says so)."""
    import ConfigSpace as CS

    cs = CS.ConfigurationSpace(seed=seed)
    for p in params:
        if p.kind == "int":
            hp: Any = CS.UniformIntegerHyperparameter(p.name, lower=int(p.low), upper=int(p.high), log=bool(p.log))
        elif p.kind == "float":
            hp = CS.UniformFloatHyperparameter(p.name, lower=float(p.low), upper=float(p.high), log=bool(p.log))
        else:
            raise ValueError(f"params: {p.name} has unknown kind {p.kind!r}")
        cs.add(hp)
    return cs


@dataclass
class Job:
    """One DEHB job: a configuration trained from scratch for `epochs` epochs from `start`."""

    config: dict[str, Any]
    fidelity: float
    epochs: int
    start: float
    end: float
    reports: list[tuple[float, float]]  # (simulated s, val_accuracy) of each epoch


@dataclass
class DehbTrace:
    """The event loop's record: every job started, the reports that count, where the search stopped."""

    jobs: list[Job] = field(default_factory=list)
    reports: list[tuple[float, float]] = field(default_factory=list)
    stopped_at: float = 0.0


def _quiet_dehb(**kwargs: Any) -> Any:
    """A DEHB optimiser that logs nothing: its loguru logger writes to stdout and to a file in
    `output_path` (a temporary folder here), and `save_freq="end"` keeps ask/tell from writing
    its history and incumbent at every new best (only `run`, unused here, saves at its end)."""
    from dehb import DEHB
    from loguru import logger

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # ConfigSpace 1.x renamed DEHB's calls
        opt = DEHB(**kwargs, save_freq="end", log_level="ERROR")
    logger.disable("dehb")
    return opt


def simulate(
    bench: Any,
    *,
    workers: int,
    budget_s: float,
    seed: int,
    stop_at: float | None = None,
    optimizer: Any = None,
) -> DehbTrace:
    """DEHB's search on the simulated clock (module docstring). `bench` has `params`, `epochs` and
    `curves(configs) -> [curve with .time, .val_accuracy]`. `optimizer` replaces DEHB (tests): its
    `ask()` returns a dict with "config" (a mapping holding the params) and "fidelity" (epochs), and
    `tell(info, {"fitness", "cost"})` takes back what `ask` returned."""
    if workers < 1 or budget_s <= 0:
        raise ValueError("workers must be >= 1 and budget_s > 0")
    names = [p.name for p in bench.params]
    epochs_max = int(bench.epochs)
    trace = DehbTrace()
    first_hit = float("inf")  # the first report at or above stop_at among the jobs started so far
    with tempfile.TemporaryDirectory(prefix="dehb-lcbench-") as folder:
        opt = optimizer or _quiet_dehb(
            cs=dehb_space(bench.params, seed),
            min_fidelity=MIN_EPOCHS,
            max_fidelity=epochs_max,
            eta=ETA,
            n_workers=1,  # no Dask: the workers are this loop's
            seed=seed,
            output_path=folder,
        )
        running: list[tuple[float, int, dict[str, Any], Job]] = []  # (end, sequence, DEHB job info, job)

        def start(now: float) -> None:
            nonlocal first_hit
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                info = opt.ask()
            config = {k: info["config"][k] for k in names}
            epochs = min(epochs_max, max(MIN_EPOCHS, int(info["fidelity"])))
            curve = bench.curves([config])[0]
            reports = [(now + float(curve.time[e]), float(curve.val_accuracy[e])) for e in range(epochs)]
            job = Job(config, float(info["fidelity"]), epochs, now, reports[-1][0], reports)
            trace.jobs.append(job)
            if stop_at is not None:
                first_hit = min([first_hit, *(t for t, v in reports if v >= stop_at)])
            heapq.heappush(running, (job.end, len(trace.jobs), info, job))

        for _ in range(workers):
            start(0.0)
        while True:
            now = running[0][0]
            if first_hit <= now or now > budget_s:
                break
            ended = []
            while running and running[0][0] == now:
                ended.append(heapq.heappop(running))
            for _, _, info, job in ended:
                acc = job.reports[-1][1]
                opt.tell(info, {"fitness": 1.0 - acc, "cost": job.end - job.start})
            for _ in ended:
                start(now)
    trace.stopped_at = min(first_hit, budget_s)
    trace.reports = sorted((t, v) for job in trace.jobs for t, v in job.reports if t <= trace.stopped_at)
    return trace


def run_dehb(
    task: str,
    *,
    workers: int,
    hours: float,
    seed: int,
    targets: Mapping[str, float],
    stop_at: float | None = None,
    data_path: str | Path | None = None,
    bench: Any = None,
) -> PeerRun:
    """One DEHB search on the simulated clock (module docstring); `bench` replaces the real surrogate
    (`quanta.sim.lcbench.load_lcbench(task, data_path)`)."""
    if bench is None:
        from quanta.sim.lcbench import load_lcbench

        bench = load_lcbench(task, None if data_path is None else str(data_path))
    logging.getLogger("distributed").setLevel(logging.ERROR)  # dehb imports Dask's client at import
    t0 = time.perf_counter()
    trace = simulate(bench, workers=workers, budget_s=hours * 3600.0, seed=seed, stop_at=stop_at)
    wall = time.perf_counter() - t0
    return PeerRun(
        method="dehb",
        time_to_target={k: time_to_target(trace.reports, v) for k, v in targets.items()},
        best_so_far=improvements(trace.reports),
        started=len(trace.jobs),
        sim_seconds=min(trace.stopped_at, trace.reports[-1][0]) if trace.reports else 0.0,
        wall_seconds=wall,
    )
