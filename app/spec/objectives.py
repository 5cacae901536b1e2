"""The parts of a search spec that name several objectives and bounds: `ObjectiveSpec` (one of `metrics`),
`ConstraintSpec` (one of `constraints`) and the checks of a point or hypervolume `target` and its
`reference` (`check_target`). `quanta.spec.model.SearchSpec` holds them; `docs/multi-objective.md` tells the
whole. Pure validation: nothing here imports numpy or touches a store.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import Field, model_validator

from quanta.search.space import SpaceError
from quanta.spec.blocks import FrozenModel


class ObjectiveSpec(FrozenModel):
    name: str = Field(min_length=1, description="a reported metric (a key of trial.report)")
    goal: Literal["maximize", "minimize"] = Field(default="maximize", description="which way is better")


class ConstraintSpec(FrozenModel):
    name: str = Field(min_length=1, description="a reported value (a key of trial.report): an objective or any other")
    max: float | None = Field(default=None, description="the largest value that is feasible (null: no upper bound)")
    min: float | None = Field(default=None, description="the smallest value that is feasible (null: no lower bound)")

    @model_validator(mode="after")
    def _bounded(self) -> ConstraintSpec:
        if self.max is None and self.min is None:
            raise ValueError("give max, min or both")
        for side in ("max", "min"):
            v = getattr(self, side)
            if v is not None and not math.isfinite(v):
                raise ValueError(f"{side} must be a finite number")
        if self.max is not None and self.min is not None and self.min > self.max:
            raise ValueError(f"min ({self.min:g}) is above max ({self.max:g}): nothing would be feasible")
        return self


MAX_OBJECTIVES = 4
HYPERVOLUME = "hypervolume"  # the key of a hypervolume target (`target: {hypervolume: X}`)


def check_target(
    metrics: Sequence[ObjectiveSpec], target_in: Mapping[str, float] | None, reference: Mapping[str, float] | None
) -> None:
    """`target` and `reference` name the objectives of `metrics` (and only with them): a point target names
    every objective, a hypervolume target needs a reference point, and a reference must be worse than a
    point target in every objective (a point at the target would add no volume otherwise). Raises
    `SpaceError` at the field that is wrong (`target`, `target.<key>`, `reference.<objective>`)."""
    given_by = {"target": target_in, "reference": reference}
    names = [o.name for o in metrics]
    for field_name in ("target", "reference"):
        given = given_by[field_name]
        if given is None:
            continue
        if not metrics:
            raise SpaceError(field_name, "goes with `metrics`; a single objective's target is `metric.target`")
        for key, value in given.items():
            if not math.isfinite(value):
                raise SpaceError(f"{field_name}.{key}", "must be a finite number")
            if key not in names and not (field_name == "target" and key == HYPERVOLUME):
                raise SpaceError(f"{field_name}.{key}", f"is not an objective (metrics: {', '.join(names)})")
    target, ref = target_in or {}, reference
    if HYPERVOLUME in target:
        if len(target) > 1:
            raise SpaceError("target", "give a point (one value per objective) or {hypervolume: X}, not both")
        if target[HYPERVOLUME] <= 0:
            raise SpaceError("target.hypervolume", "must be above 0")
        if ref is None:
            raise SpaceError("reference", "a hypervolume target is measured up to a reference point: give one")
    elif target:
        missing = [n for n in names if n not in target]
        if missing:
            raise SpaceError("target", f"names no value for {', '.join(missing)}: a point target names every objective")
    if ref is not None:
        missing = [n for n in names if n not in ref]
        if missing:
            raise SpaceError("reference", f"names no value for {', '.join(missing)}")
        for o in metrics:
            t = target.get(o.name)
            if t is not None and (
                (o.goal == "maximize" and ref[o.name] >= t) or (o.goal == "minimize" and ref[o.name] <= t)
            ):
                raise SpaceError(
                    f"reference.{o.name}",
                    f"{ref[o.name]:g} is on the wrong side of the target {t:g}: the reference must be worse"
                    f" ({'below' if o.goal == 'maximize' else 'above'} it; {o.name} is to {o.goal})",
                )
