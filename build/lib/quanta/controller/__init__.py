"""The controller: drives one runtime for every active search (and trace job). `Controller` (core.py) is
the entry point; its parts live in the sibling modules (see core.py's docstring)."""

from quanta.controller.core import Controller
from quanta.controller.options import ControllerOptions
from quanta.controller.state import SearchState, TrialState

__all__ = ["Controller", "ControllerOptions", "SearchState", "TrialState"]
