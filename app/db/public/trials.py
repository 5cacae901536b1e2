"""Read models of trials: `TrialOut` (as pages list one), `TrialDetail` (with its learning curve and its
quanta), and a search's views over its trials: `CurvesOut` (every trial's objective by step),
`TimelineOut` (the quanta on the devices) and `BestCurveOut` (best so far over time). Floats are finite
or null (`finite`), parameters bounded in depth (`shown`). The field names are the API's JSON contract
(see `quanta.db.public`).
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Field, SQLModel

from quanta.db.models import TrialRow
from quanta.db.public.readable import finite, shown
from quanta.status import TrialStatus


class TrialOut(SQLModel):
    id: int
    search_id: int
    number: int
    params: dict[str, Any]
    status: TrialStatus
    metric: float | None
    best_metric: float | None
    steps: int
    device_seconds: float
    retries: int
    error: str | None
    reason: str | None = Field(
        default=None, description="why a stopped or killed trial ended early (killed: the verdict)"
    )
    created_at: float
    started_at: float | None
    finished_at: float | None
    parent_id: int | None = Field(default=None, description="the trial whose state it started from (a fork)")
    fork_step: int | None = Field(default=None, description="that trial's step then (null while it is taken)")

    @classmethod
    def from_row(cls, t: TrialRow) -> TrialOut:
        assert t.id is not None
        return cls(
            id=t.id,
            search_id=t.search_id,
            number=t.number,
            params=shown(t.params),
            status=TrialStatus(t.status),
            metric=finite(t.metric),
            best_metric=finite(t.best_metric),
            steps=t.steps,
            device_seconds=round(t.device_seconds, 3),
            retries=t.retries,
            error=t.error,
            reason=t.reason,
            created_at=t.created_at,
            started_at=t.started_at,
            finished_at=t.finished_at,
            parent_id=t.parent_id,
            fork_step=t.fork_step,
        )


class CurvePoint(SQLModel):
    step: int
    at: float
    metrics: dict[str, float | None]
    objective: float | None


class QuantumOut(SQLModel):
    devices: list[str]
    started_at: float
    ended_at: float
    steps: int
    rate: float
    packed_with: list[int]


class TrialDetail(TrialOut):
    curve: list[CurvePoint]
    quanta: list[QuantumOut]


# ---- search views ------------------------------------------------------------------------------


class CurvesOut(SQLModel):
    trials: dict[str, list[tuple[int, float]]] = Field(description="trial id -> [[step, objective], ...]")
    status: dict[str, str]


class TimelineItem(SQLModel):
    trial_id: int
    devices: list[str]
    started_at: float
    ended_at: float
    packed_with: list[int]


class TimelineOut(SQLModel):
    items: list[TimelineItem]
    t0: float | None


class BestCurveOut(SQLModel):
    points: list[tuple[float, float]] = Field(description="[[seconds since the search started, best so far], ...]")
