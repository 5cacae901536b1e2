"""What users import: `Trial` (inside a trainable), `Client` (the REST client), `run` and `resume` (a
search run, or taken up again, in this process, for notebooks: `app.sdk.local`), and the states a
search or trial reports (`SearchStatus`, `TrialStatus`, from `app.status`).

Names are imported on first use (module `__getattr__`): `from app.sdk import Trial` inside a trial
process does not import httpx, and `from app.sdk import Client` (or the `quanta` command) does not
import torch."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.sdk.client import ApiError, Client, Search
    from app.sdk.local import LocalRun, resume, run
    from app.sdk.trial import ControllerGone, Trial, TrialStopped
    from app.status import SearchStatus, TrialStatus

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
    "resume",
    "run",
]

_HOME = {
    "Trial": "app.sdk.trial",
    "TrialStopped": "app.sdk.trial",
    "ControllerGone": "app.sdk.trial",
    "Client": "app.sdk.client",
    "Search": "app.sdk.client",
    "ApiError": "app.sdk.client",
    "run": "app.sdk.local",
    "resume": "app.sdk.local",
    "LocalRun": "app.sdk.local",
    "SearchStatus": "app.status",
    "TrialStatus": "app.status",
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'app.sdk' has no attribute {name!r}")
