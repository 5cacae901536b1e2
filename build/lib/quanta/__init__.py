"""Quanta, imported as `quanta` (its source lives in the repository's `app/` folder).

What a data scientist imports from the top: `Trial` (inside a trainable), `run` (a search run in this
process, for notebooks), `Client` (the REST client) and the rest of `quanta.sdk`'s names, each imported
on first use, so `import quanta` costs nothing and `from quanta import Trial` in a trial process does not
import httpx. `__version__` is the installed distribution's version."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from quanta.sdk import (
        ApiError,
        Client,
        ControllerGone,
        LocalRun,
        Search,
        SearchStatus,
        Trial,
        TrialStatus,
        TrialStopped,
        resume,
        run,
    )

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
    "__version__",
    "resume",
    "run",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("quanta")
        except PackageNotFoundError:  # run from a source tree that was never installed
            return "0+unknown"
    if name in __all__:
        import quanta.sdk

        return getattr(quanta.sdk, name)
    raise AttributeError(f"module 'quanta' has no attribute {name!r}")
