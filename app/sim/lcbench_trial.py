"""An LCBench configuration as a real trainable: each epoch lasts the surrogate's epoch time (times
`time_scale`) of sleeping, then reports the surrogate's `val_accuracy` (a fraction).

This is the trainable named by the specs `quanta.sim.search_bench` builds. In the simulator it never runs
(`SimRuntime` replays the same curve on its virtual clock); run for real (`quanta run`, LocalRuntime)
with a small `time_scale` it is the live counterpart the simulator's figures can be checked against,
as `quanta.sim.workload` is for traces. Config: the 7 hyperparameters, `task`, optionally `time_scale`
(default 1.0), `data_path` (see `quanta.sim.lcbench.data_dir`) and `report`: further metrics to report,
`["train_time_s"]` for a multi-objective search (the surrogate's seconds per epoch so far times the
epochs: `quanta.sim.search_bench.train_times`).

Loading a task's surrogate takes ~1.8 s, which a live trial would otherwise pay at every start: name the
tasks in `QUANTA_LCBENCH_PRELOAD` (comma-separated) and the trial template loads them once in `prepare()`,
so forked trials share them (the model runs single-threaded, so no thread pool is lost in the fork).
"""

from __future__ import annotations

import os
import time
from typing import Any

from quanta.sim.lcbench import LCBench, load_lcbench

_TASKS: dict[tuple[str, str | None], LCBench] = {}  # one surrogate per task in this process
PRELOAD_ENV = "QUANTA_LCBENCH_PRELOAD"


def prepare(config: dict[str, Any] | None = None) -> None:
    """Load the surrogates of the tasks named in `QUANTA_LCBENCH_PRELOAD` (the template calls this once)."""
    for task in filter(None, (t.strip() for t in os.environ.get(PRELOAD_ENV, "").split(","))):
        if (task, None) not in _TASKS:
            _TASKS[task, None] = load_lcbench(task, None)


def train(config: dict[str, Any], trial: Any) -> None:
    key = (str(config["task"]), config.get("data_path"))
    bench = _TASKS.get(key) or _TASKS.setdefault(key, load_lcbench(*key))
    curve = bench.curve(config)
    scale = float(config.get("time_scale", 1.0))
    report = list(config.get("report") or ())
    if report not in ([], ["train_time_s"]):
        raise ValueError(f"config.report: only ['train_time_s'] can be reported besides val_accuracy, got {report}")
    done = 0.0
    for step in trial.steps(min(trial.max_steps, curve.epochs)):
        time.sleep(max(0.0, (curve.time[step] - done) * scale))
        done = curve.time[step]
        if report:
            train_time_s = curve.time[step] / (step + 1) * curve.epochs
            trial.report(val_accuracy=curve.val_accuracy[step], train_time_s=train_time_s)
        else:
            trial.report(val_accuracy=curve.val_accuracy[step])
