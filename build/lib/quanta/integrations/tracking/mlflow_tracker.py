"""MLflow: one run per trial in the experiment named by the spec (default: the search's name), in a
local SQLite store (`mlflow ui --backend-store-uri sqlite:///mlflow.db` shows it), written with
`MlflowClient` (the `mlflow` extra brings mlflow-skinny). The configuration is the run's params, each
report a step of its metrics, the way the trial ended its status; a run carries the search and trial
ids as tags, and a trial whose controller restarted goes on in the run it had."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from quanta.integrations.tracking.base import TrialInfo, flat_params

# Quanta's final trial statuses as MLflow's run statuses.
_STATUS = {"completed": "FINISHED", "failed": "FAILED", "stopped": "KILLED", "killed": "KILLED"}
_MAX_PARAM = 6000  # MLflow's longest param value


class MlflowTracker:
    def __init__(self, database: Path, experiment: str):
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        self._metric, self._param = Metric, Param
        database.parent.mkdir(parents=True, exist_ok=True)
        self.uri = f"sqlite:///{database}"
        self.client = MlflowClient(tracking_uri=self.uri)
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = found.experiment_id if found is not None else self.client.create_experiment(experiment)
        self._runs: dict[int, str] = {}

    def start(self, trial: TrialInfo) -> None:
        tag = f"tags.`quanta.trial_id` = '{trial.trial_id}' and tags.`quanta.search_id` = '{trial.search_id}'"
        earlier = self.client.search_runs([self.experiment_id], filter_string=tag, max_results=1)
        if earlier:  # the controller restarted while the trial was alive: go on in its run
            self._runs[trial.trial_id] = earlier[0].info.run_id
            return
        tags = {
            "quanta.search": trial.group,
            "quanta.search_id": str(trial.search_id),
            "quanta.trial_id": str(trial.trial_id),
            "quanta.trial_number": str(trial.number),
        }
        run = self.client.create_run(self.experiment_id, run_name=f"{trial.group}/{trial.name}", tags=tags)
        params = [self._param(k, str(v)[:_MAX_PARAM]) for k, v in flat_params(trial.params).items()]
        if params:
            self.client.log_batch(run.info.run_id, params=params)
        self._runs[trial.trial_id] = run.info.run_id

    def log(self, trial_id: int, step: int, at: float, metrics: Mapping[str, float]) -> None:
        stamp = int(at * 1000) if at > 0 else int(time.time() * 1000)
        batch = [self._metric(k, v, stamp, step) for k, v in metrics.items()]
        self.client.log_batch(self._runs[trial_id], metrics=batch)

    def end(self, trial_id: int, status: str) -> None:
        run_id = self._runs.pop(trial_id, None)
        if run_id is not None:
            self.client.set_terminated(run_id, _STATUS.get(status, "FINISHED"))

    def close(self) -> None:
        self._runs.clear()  # runs of trials still alive stay RUNNING: a restarted controller goes on in them
