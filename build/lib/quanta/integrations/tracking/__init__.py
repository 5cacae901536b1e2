"""Each trial's reports written to TensorBoard, MLflow or Weights & Biases, when a spec's `tracking` block
asks for it (`quanta.spec.TrackingSpec`): one run per trial, its configuration as hyperparameters, each
report as a step of its metrics, offline only (TensorBoard's event files, MLflow's local SQLite store,
W&B's offline runs).

Written from the controller's side, as it records reports (`quanta.controller.tracking`), not from the
trial processes: the controller sees every report once (a report a restarted trial sends again is
dropped before it gets here), it runs the same in `quanta run`, `quanta serve` and on a cluster (the
trials of one search may run on many machines, the runs are written in one place), it knows how each
trial ended, and the trainable changes in nothing. The trackers run on a thread of their own
(`TrackingHub`), so a slow tracker never holds up scheduling, and a tracker that fails is logged once
and left out for its search: tracking never fails a search.

Each tracker imports its library when its first run starts; the libraries are optional extras
(`tensorboard`, `mlflow`, `wandb`). `SearchSpec.tracking_problem()` says beforehand which one is missing.
"""

from quanta.integrations.tracking.hub import TrackingHub, TrialInfo

__all__ = ["TrackingHub", "TrialInfo"]
