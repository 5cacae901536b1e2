"""`DbCluster`, which implements both sides' protocols of distributed mode
(`quanta.executor.runtime.cluster.ClusterView` for the controller, `NodeLedger` for node agents) with
SQLModel, on PostgreSQL (SQLite works for one machine and tests).

Its tables (in app/db/models.py, created by the migrations with the rest of the schema): `node`
(registration, heartbeat, residency), `node_event` (append-only, numbered per node), `assignment` (trial
-> node, epoch: fencing), `applied` ((node, trial, round) a node has applied: redelivered tasks are
ignored), `event_cursor` (per node, how far the controller has read its events).
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import func, or_
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from quanta.db.engine import make_engine
from quanta.db.launch import launch_from_db
from quanta.db.migrate import upgrade
from quanta.db.models import AppliedRow, AssignmentRow, EventCursorRow, NodeEventRow, NodeRow, ReportRow
from quanta.executor.actions import TrialLaunch
from quanta.executor.wire import (
    Assignment,
    EventRecord,
    NodeDevice,
    NodeInfo,
    NodeResidency,
    residency_from_json,
    residency_to_json,
)

log = logging.getLogger("quanta.db.cluster")


class DbCluster:
    """`ClusterView` and `NodeLedger` over one engine. `workdir` is the shared checkpoint store (for
    building trial launches)."""

    def __init__(self, url: str | None = None, workdir: str | Path = ".quanta", *, engine: Engine | None = None):
        if engine is None:
            if url is None:
                raise ValueError("DbCluster needs a database URL or an engine")
            engine = make_engine(url, connect_timeout_s=3)  # fail fast: the node's lease clock keeps running
        self.engine = engine
        self.workdir = Path(workdir)
        upgrade(self.engine)  # a node agent may be the first to open the database

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
