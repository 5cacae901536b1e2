"""What the stores raise when they refuse a request: `Conflict`, the request does not fit the row's
current state (raised by `Store` and `MemoryStore` alike, for searches, trials, users and tokens; the API
answers 409), and `BudgetError`, a resume's raised budget is out of the spec's bounds (the API answers 422
naming the field).
"""

from __future__ import annotations


class Conflict(Exception):
    """The request does not fit the row's current state (e.g. pausing a completed search)."""


class BudgetError(ValueError):
    """A resume's budget is out of bounds: `field` (`max_trials` or `max_seconds`) and why."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
