"""The search spec: what a user posts (YAML or JSON) to start a search.

`load_spec(path)` / `parse_spec(text_or_mapping)` return a validated, immutable `SearchSpec` or raise
`SpecError` whose `errors` list names each bad field by its dotted path (``budget.max_steps``,
``space.optimizer.choice[0].momentum``) with the reason. Nothing here touches a database or a device.

The modules: `model` (`SearchSpec` and its cross-field rules), `blocks` (metric, budget, resources,
tracking), `objectives` (several objectives, constraints, targets), `limits` (nesting and space width,
checked on plain data first), `reading` (text, files, stored rows, local placement), `errors`.
"""

from quanta.spec.blocks import (
    MAX_DEVICES_PER_TRIAL,
    MAX_PARALLELISM,
    BudgetSpec,
    MetricSpec,
    ResourcesSpec,
    TrackingSpec,
)
from quanta.spec.errors import SpecError
from quanta.spec.limits import MAX_DEPTH, MAX_OPTIONS, MAX_PARAMETERS, nesting_problem, space_width_check
from quanta.spec.model import SearchSpec
from quanta.spec.objectives import HYPERVOLUME, ConstraintSpec, ObjectiveSpec
from quanta.spec.reading import decode_spec_text, load_spec, parse_spec, place_locally, spec_from_stored

__all__ = [
    "HYPERVOLUME",
    "MAX_DEPTH",
    "MAX_DEVICES_PER_TRIAL",
    "MAX_OPTIONS",
    "MAX_PARALLELISM",
    "MAX_PARAMETERS",
    "BudgetSpec",
    "ConstraintSpec",
    "MetricSpec",
    "ObjectiveSpec",
    "ResourcesSpec",
    "SearchSpec",
    "SpecError",
    "TrackingSpec",
    "decode_spec_text",
    "load_spec",
    "nesting_problem",
    "parse_spec",
    "place_locally",
    "space_width_check",
    "spec_from_stored",
]
