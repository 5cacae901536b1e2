"""Weights & Biases: one offline run per trial in the spec's project, grouped by search, written with
`wandb.init(mode="offline")` into `{dir}/wandb/offline-run-*` (`wandb sync` uploads them later; nothing
is sent while the search runs). The configuration is the run's config, each report a step of its
history; a trial that did not complete finishes with exit code 1."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from quanta.integrations.tracking.base import TrialInfo


class WandbTracker:
    def __init__(self, folder: Path, project: str):
        import wandb

        self._wandb = wandb
        self.folder = folder
        self.project = project
        self._runs: dict[int, Any] = {}
        self._steps: dict[int, int] = {}

    def start(self, trial: TrialInfo) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        settings = self._wandb.Settings(silent=True, console="off", x_disable_stats=True, save_code=False)
        run = self._wandb.init(
            project=self.project,
            name=f"{trial.group}/{trial.name}",
            group=trial.group,
            job_type="trial",
            config=dict(trial.params),
            dir=str(self.folder),
            mode="offline",
            reinit="create_new",  # one run per trial, several open at once in this process
            settings=settings,
        )
        self._runs[trial.trial_id] = run

    def log(self, trial_id: int, step: int, at: float, metrics: Mapping[str, float]) -> None:
        if step < self._steps.get(trial_id, -1):  # W&B's history only goes forward
            return
        self._steps[trial_id] = step
        self._runs[trial_id].log(dict(metrics), step=step)

    def end(self, trial_id: int, status: str) -> None:
        run = self._runs.pop(trial_id, None)
        self._steps.pop(trial_id, None)
        if run is not None:
            run.finish(exit_code=0 if status == "completed" else 1)

    def close(self) -> None:
        for run in self._runs.values():
            run.finish(exit_code=1)
        self._runs.clear()
