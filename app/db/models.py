"""What is remembered: SQLModel tables. The database is the truth; the controller's memory is a
cache of it that a restart rebuilds from here."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, Text
from sqlmodel import Field, SQLModel

from app.status import SearchStatus, TrialStatus


def utcnow() -> datetime:
    return datetime.now(UTC)


class SearchRow(SQLModel, table=True):
    __tablename__ = "search"
    id: int | None = Field(default=None, primary_key=True)
    name: str
    spec: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    status: str = Field(default=SearchStatus.QUEUED, index=True)  # a SearchStatus value
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    best_trial_id: int | None = None
    best_metric: float | None = None
    best_params: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    reached: bool = False
    reached_at: float | None = None
    seconds_to_target: float | None = None
    trials_created: int = 0
    command: str | None = Field(default=None, index=True)  # stop | pause | resume, for the controller
    policy_state: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    error: str | None = Field(default=None, sa_column=Column(Text))


class TrialRow(SQLModel, table=True):
    __tablename__ = "trial"
    id: int | None = Field(default=None, primary_key=True)
    search_id: int = Field(foreign_key="search.id", index=True)
    number: int  # 0, 1, 2, ... within its search (the searcher's trial id)
    params: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    vals: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    status: str = Field(default=TrialStatus.QUEUED, index=True)  # a TrialStatus value
    steps: int = 0
    metric: float | None = None  # last reported objective
    best_metric: float | None = None
    device_seconds: float = 0.0
    retries: int = 0
    devices: str = ""
    checkpoint_step: int | None = None
    error: str | None = Field(default=None, sa_column=Column(Text))
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    priority: float = 0.0
    p_reach: float | None = None
    command: str | None = Field(default=None, index=True)  # stop, for the controller


class ReportRow(SQLModel, table=True):
    __tablename__ = "report"
    id: int | None = Field(default=None, primary_key=True)
    trial_id: int = Field(foreign_key="trial.id", index=True)
    search_id: int = Field(index=True)
    step: int
    at: float
    metrics: dict[str, float] = Field(sa_column=Column(JSON, nullable=False))
    objective: float | None = None


class QuantumRow(SQLModel, table=True):
    """One measured stretch of computing: which trial ran where, when, how fast, beside whom."""

    __tablename__ = "quantum"
    id: int | None = Field(default=None, primary_key=True)
    trial_id: int = Field(index=True)
    search_id: int = Field(index=True)
    devices: str
    started_at: float
    ended_at: float
    steps: int
    rate: float
    rss_mb: float
    packed_with: str = ""


class LatencyRow(SQLModel, table=True):
    """Mechanism latencies (park, resume, start, migrate) in milliseconds."""

    __tablename__ = "latency"
    id: int | None = Field(default=None, primary_key=True)
    trial_id: int = Field(index=True)
    kind: str = Field(index=True)
    ms: float
    at: float


class PairRow(SQLModel, table=True):
    """Measured packing of two trials on one device: each one's rate beside the other."""

    __tablename__ = "pair"
    id: int | None = Field(default=None, primary_key=True)
    trial_a: int = Field(index=True)
    trial_b: int = Field(index=True)
    rate_a: float
    rate_b: float
    at: float


class IntentRow(SQLModel, table=True):
    """The actions of a round, recorded before they are applied (so a restarted controller knows
    what it asked for)."""

    __tablename__ = "intent"
    id: int | None = Field(default=None, primary_key=True)
    round_no: int = Field(index=True)
    at: float
    actions: list[dict[str, Any]] = Field(sa_column=Column(JSON, nullable=False))


class ControllerStateRow(SQLModel, table=True):
    """Singleton-ish key/value state of the controller (round counter, policy state)."""

    __tablename__ = "controller_state"
    key: str = Field(primary_key=True)
    value: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))


class TokenRow(SQLModel, table=True):
    """An API token, stored as its sha256 hex digest (the token itself is never stored)."""

    __tablename__ = "token"
    id: int | None = Field(default=None, primary_key=True)
    name: str = "default"
    token_hash: str = Field(index=True, unique=True)
    created_at: float
