"""What every tracker is: `TrialInfo` (what a run is named and configured from), the `Tracker` protocol,
and `flat_params` (a nested configuration as the flat hyperparameters trackers take)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class TrialInfo:
    """A trial as its run is named and configured: `{search_name}-{search_id}` groups a search's runs,
    `trial-{number}` names one; `params` is its configuration (nested choices as nested mappings)."""

    search_id: int
    search_name: str
    trial_id: int
    number: int
    params: Mapping[str, Any]

    @property
    def group(self) -> str:
        return f"{self.search_name}-{self.search_id}"

    @property
    def name(self) -> str:
        return f"trial-{self.number}"


class Tracker(Protocol):
    """One tracker for one search, called from the hub's thread only, in order: `start` once per trial
    before its first `log`, `end` once when it ended, `close` at the end of the search or the controller."""

    def start(self, trial: TrialInfo) -> None: ...
    def log(self, trial_id: int, step: int, at: float, metrics: Mapping[str, float]) -> None: ...
    def end(self, trial_id: int, status: str) -> None: ...
    def close(self) -> None: ...


def flat_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str | int | float | bool]:
    """`{"optimizer": {"name": "sgd", "momentum": 0.9}}` -> `{"optimizer.name": "sgd", "optimizer.momentum":
    0.9}`; lists and other values as their JSON text, None as "null"."""
    out: dict[str, str | int | float | bool] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_params(value, f"{name}."))
        elif isinstance(value, bool | int | float | str):
            out[name] = value
        else:
            out[name] = json.dumps(value, default=str)
    return out


def numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a report (a value stored as null, non-finite when reported, is left out)."""
    return {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }
