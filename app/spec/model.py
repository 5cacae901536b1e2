"""`SearchSpec`: the whole spec a user posts, its cross-field rules (rungs set once, mutable parameters,
objectives and targets, points to evaluate) and what readers ask of it (objectives, bounds, targets,
the searcher's rungs, checked fork overrides, whether its trainable and trackers are present)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from quanta.executor.policy.knobs import AshaKnobs, SchedulerKnobs
from quanta.executor.policy.knobs import upgrade as upgrade_knobs
from quanta.search.fidelity import DEFAULT_ETA, rungs_of
from quanta.search.knobs import KnobError, SearchAlgoSpec
from quanta.search.objectives import Bound, Objective
from quanta.search.space import (
    SpaceError,
    dimension_at,
    mutable_problem,
    override_value,
    point_vals,
    take_mutable,
    validate_space,
)
from quanta.spec.blocks import (
    MAX_PARALLELISM,
    BudgetSpec,
    FrozenModel,
    MetricSpec,
    ResourcesSpec,
    TrackingSpec,
)
from quanta.spec.limits import MAX_PARAMETERS, space_width_check
from quanta.spec.objectives import HYPERVOLUME, MAX_OBJECTIVES, ConstraintSpec, ObjectiveSpec, check_target
from quanta.trainable_ref import FILE_REF, MODULE_REF


class SearchSpec(FrozenModel):
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
        """`target` and `reference` against `metrics` (`quanta.spec.objectives.check_target`)."""
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
