"""The search spec: what a user posts (YAML or JSON) to start a search.

`load_spec(path)` / `parse_spec(text_or_mapping)` return a validated, immutable `SearchSpec` or raise
`SpecError` whose `errors` list names each bad field by its dotted path (``budget.max_steps``,
``space.optimizer.choice[0].momentum``) with the reason. Nothing here touches a database or a device.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from quanta.executor.policy.knobs import KNOBS, AshaKnobs, SchedulerKnobs
from quanta.executor.policy.knobs import upgrade as upgrade_knobs
from quanta.search.fidelity import DEFAULT_ETA, rungs_of
from quanta.search.knobs import MAX_TRIALS, KnobError, SearchAlgoSpec
from quanta.search.objectives import Bound, Objective
from quanta.search.space import (
    SpaceError,
    dimension_at,
    is_dimension,
    mutable_problem,
    override_value,
    point_vals,
    take_mutable,
    validate_space,
)
from quanta.spec_objectives import HYPERVOLUME as HYPERVOLUME
from quanta.spec_objectives import MAX_OBJECTIVES, ConstraintSpec, ObjectiveSpec, check_target
from quanta.trainable_ref import FILE_REF, MODULE_REF


class SpecError(ValueError):
    """A spec failed validation. `errors` is a list of (field path, reason)."""

    def __init__(self, errors: list[tuple[str, str]], source: str | None = None):
        self.errors = errors
        self.source = source
        where = f"{source}: " if source else ""
        lines = "; ".join(f"{path}: {reason}" for path, reason in errors)
        super().__init__(f"{where}invalid spec: {lines}")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MetricSpec(_Frozen):
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
# How deeply a spec may nest (mappings and lists, from the spec itself at level 1). A real spec nests a
# handful of levels; JSON encoders and pydantic's serializer give up at a few hundred, so a deeper spec
# stored once would break every page that shows it.
MAX_DEPTH = 32
# How wide a search space may be: the searcher is built and asked in time proportional to it (TPE on
# 256 parameters: about 0.1 s to build, 0.1 s per ask after a few dozen trials; 2,000 parameters took
# seconds), and the export and the dashboard draw one column per parameter.
MAX_PARAMETERS = 256
MAX_OPTIONS = 4096  # options of all `choice` dimensions together (a 30,000-option choice took 9 s to build)


class BudgetSpec(_Frozen):
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


class ResourcesSpec(_Frozen):
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


class TensorBoardTracking(_Frozen):
    """TensorBoard event files (`torch.utils.tensorboard`, the `tensorboard` extra)."""

    library: ClassVar[str] = "tensorboard"  # what it needs installed (the extra of the same name brings it)

    dir: str = Field(
        default="runs", max_length=1024, description="folder of event files: one subfolder per search, one per trial"
    )

    @field_validator("dir")
    @classmethod
    def _dir(cls, v: str) -> str:
        return _relative_path(v, "dir")


class MlflowTracking(_Frozen):
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


class WandbTracking(_Frozen):
    """Weights & Biases runs written offline (the `wandb` extra); `wandb sync` uploads them later."""

    library: ClassVar[str] = "wandb"

    project: str = Field(min_length=1, max_length=128, description="W&B project the runs belong to")
    mode: Literal["offline"] = Field(default="offline", description="offline only: nothing is sent while a search runs")
    dir: str = Field(default=".", max_length=1024, description="folder W&B writes its `wandb/` folder of runs into")

    @field_validator("dir")
    @classmethod
    def _dir(cls, v: str) -> str:
        return _relative_path(v, "dir")


class TrackingSpec(_Frozen):
    """Where each trial's reports are also written, one run per trial, by the controller as it records
    them (`quanta.integrations.tracking`): its configuration as hyperparameters, each report as a step."""

    tensorboard: TensorBoardTracking | None = Field(default=None, description="TensorBoard event files")
    mlflow: MlflowTracking | None = Field(default=None, description="MLflow runs")
    wandb: WandbTracking | None = Field(default=None, description="Weights & Biases offline runs")

    def enabled(self) -> dict[str, TensorBoardTracking | MlflowTracking | WandbTracking]:
        """The trackers the spec asks for, by name."""
        blocks = {"tensorboard": self.tensorboard, "mlflow": self.mlflow, "wandb": self.wandb}
        return {name: block for name, block in blocks.items() if block is not None}


class SearchSpec(_Frozen):
    name: str = Field(min_length=1, max_length=200, description="shown in listings and the dashboard")
    trainable: str = Field(
        description="the training function, as 'package.module:function'; under `quanta run` the module may "
        "also sit beside the spec file, or be named by its file's path relative to the spec "
        "('src/train.py:train')"
    )
    space: dict[str, Any] = Field(description="the hyperparameters to search (see `space` below)")
    metric: MetricSpec = Field(
        description="what to optimise and the target (with `metrics`: filled in as its first objective)"
    )
    metrics: tuple[ObjectiveSpec, ...] = Field(
        default=(),
        max_length=MAX_OBJECTIVES,
        description="2-4 objectives for a Pareto front (instead of `metric`): "
        "`[{name: accuracy, goal: maximize}, {name: latency_ms, goal: minimize}]`",
    )
    constraints: tuple[ConstraintSpec, ...] = Field(
        default=(),
        max_length=16,
        description="bounds on reported values (`[{name: params_m, max: 5.0}]`): a trial outside one is "
        "infeasible, ranked after every feasible one and never the target",
    )
    target: dict[str, float] | None = Field(
        default=None,
        description="with `metrics`: reached when one feasible report is at least this good in every "
        "objective (`{accuracy: 0.9, latency_ms: 5}`), or when the feasible front's hypervolume reaches "
        "`{hypervolume: X}` (up to `reference`)",
    )
    reference: dict[str, float] | None = Field(
        default=None,
        description="with `metrics`: the point the hypervolume is measured up to, one value per objective, "
        "worse than any model worth keeping (e.g. `{accuracy: 0.0, latency_ms: 100}`)",
    )
    budget: BudgetSpec = Field(default=BudgetSpec(), description="when the search ends")
    resources: ResourcesSpec = Field(default=ResourcesSpec(), description="what one trial needs")
    parallelism: int = Field(
        default=4,
        ge=1,
        le=MAX_PARALLELISM,
        description="trials alive at once (more than devices: time-sliced or parked)",
    )
    search: SearchAlgoSpec = Field(default=SearchAlgoSpec(), description="how configurations are proposed")
    scheduler: SchedulerKnobs = Field(default_factory=AshaKnobs, description="policy and its knobs")
    seed: int = Field(default=0, ge=0, lt=2**32, description="a 32-bit seed")
    config: dict[str, Any] = Field(default_factory=dict, description="fixed values passed to every trial")
    tracking: TrackingSpec = Field(
        default=TrackingSpec(), description="write each trial's reports to TensorBoard, MLflow or W&B too"
    )
    mutable: tuple[str, ...] = Field(
        default=(),
        max_length=MAX_PARAMETERS,
        description=(
            "parameters a fork may change (`POST /trials/{id}/fork`), by dotted name (`optimizer.lr`): numeric"
            " dimensions only. `mutable: true` beside a dimension's kind in `space` says the same"
            " (`lr: {loguniform: [0.0001, 0.1], mutable: true}`) and is stored here"
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _mutable_flags(cls, data: Any) -> Any:
        """The `mutable: true` flags of the space's dimensions move to `mutable`, so the space keeps one
        shape (a dimension is a one-key mapping) for every reader of it."""
        if not isinstance(data, Mapping) or not isinstance(data.get("space"), Mapping):
            return data
        space, names = take_mutable(data["space"])
        out = {**data, "space": space}
        given = data.get("mutable")
        if names and (given is None or isinstance(given, list | tuple)):
            out["mutable"] = list(dict.fromkeys([*(given or ()), *names]))
        return out

    @model_validator(mode="before")
    @classmethod
    def _metric_of_metrics(cls, data: Any) -> Any:
        """With `metrics`, `metric` is their first objective (what every single-metric reader reads: the
        curve shown, the health checks); giving both is refused."""
        if not isinstance(data, Mapping) or not data.get("metrics"):
            return data
        if "metric" in data:
            stored = data.get("metric")
            first = data["metrics"][0] if isinstance(data["metrics"], list | tuple) else None
            same = (
                isinstance(stored, Mapping)
                and isinstance(first, Mapping)
                and stored.get("name") == first.get("name")
                and stored.get("goal", "maximize") == first.get("goal", "maximize")
                and stored.get("target") is None
            )
            if not same:  # a dumped spec carries the filled-in one, which is accepted back
                raise SpaceError("metric", "give `metric` (one objective) or `metrics` (2-4), not both")
            return data
        first = data["metrics"][0]
        if isinstance(first, Mapping):
            return {**data, "metric": {k: first[k] for k in ("name", "goal") if k in first}}
        return data

    @field_validator("metrics")
    @classmethod
    def _objectives(cls, v: tuple[ObjectiveSpec, ...]) -> tuple[ObjectiveSpec, ...]:
        if len(v) == 1:
            raise ValueError("give 2-4 objectives; a single one is `metric: {name: ..., goal: ...}`")
        seen: set[str] = set()
        for i, o in enumerate(v):
            if o.name in seen:
                raise SpaceError(f"metrics[{i}].name", f"'{o.name}' is named twice")
            seen.add(o.name)
        return v

    @field_validator("constraints")
    @classmethod
    def _distinct_constraints(cls, v: tuple[ConstraintSpec, ...]) -> tuple[ConstraintSpec, ...]:
        seen: set[str] = set()
        for i, c in enumerate(v):
            if c.name in seen:
                raise SpaceError(
                    f"constraints[{i}].name", f"'{c.name}' is bounded twice: give one entry with min and max"
                )
            seen.add(c.name)
        return v

    @field_validator("trainable")
    @classmethod
    def _trainable_shape(cls, v: str) -> str:
        # fullmatch, not match(): `$` also matches before a final newline
        if not (MODULE_REF.fullmatch(v) or FILE_REF.fullmatch(v)):
            raise ValueError(
                "must look like 'package.module:function' (or, for quanta run, 'path/to/file.py:function')"
            )
        return v

    @field_validator("scheduler", mode="before")
    @classmethod
    def _scheduler_policy(cls, v: Any) -> Any:
        return upgrade_knobs(v)

    @field_validator("space")
    @classmethod
    def _space_valid(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if not v:
            raise ValueError("must define at least one parameter")
        stored = bool(info.context and info.context.get("stored"))
        if not stored:  # a stored search keeps the space it was created with (its searcher runs off the tick)
            space_width_check(v)
        validate_space(v)
        return v

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> SearchSpec:
        # The rungs are set once: under a policy with rungs the searcher fits at the scheduler's. A spec
        # stored before that rule (its search block a dump with eta 3.0) keeps what it was created with.
        stored = bool(info.context and info.context.get("stored"))
        if isinstance(self.scheduler, AshaKnobs) and not stored:
            for knob in ("eta", "min_steps"):
                ours, theirs = getattr(self.search, knob), getattr(self.scheduler, knob)
                if ours is not None and ours != theirs:
                    raise KnobError(
                        f"search.{knob}",
                        f"{ours} differs from scheduler.{knob} ({theirs}): under {self.scheduler.policy} the "
                        f"searcher fits at the scheduler's rungs; set {knob} in scheduler only",
                    )
        self._check_pareto_target()
        problem = mutable_problem(self.space, self.mutable)
        if problem is not None:
            raise problem
        if self.scheduler.policy == "pbt" and not self.mutable:
            raise SpaceError(
                "mutable",
                "scheduler.policy pbt changes mutable parameters, and the space has none: mark one "
                "(`lr: {loguniform: [0.0001, 0.1], mutable: true}` under space)",
            )
        clash = set(self.space) & set(self.config)
        if clash:
            raise ValueError(f"config repeats space parameters {sorted(clash)}")
        points = self.search.points_to_evaluate
        if len(points) > self.budget.max_trials:
            raise SpaceError(
                "search.points_to_evaluate",
                f"{len(points)} points, but budget.max_trials is {self.budget.max_trials}",
            )
        for i, point in enumerate(points):
            point_vals(self.space, point, f"search.points_to_evaluate[{i}]")  # raises naming the parameter
        return self

    def _check_pareto_target(self) -> None:
        """`target` and `reference` against `metrics` (`quanta.spec_objectives.check_target`)."""
        check_target(self.metrics, self.target, self.reference)

    @property
    def objectives(self) -> tuple[Objective, ...]:
        """What the search optimises, in order: the objectives of `metrics`, else `metric` alone."""
        if self.metrics:
            return tuple(Objective(o.name, o.goal) for o in self.metrics)
        return (Objective(self.metric.name, self.metric.goal),)

    @property
    def bounds(self) -> tuple[Bound, ...]:
        """The constraints as `quanta.search.pareto` reads them."""
        return tuple(Bound(c.name, c.min, c.max) for c in self.constraints)

    @property
    def pareto(self) -> bool:
        """Whether trials are ranked by Pareto order (several objectives, or constraints) rather than by
        the one metric's value."""
        return bool(self.metrics or self.constraints)

    def point_target(self) -> tuple[float, ...] | None:
        """A point target as losses, one per objective (None: none, or a hypervolume target)."""
        if not self.target or HYPERVOLUME in self.target:
            return None
        return tuple(o.loss(self.target[o.name]) for o in self.objectives)

    def reference_losses(self) -> tuple[float, ...] | None:
        """The reference point as losses (None: not given)."""
        if self.reference is None:
            return None
        return tuple(o.loss(self.reference[o.name]) for o in self.objectives)

    def target_text(self) -> float | str | None:
        """The target as users read it: `metric.target` (a number) for a single-metric search without
        constraints; otherwise a sentence (``accuracy >= 0.9, latency_ms <= 5``, ``hypervolume >= 12``,
        with ``feasible`` where constraints apply); None without a target."""
        if not self.has_target:
            return None
        if not self.pareto:
            return self.metric.target
        if self.target and HYPERVOLUME in self.target:
            text = f"{HYPERVOLUME} >= {self.target[HYPERVOLUME]:g}"
        else:
            wanted: dict[str, float | None] = {self.metric.name: self.metric.target}
            if self.target:
                wanted = dict(self.target)
            text = ", ".join(
                f"{o.name} {'>=' if o.goal == 'maximize' else '<='} {wanted[o.name] or 0:g}"
                for o in self.objectives
                if wanted.get(o.name) is not None
            )
        return f"{text}, feasible" if self.constraints else text

    @property
    def has_target(self) -> bool:
        """Whether the search has a target at all (`metric.target` or `target`)."""
        return self.metric.target is not None or bool(self.target)

    def searcher_rungs(self) -> tuple[int, ...]:
        """The rungs in steps a multi-fidelity searcher (`search.algorithm: bohb`) fits at: the search
        block's `eta` and `min_steps` where it gives them, else the scheduler's when its policy has rungs
        (asha, hyperband: the rungs of its first bracket, so searcher and policy agree), else the defaults
        (`quanta.search.fidelity.rungs_of`)."""
        k = self.scheduler if isinstance(self.scheduler, AshaKnobs) else None
        eta = self.search.eta if self.search.eta is not None else (k.eta if k else DEFAULT_ETA)
        first = self.search.min_steps if self.search.min_steps is not None else (k.min_steps if k else None)
        return rungs_of(self.budget.max_steps, eta, first)

    def checked_overrides(self, values: Mapping[str, Any], root: str = "set") -> dict[str, int | float]:
        """New values of mutable parameters (a fork's `set`), checked: each name is one of `mutable` and
        each value a number its dimension takes (`quanta.search.space.override_value`). Raises `SpaceError`
        at `root.<name>` naming what is wrong (a parameter that is not mutable lists those that are)."""
        out: dict[str, int | float] = {}
        for name, value in values.items():
            path = f"{root}.{name}"
            if name not in self.mutable:
                which = ", ".join(self.mutable) if self.mutable else "none"
                known = "is not mutable" if dimension_at(self.space, name) is not None else "is not a parameter"
                raise SpaceError(path, f"{known} (the search's mutable parameters: {which})")
            out[name] = override_value(self.space, name, value, path)
        return out

    @property
    def module(self) -> str:
        return self.trainable.split(":", 1)[0]

    def trainable_problem(self, not_found: str | None = None) -> str | None:
        """None when the trainable's module is found on this machine's `sys.path` and binds the function
        at top level; otherwise why not. Nothing is imported or run (`quanta.trainable_ref`): the API checks
        posted specs in the server's process. The CLI and the API check this before they store a search.
        `not_found`: what follows "module 'x' cannot be found" (default: the server's import path and
        allowlist, `SERVER_HINT`; a local run says where it looked, `local_hint`)."""
        from quanta.trainable_ref import SERVER_HINT, trainable_problem

        return trainable_problem(self.trainable, not_found or SERVER_HINT)

    def tracking_problem(self) -> str | None:
        """None when the library of every tracker the spec asks for is installed here; otherwise which one
        is missing and the extra that brings it. Nothing is imported (`quanta.integrations.tracking`)."""
        import importlib.util

        for name, block in self.tracking.enabled().items():
            library = block.library
            if importlib.util.find_spec(library) is None:
                return f"tracking.{name} needs the {library} package: pip install 'quanta[{name}]' (or {library})"
        return None

    def importable(self) -> bool:
        """True when `trainable_problem()` finds nothing wrong."""
        return self.trainable_problem() is None


def place_locally(spec: SearchSpec, spec_dir: str | Path) -> SearchSpec:
    """`spec` as `quanta run` and `quanta.sdk.run` run it, on this machine, for a spec file in `spec_dir`
    (a spec given as data: the working directory). The trainable is placed (`place_trainable`: a module
    beside the spec, a file path relative to it), the folder it needs goes first on `sys.path`, which the
    trial template inherits, and the returned spec names the `module:function` trial processes import.
    Raises `SpecError` on `trainable` when it cannot run: a file that is not there, a module that cannot
    be found (saying where it was looked for and what to do), a function its module lacks."""
    import sys

    from quanta.trainable_ref import TrainableNotFound, local_hint, place_trainable

    try:
        placed = place_trainable(spec.trainable, spec_dir)
    except TrainableNotFound as exc:
        raise SpecError([("trainable", str(exc))], spec.name) from None
    if placed.folder is not None and placed.folder not in sys.path:
        sys.path.insert(0, placed.folder)
    if placed.ref != spec.trainable:
        spec = spec.model_copy(update={"trainable": placed.ref})
    problem = spec.trainable_problem(local_hint(placed.ref, spec_dir))
    if problem is not None:
        raise SpecError([("trainable", problem)], spec.name)
    return spec


def nesting_problem(data: Any, limit: int = MAX_DEPTH) -> str | None:
    """The field path of the first mapping or list in `data` nested deeper than `limit` levels (`data`
    itself is level 1), or None when there is none. Iterative and stops descending at the limit, so a
    document nested thousands of levels deep costs no recursion and no more than its first levels."""
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(data, 1, ())]
    while stack:
        node, depth, path = stack.pop()
        children: Any
        if isinstance(node, Mapping):
            children = node.items()
        elif isinstance(node, list | tuple):
            children = enumerate(node)
        else:
            continue
        if depth > limit:
            return _loc(path)
        for key, child in children:
            if isinstance(child, Mapping | list | tuple):
                stack.append((child, depth + 1, (*path, key)))
    return None


def _space_width(node: Any) -> tuple[int, int]:
    """(parameters, choice options) of a space or of a nested space within it: every named entry is a
    parameter (a dimension or a constant), and so is each dimension that is a choice's option; options
    count over all choices."""
    params = options = 0
    entries = node.values() if isinstance(node, Mapping) and not is_dimension(node) else [node]
    for child in entries:
        if is_dimension(child):
            params += 1
            kind, args = next(iter(child.items()))
            if kind == "choice" and isinstance(args, list | tuple):
                options += len(args)
                for option in args:
                    if isinstance(option, Mapping):
                        p, o = _space_width(option)
                        params, options = params + p, options + o
        elif isinstance(child, Mapping):
            p, o = _space_width(child)
            params, options = params + p, options + o
        else:
            params += 1
    return params, options


def space_width_check(space: Mapping[str, Any]) -> None:
    """Raise `SpaceError` naming `space` when it has more than `MAX_PARAMETERS` parameters or more than
    `MAX_OPTIONS` choice options in all, or names a parameter with a '.' (nested names are joined by dots
    in exports and the dashboard, so `a.b` would be the name of both `a.b` and `a: {b}`)."""
    params, options = _space_width(space)
    if params > MAX_PARAMETERS:
        raise SpaceError("space", f"{params} parameters; a search space has at most {MAX_PARAMETERS}")
    if options > MAX_OPTIONS:
        raise SpaceError("space", f"{options} choice options in all; a search space has at most {MAX_OPTIONS}")
    dotted = _dotted_name(space, "space")
    if dotted is not None:
        raise SpaceError(
            dotted, "a parameter name may not contain '.': nested names are joined by dots (a.b is a: {b: ...})"
        )


def _dotted_name(node: Any, path: str) -> str | None:
    """The path of the first key with a '.' among the space's names (in nested spaces and choice options)."""
    if is_dimension(node):
        kind, args = next(iter(node.items()))
        if kind == "choice" and isinstance(args, list | tuple):
            for i, option in enumerate(args):
                found = _dotted_name(option, f"{path}.choice[{i}]")
                if found:
                    return found
        return None
    if isinstance(node, Mapping):
        for key, child in node.items():
            if "." in str(key):
                return f"{path}.{key}"
            found = _dotted_name(child, f"{path}.{key}")
            if found:
                return found
    return None


def _loc(loc: tuple[Any, ...], kind: str = "") -> str:
    # The scheduler union puts the policy name into the path (``scheduler.gandiva.top_m``): a user
    # wrote ``scheduler.top_m``. An unknown or missing policy is an error of ``scheduler.policy``.
    if len(loc) >= 2 and loc[0] == "scheduler" and loc[1] in KNOBS:
        loc = (loc[0], *loc[2:])
    if kind.startswith("union_tag") and loc == ("scheduler",):
        loc = ("scheduler", "policy")
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "spec"


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without anchors and aliases. A few hundred bytes of nested aliases expand to billions of
    nodes (the "billion laughs"): they are refused where the document is composed, before anything is
    expanded. A spec has no use for them."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not accepted in a spec", event.start_mark
            )
        event = self.peek_event()
        if getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None, None, "YAML anchors (&name) are not accepted in a spec", event.start_mark
            )
        return super().compose_node(parent, index)


def _load_yaml(text: str | bytes) -> Any:
    return yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader: plain data only


def decode_spec_text(
    text: str | bytes, fmt: Literal["yaml", "json", "auto"] = "auto", *, origin: str | None = None
) -> dict[str, Any]:
    """The mapping of fields in a spec's text: `fmt` "json" or "yaml" parses that format, "auto" parses
    YAML (a superset of JSON, so either). The one place spec text is decoded (files, the API, strings).

    Raises `SpecError` when the text does not parse, nests too deeply, or is not a mapping.
    """
    label = {"json": "JSON", "yaml": "YAML", "auto": "YAML or JSON"}[fmt]
    try:
        data = json.loads(text) if fmt == "json" else _load_yaml(text)
    except (ValueError, yaml.YAMLError) as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise SpecError([("spec", f"not valid {label}: {exc}")], origin) from None
    except RecursionError:
        raise SpecError([("spec", "nested too deeply")], origin) from None
    if not isinstance(data, Mapping):
        raise SpecError([("spec", "must be a mapping of fields")], origin)
    return dict(data)


def parse_spec(
    source: str | bytes | Mapping[str, Any], *, origin: str | None = None, stored: bool = False
) -> SearchSpec:
    """Validate a spec from YAML/JSON text or an already-parsed mapping. `stored`: it is a stored search's
    spec (`spec_from_stored`), written by an earlier version maybe: the rules that came later and would
    refuse it (two blocks' rungs that differ) are not applied, so a search keeps what it was created with.

    Raises `SpecError` naming every bad field; never returns a partially valid spec.
    """
    data = decode_spec_text(source, origin=origin) if isinstance(source, str | bytes) else dict(source)
    too_deep = nesting_problem(data)
    if too_deep is not None:
        raise SpecError([(too_deep, f"nested more than {MAX_DEPTH} levels deep")], origin)
    try:
        return SearchSpec.model_validate(data, context={"stored": stored})
    except SpaceError as exc:  # raised directly when pydantic re-raises non-ValueErrors
        raise SpecError([(exc.path, exc.reason)], origin) from None
    except ValidationError as exc:
        errors = []
        for err in exc.errors():
            ctx_err = (err.get("ctx") or {}).get("error")
            if isinstance(ctx_err, SpaceError):
                errors.append((ctx_err.path, ctx_err.reason))
            elif isinstance(ctx_err, KnobError):  # raised by its block: the block's path, then the knob
                block = tuple(err["loc"])
                path = f"{_loc(block, err['type'])}.{ctx_err.field}" if block else ctx_err.field
                errors.append((path, ctx_err.reason))
            else:
                msg = err["msg"].removeprefix("Value error, ")
                errors.append((_loc(tuple(err["loc"]), err["type"]), msg))
        raise SpecError(errors, origin) from None


def load_spec(path: str | Path) -> SearchSpec:
    """Read and validate a spec file (.yaml, .yml or .json)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise SpecError([("spec", f"cannot read {p}: {exc.strerror}")], str(p)) from None
    return parse_spec(decode_spec_text(text, "json" if p.suffix == ".json" else "auto", origin=str(p)), origin=str(p))


_STORED: dict[str, SearchSpec] = {}  # spec_from_stored's cache, by the stored spec's JSON text
_STORED_MAX = 256
_STORED_LOCK = threading.Lock()


def spec_from_stored(data: Mapping[str, Any]) -> SearchSpec:
    """The `SearchSpec` of a stored search (its `spec` column: the `model_dump(mode="json")` written when
    it was created). The one way a stored spec becomes a `SearchSpec`: the controller when it starts or
    reloads a search, every node for each trial it launches.

    Each distinct spec is validated once per process: the result is cached by the spec's JSON text (in
    its stored key order, which is part of the spec: it orders the search space), so a node starting
    many trials of a search parses its spec once. `SearchSpec` is frozen, so sharing it is safe.
    Raises `SpecError` as `parse_spec` does (nothing is cached then).
    """
    key = json.dumps(data, separators=(",", ":"))
    spec = _STORED.get(key)
    if spec is None:
        spec = parse_spec(data, stored=True)
        with _STORED_LOCK:
            if len(_STORED) >= _STORED_MAX:
                del _STORED[next(iter(_STORED))]  # the oldest
            _STORED[key] = spec
    return spec
