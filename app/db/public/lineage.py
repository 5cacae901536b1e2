"""Read models of forks and lineage: what a user sends to fork a trial (`ForkRequest`, with its bounds),
a fork request as the controller carries it out (`ForkOut`), a trial's changes of its mutable parameters
(`ConfigChangeOut`) and a search's family tree (`LineageOut`). The field names are the API's JSON
contract (see `quanta.db.public`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic import Field as PydanticField
from sqlmodel import SQLModel

from quanta.db.models import ConfigChangeRow, ForkRow
from quanta.status import TrialStatus

MAX_FORK_VALUES = 256  # as many as a space has parameters at most (`quanta.spec.MAX_PARAMETERS`)
MAX_FORK_STEPS = 10**12  # as `budget.max_steps`


class ForkRequest(BaseModel):
    """`POST /trials/{id}/fork`: new values for some of the search's mutable parameters (`set`, by dotted
    name; none: the same configuration) and `steps`, the mini-batches the new trial runs beyond the step
    it starts at (none: up to the search's `budget.max_steps`, as its parent)."""

    model_config = ConfigDict(extra="forbid")

    values: dict[str, Any] = PydanticField(
        default_factory=dict,
        alias="set",
        max_length=MAX_FORK_VALUES,
        description='mutable parameter -> its new value, e.g. {"lr": 0.001}',
    )
    steps: int | None = PydanticField(
        default=None, ge=1, le=MAX_FORK_STEPS, description="mini-batches to run beyond the fork's step"
    )


ForkStatus = Literal["pending", "copying", "done", "failed"]


class ForkOut(SQLModel):
    """A fork request as the controller carries it out: pending (not taken up yet), copying (trial
    `child_id` exists and waits for the parent's state), done (`fork_step` is where it starts), failed
    (`error` says why; the parent is as it was)."""

    id: int
    search_id: int
    parent_id: int
    child_id: int | None
    values: dict[str, Any]
    steps: int | None
    status: ForkStatus
    error: str | None
    fork_step: int | None
    requested_at: float
    finished_at: float | None

    @classmethod
    def from_row(cls, row: ForkRow, fork_step: int | None = None) -> ForkOut:
        assert row.id is not None
        status: ForkStatus = row.status if row.status in ("pending", "copying", "done") else "failed"  # type: ignore[assignment]
        return cls(
            id=row.id,
            search_id=row.search_id,
            parent_id=row.parent_id,
            child_id=row.child_id,
            values=dict(row.values or {}),
            steps=row.steps,
            status=status,
            error=row.error,
            fork_step=fork_step,
            requested_at=row.requested_at,
            finished_at=row.finished_at,
        )


class ConfigChangeOut(SQLModel):
    """A trial's mutable parameters changed at `step` to `values`: it started so from trial `source_id`'s
    state (`cause` "fork"), they were changed while it ran ("set"), or it took population member
    `source_id`'s state with them ("exploit")."""

    step: int
    at: float
    values: dict[str, Any]
    cause: str
    source_id: int | None

    @classmethod
    def from_row(cls, row: ConfigChangeRow) -> ConfigChangeOut:
        return cls(step=row.step, at=row.at, values=dict(row.values), cause=row.cause, source_id=row.source_id)


class LineageTrial(SQLModel):
    """One trial in its search's family tree: its parent and the parent's step it started from (none for a
    trial the searcher proposed), where it is now, and every change of its mutable parameters."""

    id: int
    number: int
    status: TrialStatus
    parent_id: int | None
    fork_step: int | None
    steps: int
    metric: float | None
    best_metric: float | None
    params: dict[str, Any]
    changes: list[ConfigChangeOut]


class LineageOut(SQLModel):
    """`GET /searches/{id}/lineage`: every trial of the search with its parent and fork step (a forest:
    the searcher's trials are its roots), the mutable parameters, and the fork requests made."""

    search_id: int
    mutable: list[str]
    trials: list[LineageTrial]
    forks: list[ForkOut]
