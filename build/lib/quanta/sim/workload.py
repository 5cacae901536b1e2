"""A trace job that runs for real: `rate` mini-batches per second for `steps` steps, each mini-batch a
sleep. Used to validate the simulator against `LocalRuntime` (bench/sim_validate.py): the same trace,
scaled to seconds, run both ways."""

from __future__ import annotations

import time
from typing import Any


def train(config: dict[str, Any], trial: Any) -> None:
    period = 1.0 / float(config["rate"])
    for _ in trial.steps(int(config.get("steps", trial.max_steps))):
        time.sleep(period)
