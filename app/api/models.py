"""The API's own shapes: errors, list envelopes, health. The read models it returns (`SearchOut`,
`TrialOut`, ...) are the store's, in the modules of `quanta.db.public`, re-exported here."""

from __future__ import annotations

from sqlmodel import Field, SQLModel

from quanta.db.public.cluster import ClusterOut, DeviceOut, PairOut
from quanta.db.public.searches import BestOut, MetricOut, ProgressOut, SearchOut, SearchSummary
from quanta.db.public.trials import (
    BestCurveOut,
    CurvePoint,
    CurvesOut,
    QuantumOut,
    TimelineItem,
    TimelineOut,
    TrialDetail,
    TrialOut,
)

__all__ = [
    "BestCurveOut",
    "BestOut",
    "ClusterOut",
    "CurvePoint",
    "CurvesOut",
    "Deleting",
    "DeviceOut",
    "ErrorItem",
    "Health",
    "Message",
    "MetricOut",
    "PairOut",
    "ProgressOut",
    "QuantumOut",
    "SearchList",
    "SearchOut",
    "SearchSummary",
    "SpecErrors",
    "TimelineItem",
    "TimelineOut",
    "TrialDetail",
    "TrialList",
    "TrialOut",
]


class Message(SQLModel):
    detail: str


class ErrorItem(SQLModel):
    loc: str = Field(description="dotted path of the bad field, e.g. budget.max_steps")
    msg: str


class SpecErrors(SQLModel):
    detail: list[ErrorItem]


# ---- envelopes of the routes -----------------------------------------------------------------


class SearchList(SQLModel):
    items: list[SearchSummary] = Field(description="searches without their specs (GET /searches/{id} has it)")
    total: int


class Deleting(SQLModel):
    id: int
    status: str = "deleting"


class TrialList(SQLModel):
    items: list[TrialOut]
    total: int


class Health(SQLModel):
    status: str
    controller: str
