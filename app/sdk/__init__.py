"""What users import: `Trial` (inside a trainable), `Client` (the REST client), `run` and `resume` (a
search run, or taken up again, in this process, for notebooks) and `pareto` (a search's Pareto front read
from its database) from `quanta.sdk.local`, and the states a search or trial reports (`SearchStatus`,
`TrialStatus`, from `quanta.status`).

Names are imported on first use (module `__getattr__`): `from quanta.sdk import Trial` inside a trial
process does not import httpx, and `from quanta.sdk import Client` (or the `quanta` command) does not
import torch."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from quanta.sdk.client import ApiError, Client, Search
    from quanta.sdk.local import LocalRun, pareto, resume, run
    from quanta.sdk.trial import ControllerGone, Trial, TrialStopped
    from quanta.status import SearchStatus, TrialStatus

__all__ = [
    "ApiError",
    "Client",
    "ControllerGone",
    "LocalRun",
    "Search",
    "SearchStatus",
    "Trial",
    "TrialStatus",
    "TrialStopped",
    "pareto",
    "resume",
    "run",
]

_HOME = {
    "Trial": "quanta.sdk.trial",
    "TrialStopped": "quanta.sdk.trial",
    "ControllerGone": "quanta.sdk.trial",
    "Client": "quanta.sdk.client",
    "Search": "quanta.sdk.client",
    "ApiError": "quanta.sdk.client",
    "run": "quanta.sdk.local",
    "resume": "quanta.sdk.local",
    "pareto": "quanta.sdk.local",
    "LocalRun": "quanta.sdk.local",
    "SearchStatus": "quanta.status",
    "TrialStatus": "quanta.status",
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'quanta.sdk' has no attribute {name!r}")
