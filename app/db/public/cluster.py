"""Read models of the cluster (`GET /cluster`): its devices with the trials running and parked on each,
and the packed pairs with their measured rates, as the controller last published them (`ClusterView`).
The field names are the API's JSON contract (see `quanta.db.public`).
"""

from __future__ import annotations

from sqlmodel import Field, SQLModel


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
