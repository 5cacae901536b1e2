"""The spec's plain blocks: `metric`, `budget`, `resources` and `tracking` (`MetricSpec`, `BudgetSpec`,
`ResourcesSpec`, `TrackingSpec`) and the limits that bound them. `quanta.spec.model.SearchSpec` holds
them; the scheduler's and the searcher's blocks live with their code (`quanta.executor.policy.knobs`,
`quanta.search.knobs`)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from quanta.search.knobs import MAX_TRIALS


class FrozenModel(BaseModel):
    """A spec block: unknown fields refused, immutable once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class MetricSpec(FrozenModel):
    name: str = Field(min_length=1, description="the reported metric the search optimises (a key of trial.report)")
    goal: Literal["maximize", "minimize"] = Field(default="maximize", description="which way is better")
    target: float | None = Field(
        default=None, description="the value that counts as reached (null: none; the search runs its budget)"
    )

    def better(self, a: float, b: float) -> bool:
        """True when metric value `a` is strictly better than `b`."""
        return a > b if self.goal == "maximize" else a < b

    def reaches(self, value: float | None) -> bool:
        """True when `value` meets the target (no target: never)."""
        if value is None or self.target is None:
            return False
        return value >= self.target if self.goal == "maximize" else value <= self.target

    def loss(self, value: float) -> float:
        """The value as a loss to minimise (what the searcher is told)."""
        return -value if self.goal == "maximize" else value


# Upper bounds: far above any real search, low enough that a typo or a hostile spec cannot make the
# controller create millions of rows or ask for a million devices.
MAX_PARALLELISM = 4096
MAX_DEVICES_PER_TRIAL = 1024


class BudgetSpec(FrozenModel):
    max_trials: int = Field(default=50, ge=1, le=MAX_TRIALS, description="configurations tried at most")
    max_steps: int = Field(default=1000, ge=1, le=10**12, description="mini-batches per trial at most")
    max_seconds: float = Field(default=3600.0, gt=0, le=366 * 86400.0, description="wall-clock budget of the search")
    stop_on_target: bool = Field(default=True, description="end the search when a trial reaches the target")
    max_consecutive_failures: int = Field(
        default=5,
        ge=0,
        le=MAX_TRIALS,
        description="end the search as failed once this many trials in a row fail, or this many report other"
        " metrics but never metric.name (0: run on)",
    )


class ResourcesSpec(FrozenModel):
    devices_per_trial: int = Field(
        default=1, ge=1, le=MAX_DEVICES_PER_TRIAL, description="devices each trial runs on at once"
    )


def _relative_path(value: str, what: str) -> str:
    """`value` when it is a relative path that stays inside the folder it is resolved against (no `..`);
    tracking output is written where the controller runs, never elsewhere on its machine."""
    p = PurePosixPath(value)
    if not value or p.is_absolute() or ".." in p.parts or "\x00" in value:
        raise ValueError(f"{what} must be a relative path without '..' (under the folder the controller runs in)")
    return value


class TensorBoardTracking(FrozenModel):
    """TensorBoard event files (`torch.utils.tensorboard`, the `tensorboard` extra)."""

    library: ClassVar[str] = "tensorboard"  # what it needs installed (the extra of the same name brings it)

    dir: str = Field(
        default="runs", max_length=1024, description="folder of event files: one subfolder per search, one per trial"
    )

    @field_validator("dir")
    @classmethod
    def _dir(cls, v: str) -> str:
        return _relative_path(v, "dir")


class MlflowTracking(FrozenModel):
    """MLflow runs in a local SQLite store (the `mlflow` extra: mlflow-skinny)."""

    library: ClassVar[str] = "mlflow"

    tracking_uri: str = Field(
        default="sqlite:///mlflow.db",
        max_length=1024,
        description="a local store, sqlite:///relative/path.db (`mlflow ui --backend-store-uri` reads it)",
    )
    experiment: str | None = Field(
        default=None, min_length=1, max_length=500, description="experiment name (default: the search's name)"
    )

    @field_validator("tracking_uri")
    @classmethod
    def _local(cls, v: str) -> str:
        if not v.startswith("sqlite:///"):
            raise ValueError("only a local store is written: sqlite:///relative/path.db")
        _relative_path(v.removeprefix("sqlite:///"), "the database path")
        return v


class WandbTracking(FrozenModel):
    """Weights & Biases runs written offline (the `wandb` extra); `wandb sync` uploads them later."""

    library: ClassVar[str] = "wandb"

    project: str = Field(min_length=1, max_length=128, description="W&B project the runs belong to")
    mode: Literal["offline"] = Field(default="offline", description="offline only: nothing is sent while a search runs")
    dir: str = Field(default=".", max_length=1024, description="folder W&B writes its `wandb/` folder of runs into")

    @field_validator("dir")
    @classmethod
    def _dir(cls, v: str) -> str:
        return _relative_path(v, "dir")


class TrackingSpec(FrozenModel):
    """Where each trial's reports are also written, one run per trial, by the controller as it records
    them (`quanta.integrations.tracking`): its configuration as hyperparameters, each report as a step."""

    tensorboard: TensorBoardTracking | None = Field(default=None, description="TensorBoard event files")
    mlflow: MlflowTracking | None = Field(default=None, description="MLflow runs")
    wandb: WandbTracking | None = Field(default=None, description="Weights & Biases offline runs")

    def enabled(self) -> dict[str, TensorBoardTracking | MlflowTracking | WandbTracking]:
        """The trackers the spec asks for, by name."""
        blocks = {"tensorboard": self.tensorboard, "mlflow": self.mlflow, "wandb": self.wandb}
        return {name: block for name, block in blocks.items() if block is not None}
