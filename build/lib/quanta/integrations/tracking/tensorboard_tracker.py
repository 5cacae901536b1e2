"""TensorBoard: one folder of event files per trial, `{dir}/{search}-{id}/trial-{n}`, written with
`torch.utils.tensorboard.SummaryWriter` (needs the `tensorboard` package). Each metric is a scalar
over steps; the configuration is written as text when the run starts and, when the trial ends, as the
run's hyperparameters with its last value of each metric (TensorBoard's HParams tab compares trials)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from quanta.integrations.tracking.base import TrialInfo, flat_params


class TensorBoardTracker:
    def __init__(self, folder: Path):
        from torch.utils.tensorboard import SummaryWriter  # imports tensorboard: ImportError without it

        self._writer_class = SummaryWriter
        self.folder = folder
        self._writers: dict[int, Any] = {}
        self._trials: dict[int, TrialInfo] = {}
        self._last: dict[int, dict[str, float]] = {}

    def start(self, trial: TrialInfo) -> None:
        writer = self._writer_class(log_dir=str(self.folder / trial.group / trial.name))
        writer.add_text("params", json.dumps(dict(trial.params), default=str))
        self._writers[trial.trial_id] = writer
        self._trials[trial.trial_id] = trial
        self._last[trial.trial_id] = {}

    def log(self, trial_id: int, step: int, at: float, metrics: Mapping[str, float]) -> None:
        writer = self._writers[trial_id]
        for name, value in metrics.items():
            writer.add_scalar(name, value, global_step=step, walltime=at)
        self._last[trial_id].update(metrics)

    def end(self, trial_id: int, status: str) -> None:
        writer = self._writers.pop(trial_id, None)
        if writer is None:
            return
        trial = self._trials.pop(trial_id)
        last = self._last.pop(trial_id)
        hparams = {**flat_params(trial.params), "status": status}
        # "." writes the hyperparameters into the trial's own folder, beside its scalars.
        writer.add_hparams(hparams, {f"hparam/{k}": v for k, v in last.items()}, run_name=".")
        writer.close()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
