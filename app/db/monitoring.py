"""`MonitoringQueries`: what the service reports about itself and the cluster, in SQL (part of `Store`;
`MemoryStore`, the simulator's store, serves no API: see `quanta.db.protocol`).

`ping` (the database answers: the health check), `metric_facts` (the counts and rows the Prometheus
metrics are computed from, `quanta.api.metrics`) and `cluster_out` (the devices and packed pairs as the
controller last published them, `quanta.db.public.cluster`). Reads only, each one short transaction;
with an `owner_id`, what concerns searches is that user's only.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, text
from sqlmodel import Session, col, select

from quanta.db.models import ClusterView, LatencyRow, QuantumRow, SearchRow, TrialRow
from quanta.db.public.cluster import ClusterOut, DeviceOut, PairOut
from quanta.db.public.readable import device_list, parsed_spec
from quanta.status import TrialStatus


@dataclass(frozen=True)
class MetricFacts:
    """Counts and rows the Prometheus metrics are computed from (`quanta.api.metrics`)."""

    trials_by_status: dict[str, int]
    searches_by_status: dict[str, int]
    quanta_total: int
    recent_quanta: list[tuple[list[str], float, float]]  # (devices, started_at, ended_at)
    latencies: list[tuple[str, float]]  # (kind, ms)
    best_metrics: list[tuple[int, str, str, float]]  # (search id, search name, metric name, best value)


def _gain(p: PairOut) -> float | None:
    ra, rb, sa, sb = p.rate_a, p.rate_b, p.solo_a, p.solo_b
    if ra is None or rb is None or not sa or not sb:
        return None
    return round(ra / sa + rb / sb, 4)


class MonitoringQueries:
    """Mixed into `Store`, which provides `session()` and `cluster_view()`."""

    def session(self) -> Session:
        raise NotImplementedError

    def cluster_view(self) -> ClusterView | None:
        raise NotImplementedError

    # ---- the service's own facts -------------------------------------------------------------------

    def ping(self) -> None:
        """Raises when the database does not answer."""
        with self.session() as s:
            s.connection().execute(text("SELECT 1"))

    def metric_facts(self, since: float, owner_id: int | None = None) -> MetricFacts:
        """What the Prometheus metrics are computed from, read in one transaction; `recent` holds the
        quanta that ended at or after `since`. With `owner_id`, trial and search counts and best metrics
        are of that user's searches only (device figures stay the cluster's)."""
        with self.session() as s:
            tq = select(TrialRow.status, func.count())
            sq = select(SearchRow.status, func.count())
            bq = select(SearchRow).where(col(SearchRow.best_metric).is_not(None))
            if owner_id is not None:
                mine = SearchRow.owner_id == owner_id
                tq = tq.join(SearchRow, col(SearchRow.id) == col(TrialRow.search_id)).where(mine)
                sq = sq.where(mine)
                bq = bq.where(mine)
            trials = dict(s.exec(tq.group_by(TrialRow.status)).all())
            searches = dict(s.exec(sq.group_by(SearchRow.status)).all())
            quanta_total = s.exec(select(func.count()).select_from(QuantumRow)).one()
            recent = s.exec(
                select(QuantumRow.devices, QuantumRow.started_at, QuantumRow.ended_at).where(
                    QuantumRow.ended_at >= since
                )
            ).all()
            latencies = s.exec(select(LatencyRow.kind, LatencyRow.ms)).all()
            best = list(s.exec(bq))
        best_metrics = []
        for row in best:
            spec = parsed_spec(row)
            best_metrics.append((row.id or 0, row.name, spec.metric.name if spec else "", row.best_metric or 0.0))
        return MetricFacts(
            trials_by_status=trials,
            searches_by_status=searches,
            quanta_total=quanta_total,
            recent_quanta=[(device_list(d), a, b) for d, a, b in recent],
            latencies=list(latencies),
            best_metrics=best_metrics,
        )

    # ---- cluster -------------------------------------------------------------------------------

    def cluster_out(self, owner_id: int | None = None) -> ClusterOut:
        """The controller's last published view of the devices. Trials that have ended since are left
        out (the controller stops publishing when nothing is alive); with `owner_id`, so are the trials
        and pairs of other users' searches (a member sees the devices, and only their own trials)."""
        view = self.cluster_view()
        if view is None:
            return ClusterOut(devices=[], pairs=[], nodes=[], at=None)
        ids = {tid for d in view.devices for tid in (*d.running, *d.parked)}
        alive: set[int] = set()
        if ids:
            with self.session() as s:
                q = select(TrialRow.id).where(col(TrialRow.id).in_(ids), col(TrialRow.status) == TrialStatus.RUNNING)
                if owner_id is not None:
                    q = q.join(SearchRow, col(SearchRow.id) == col(TrialRow.search_id)).where(
                        SearchRow.owner_id == owner_id
                    )
                alive = {tid for tid in s.exec(q) if tid is not None}
        devices = [
            DeviceOut(
                id=d.id,
                node=d.node,
                kind=d.kind,
                memory_mb=d.memory_mb,
                running=[t for t in d.running if t in alive],
                parked=[t for t in d.parked if t in alive],
            )
            for d in view.devices
        ]
        pairs = []
        for p in view.pairs:
            if owner_id is not None and not (p.a in alive and p.b in alive):
                continue
            out = PairOut(a=p.a, b=p.b, rate_a=p.rate_a, rate_b=p.rate_b, solo_a=p.solo_a, solo_b=p.solo_b, gain=None)
            out.gain = _gain(out)
            pairs.append(out)
        return ClusterOut(devices=devices, pairs=pairs, nodes=sorted({d.node for d in devices}), at=view.at)
