"""Distributed mode's tables and `DbCluster`, which implements both sides' protocols
(`app.executor.runtime.cluster.ClusterView` for the controller, `NodeLedger` for node agents) with
SQLModel, on PostgreSQL (SQLite works for one machine and tests).

Tables: `node` (registration, heartbeat, residency), `node_event` (append-only, numbered per node),
`assignment` (trial -> node, epoch: fencing), `applied` ((node, trial, round) a node has applied:
redelivered tasks are ignored), `event_cursor` (per node, how far the controller has read its events).
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, Column, UniqueConstraint, func, or_
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Field, Session, SQLModel, col, create_engine, select

from app.db.launch import launch_from_db
from app.db.models import ReportRow
from app.db.store import make_engine
from app.executor.actions import TrialLaunch
from app.executor.wire import (
    Assignment,
    EventRecord,
    NodeDevice,
    NodeInfo,
    NodeResidency,
    residency_from_json,
    residency_to_json,
)

log = logging.getLogger("quanta.db.cluster")

class NodeRow(SQLModel, table=True):
    __tablename__ = "node"
    name: str = Field(primary_key=True)
    incarnation: str
    devices: list[dict[str, Any]] = Field(sa_column=Column(JSON, nullable=False))
    beat: int = 0
    heartbeat_at: float = 0.0
    started_at: float = 0.0
    residency: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    seq: int = 0
    status: str = "up"  # up | dead | left


class NodeEventRow(SQLModel, table=True):
    __tablename__ = "node_event"
    __table_args__ = (UniqueConstraint("node", "seq", name="uq_node_event_seq"),)
    id: int | None = Field(default=None, primary_key=True)
    node: str = Field(index=True)
    seq: int
    epoch: int = 0
    trial_id: int = Field(index=True)
    kind: str
    data: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))


class AssignmentRow(SQLModel, table=True):
    __tablename__ = "assignment"
    trial_id: int = Field(primary_key=True)
    node: str
    epoch: int
    at: float


class EventCursorRow(SQLModel, table=True):
    """The controller's event cursor, per node: the last event seq it has handled (stored facts are
    idempotent up to here) and the last it has returned from `poll` (None: none yet)."""

    __tablename__ = "event_cursor"
    node: str = Field(primary_key=True)
    handled: int | None = None
    returned: int | None = None


class AppliedRow(SQLModel, table=True):
    __tablename__ = "applied"
    __table_args__ = (UniqueConstraint("node", "trial_id", "round_no", name="uq_applied"),)
    id: int | None = Field(default=None, primary_key=True)
    node: str
    trial_id: int
    round_no: int
    at: float


def _engine(url: str) -> Engine:
    if url.startswith(("postgresql://", "postgresql+psycopg://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
        # Fail fast when the database is unreachable: the node's lease clock keeps running.
        return create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": 3})
    return make_engine(url)


class DbCluster:
    """`ClusterView` and `NodeLedger` over one engine. `workdir` is the shared checkpoint store (for
    building trial launches)."""

    def __init__(self, url: str | None = None, workdir: str | Path = ".quanta", *, engine: Engine | None = None):
        if engine is None:
            if url is None:
                raise ValueError("DbCluster needs a database URL or an engine")
            engine = _engine(url)
        self.engine = engine
        self.workdir = Path(workdir)
        SQLModel.metadata.create_all(self.engine)

    def session(self) -> Session:
        return Session(self.engine, expire_on_commit=False)

    # ---- node side (NodeLedger) ----------------------------------------------------------------

    def register(self, node: str, incarnation: str, devices: Sequence[NodeDevice]) -> int:
        now = time.time()
        device_rows = [d.to_dict() for d in devices]
        with self.session() as s:
            last = s.exec(select(func.max(NodeEventRow.seq)).where(NodeEventRow.node == node)).one() or 0
            row = s.get(NodeRow, node)
            if row is None:
                row = NodeRow(name=node, incarnation=incarnation, devices=device_rows)
            row.incarnation, row.devices, row.status = incarnation, device_rows, "up"
            row.started_at = row.heartbeat_at = now
            row.residency = {}
            row.seq = max(row.seq, last)
            row.beat += 1
            s.add(row)
            s.commit()
            return row.seq

    def beat(
        self,
        node: str,
        incarnation: str,
        residency: Mapping[int, NodeResidency],
        events: Iterable[EventRecord],
    ) -> None:
        events = list(events)
        with self.session() as s:
            row = s.get(NodeRow, node)
            if row is None:
                raise KeyError(f"node {node} is not registered")
            if row.incarnation != incarnation:
                log.warning("node %s: another worker registered under this name (%s)", node, row.incarnation)
            if events:
                seqs = [e.seq for e in events]
                have = set(
                    s.exec(select(NodeEventRow.seq).where(NodeEventRow.node == node, col(NodeEventRow.seq).in_(seqs)))
                )  # written by an attempt whose commit we did not hear about
                s.add_all(
                    NodeEventRow(node=node, seq=e.seq, epoch=e.epoch, trial_id=e.trial_id, kind=e.kind, data=e.data)
                    for e in events
                    if e.seq not in have
                )
                row.seq = max(row.seq, max(seqs))
            row.incarnation = incarnation
            row.beat += 1
            row.heartbeat_at = time.time()
            row.residency = residency_to_json(residency)
            row.status = "up"
            s.add(row)
            s.commit()

    def leave(self, node: str, incarnation: str) -> None:
        with self.session() as s:
            row = s.get(NodeRow, node)
            if row is not None and row.incarnation == incarnation:
                row.status, row.residency = "left", {}
                row.beat += 1
                s.add(row)
                s.commit()

    def claim(self, node: str, trial_id: int, round_no: int) -> bool:
        with self.session() as s:
            s.add(AppliedRow(node=node, trial_id=trial_id, round_no=round_no, at=time.time()))
            try:
                s.commit()
            except IntegrityError:
                s.rollback()
                return False
            return True

    def assignments_of(self, trial_ids: Sequence[int]) -> dict[int, Assignment]:
        if not trial_ids:
            return {}
        with self.session() as s:
            rows = s.exec(select(AssignmentRow).where(col(AssignmentRow.trial_id).in_(list(trial_ids))))
            return {r.trial_id: Assignment(r.trial_id, r.node, r.epoch) for r in rows}

    def launch(self, trial_id: int, epoch: int) -> TrialLaunch:
        with self.session() as s:
            return launch_from_db(s, trial_id, self.workdir, epoch=epoch)

    # ---- controller side (ClusterView) ---------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        with self.session() as s:
            rows = s.exec(select(NodeRow).order_by(NodeRow.name))
            return [
                NodeInfo(
                    r.name,
                    r.incarnation,
                    tuple(NodeDevice.from_dict(d) for d in r.devices),
                    r.beat,
                    r.heartbeat_at,
                    residency_from_json(r.residency or {}),
                    r.seq,
                    r.status,
                )
                for r in rows
            ]

    def events_since(self, cursor: dict[str, int], limit: int = 1000) -> list[EventRecord]:
        """New event rows, merged across nodes by event time (each node's rows stay in seq order)."""
        with self.session() as s:
            conds: list[Any] = [(col(NodeEventRow.node) == n) & (col(NodeEventRow.seq) > c) for n, c in cursor.items()]
            if cursor:
                conds.append(col(NodeEventRow.node).not_in(list(cursor)))
            q = select(NodeEventRow)
            if conds:
                q = q.where(or_(*conds))
            rows = list(s.exec(q.order_by(col(NodeEventRow.node), col(NodeEventRow.seq)).limit(limit)))
        by_node: dict[str, list[EventRecord]] = {}
        for r in rows:
            by_node.setdefault(r.node, []).append(EventRecord(r.node, r.seq, r.epoch, r.trial_id, r.kind, r.data))
        return list(heapq.merge(*by_node.values(), key=lambda e: float(e.data.get("at", 0.0))))

    def assignments(self) -> dict[int, Assignment]:
        with self.session() as s:
            return {r.trial_id: Assignment(r.trial_id, r.node, r.epoch) for r in s.exec(select(AssignmentRow))}

    def assign(self, trial_id: int, node: str) -> int:
        with self.session() as s:
            row = s.get(AssignmentRow, trial_id)
            if row is None:
                row = AssignmentRow(trial_id=trial_id, node=node, epoch=0, at=0.0)
            row.node, row.epoch, row.at = node, row.epoch + 1, time.time()
            s.add(row)
            s.commit()
            return row.epoch

    def mark_node(self, node: str, status: str) -> None:
        with self.session() as s:
            row = s.get(NodeRow, node)
            if row is not None and row.status != status:
                row.status = status
                s.add(row)
                s.commit()

    def load_cursor(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {"handled": {}, "returned": {}}
        with self.session() as s:
            for r in s.exec(select(EventCursorRow)):
                if r.handled is not None:
                    out["handled"][r.node] = r.handled
                if r.returned is not None:
                    out["returned"][r.node] = r.returned
        return out

    def save_cursor(self, cursor: dict[str, dict[str, int]]) -> None:
        handled, returned = cursor.get("handled", {}), cursor.get("returned", {})
        with self.session() as s:
            rows = {r.node: r for r in s.exec(select(EventCursorRow))}
            for node in {*handled, *returned, *rows}:
                row = rows.get(node) or EventCursorRow(node=node)
                row.handled, row.returned = handled.get(node), returned.get(node)
                s.add(row)
            s.commit()

    def has_report(self, trial_id: int, step: int, at: float) -> bool:
        with self.session() as s:
            q = select(ReportRow.id).where(ReportRow.trial_id == trial_id, ReportRow.step == step, ReportRow.at == at)
            return s.exec(q.limit(1)).first() is not None
