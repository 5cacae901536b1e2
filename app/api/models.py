"""The API's public shapes (what the JSON contract promises). Table rows live in `app.db.models`;
these are built from them in `app.api.crud`."""

from __future__ import annotations

from typing import Any

from sqlmodel import Field, SQLModel


class Message(SQLModel):
    detail: str


class ErrorItem(SQLModel):
    loc: str = Field(description="dotted path of the bad field, e.g. budget.max_steps")
    msg: str


class SpecErrors(SQLModel):
    detail: list[ErrorItem]


# ---- searches ----------------------------------------------------------------------------------


class BestOut(SQLModel):
    trial_id: int | None
    metric: float | None
    params: dict[str, Any] | None


class ProgressOut(SQLModel):
    trials_created: int
    trials_done: int
    max_trials: int | None


class MetricOut(SQLModel):
    name: str | None
    goal: str | None
    target: float | None


class SearchOut(SQLModel):
    id: int
    name: str
    status: str = Field(description="queued | running | paused | completed | stopped | failed")
    created_at: float
    started_at: float | None
    finished_at: float | None
    reached: bool
    seconds_to_target: float | None
    best: BestOut | None
    progress: ProgressOut
    metric: MetricOut
    policy: str | None
    spec: dict[str, Any]
    error: str | None = None


class SearchList(SQLModel):
    items: list[SearchOut]
    total: int


class Deleting(SQLModel):
    id: int
    status: str = "deleting"


# ---- trials ------------------------------------------------------------------------------------


class TrialOut(SQLModel):
    id: int
    search_id: int
    number: int
    params: dict[str, Any]
    status: str = Field(description="queued | running | completed | killed | failed")
    metric: float | None
    best_metric: float | None
    steps: int
    device_seconds: float
    retries: int
    error: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None


class TrialList(SQLModel):
    items: list[TrialOut]
    total: int


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


# ---- cluster -----------------------------------------------------------------------------------


class DeviceOut(SQLModel):
    id: str
    node: str
    kind: str
    memory_mb: float | None
    running: list[int]
    parked: list[int]


class PairOut(SQLModel):
    a: int
    b: int
    rate_a: float | None
    rate_b: float | None
    solo_a: float | None
    solo_b: float | None
    gain: float | None = Field(description="rate_a/solo_a + rate_b/solo_b: above 1 means packing pays")


class ClusterOut(SQLModel):
    devices: list[DeviceOut]
    pairs: list[PairOut]
    nodes: list[str]
    at: float | None


class Health(SQLModel):
    status: str
    controller: str
