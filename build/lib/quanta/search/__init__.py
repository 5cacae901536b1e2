"""Search: spaces, searchers and the models behind them.

Importing this package defers hyperopt's ATPE module (`defer_hyperopt_atpe`): `import hyperopt`
imports every algorithm it ships, and ATPE alone pulls in scipy.stats (over half of hyperopt's import
time, about 0.5 s of a cold `quanta run` on a quiet 2-core machine and several seconds on a busy one),
while Quanta uses only its TPE, random search and spaces. Every module here that imports hyperopt
imports this package first, so the deferral is in place before hyperopt's own import runs.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from typing import Any


def defer_hyperopt_atpe() -> None:
    """Register `hyperopt.atpe` before hyperopt is imported as a module whose code runs on the first
    access of one of its names (a module `__getattr__`, PEP 562): `hyperopt/__init__`'s
    `from . import atpe` finds it in `sys.modules` and imports nothing, and whoever uses ATPE gets the
    real module. Does nothing when hyperopt is already imported, missing, or laid out differently (then
    it is imported as usual)."""
    if "hyperopt" in sys.modules or "hyperopt.atpe" in sys.modules:
        return
    try:
        package = importlib.util.find_spec("hyperopt")  # a top-level spec: imports nothing
    except (ImportError, ValueError):
        return
    if package is None or not package.submodule_search_locations:
        return
    spec = importlib.machinery.PathFinder.find_spec("hyperopt.atpe", list(package.submodule_search_locations))
    if spec is None or spec.loader is None:
        return
    loader = spec.loader
    module = importlib.util.module_from_spec(spec)

    def load(name: str) -> Any:
        # Dunder probes (the import system's, inspect's, pickle's) must not run the module's code.
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        delattr(module, "__getattr__")
        loader.exec_module(module)
        return getattr(module, name)

    setattr(module, "__getattr__", load)  # noqa: B010 (a module's PEP 562 hook)
    sys.modules["hyperopt.atpe"] = module


defer_hyperopt_atpe()
