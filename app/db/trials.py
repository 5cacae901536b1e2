"""`TrialQueries`: the API's reads and requests of trials and what they report, in SQL (part of `Store`;
`MemoryStore`, the simulator's store, serves no API: see `quanta.db.protocol`).

Reads return read models (`quanta.db.public.trials`): a page of a search's trials, a trial with its
curve and quanta, the report rows after an id (for the event streams), and a search's views over its
trials: every trial's curve (each step once, by its latest attempt, thinned), the timeline of its
quanta, its best objective so far over time. The one request, `stop_trial`, is a `command` the
controller picks up at its next tick (`Conflict`, `quanta.db.errors`, for a trial that has ended).
Every method is one short transaction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from sqlalchemy import func, update
from sqlmodel import Session, col, select

from quanta.db.errors import Conflict
from quanta.db.models import QuantumRow, ReportRow, SearchRow, TrialRow
from quanta.db.public.readable import device_list, finite, id_list, parsed_spec
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
from quanta.db.reports import latest_per_step
from quanta.status import TRIAL_ACTIVE, TrialStatus

TrialSort = Literal["id", "-id", "metric", "-metric", "steps", "-steps", "number", "-number"]


def _thin(points: list[tuple[int, float]], max_points: int) -> list[tuple[int, float]]:
    """At most `max_points` evenly spread points, always keeping the last."""
    if len(points) <= max_points:
        return points
    stride = len(points) / max_points
    out = [points[int(i * stride)] for i in range(max_points - 1)]
    out.append(points[-1])
    return out


class TrialQueries:
    """Mixed into `Store`, which provides `session()`."""

    def session(self) -> Session:
        raise NotImplementedError

    # ---- trials --------------------------------------------------------------------------------

    def trials_of(self, search_ids: Sequence[int]) -> list[TrialRow]:
        """The trials of these searches, in id order."""
        if not search_ids:
            return []
        with self.session() as s:
            q = select(TrialRow).where(col(TrialRow.search_id).in_(list(search_ids))).order_by(col(TrialRow.id))
            return list(s.exec(q))

    def trial_page(
        self,
        search_id: int,
        offset: int,
        limit: int,
        sort: TrialSort = "id",
        status: TrialStatus | None = None,
    ) -> tuple[list[TrialOut], int]:
        """One page of the search's trials and the number of all that match `status`. `metric` sorts by
        the last reported objective, trials without one last either way."""
        key = sort.lstrip("-")
        column = {"id": TrialRow.id, "number": TrialRow.number, "metric": TrialRow.metric, "steps": TrialRow.steps}[key]
        order: list[Any] = [col(column).desc() if sort.startswith("-") else col(column)]
        if key == "metric":
            order.insert(0, col(TrialRow.metric).is_(None))
        order.append(col(TrialRow.id))
        with self.session() as s:
            cond = [TrialRow.search_id == search_id]
            if status:
                cond.append(TrialRow.status == status)
            rows = list(s.exec(select(TrialRow).where(*cond).order_by(*order).offset(offset).limit(limit)))
            total = s.exec(select(func.count()).select_from(TrialRow).where(*cond)).one()
        return [TrialOut.from_row(t) for t in rows], total

    def trial_detail(self, trial_id: int) -> TrialDetail | None:
        """The trial with its learning curve (every report) and its quanta."""
        with self.session() as s:
            t = s.get(TrialRow, trial_id)
            if t is None:
                return None
            reports = s.exec(select(ReportRow).where(ReportRow.trial_id == trial_id).order_by(col(ReportRow.id)))
            curve = [
                CurvePoint(
                    step=r.step,
                    at=r.at,
                    metrics={k: finite(v) for k, v in r.metrics.items()},
                    objective=finite(r.objective),
                )
                for r in reports
            ]
            quanta = [
                QuantumOut(
                    devices=device_list(q.devices),
                    started_at=q.started_at,
                    ended_at=q.ended_at,
                    steps=q.steps,
                    rate=q.rate,
                    packed_with=id_list(q.packed_with),
                )
                for q in s.exec(select(QuantumRow).where(QuantumRow.trial_id == trial_id).order_by(col(QuantumRow.id)))
            ]
        return TrialDetail(**TrialOut.from_row(t).model_dump(), curve=curve, quanta=quanta)

    def stop_trial(self, trial_id: int) -> TrialOut | None:
        """Ask the controller to stop a queued or running trial (None: no such trial; `Conflict`: it
        has ended)."""
        with self.session() as s:
            t = s.get(TrialRow, trial_id)
            if t is None:
                return None
            res = s.execute(
                update(TrialRow)
                .where(col(TrialRow.id) == trial_id, col(TrialRow.status).in_(TRIAL_ACTIVE))
                .values(command="stop")
            )
            s.commit()
            if not res.rowcount:  # type: ignore[attr-defined]  # an UPDATE/DELETE returns a CursorResult
                raise Conflict(f"cannot stop trial {trial_id}: it is {t.status}")
            return TrialOut.from_row(t)

    # ---- reports -------------------------------------------------------------------------------

    def last_report_id(self) -> int:
        """The id of the newest report row (0 when there is none)."""
        with self.session() as s:
            return s.exec(select(func.max(ReportRow.id))).one() or 0

    def reports_after(
        self, report_id: int, search_id: int | None = None, limit: int = 1000, owner_id: int | None = None
    ) -> list[ReportRow]:
        """Report rows with an id above `report_id` (of one search, or all; of the searches of user
        `owner_id` only, when given), oldest first, at most `limit`."""
        with self.session() as s:
            q = select(ReportRow).where(col(ReportRow.id) > report_id)
            if search_id is not None:
                q = q.where(ReportRow.search_id == search_id)
            if owner_id is not None:
                q = q.join(SearchRow, col(SearchRow.id) == col(ReportRow.search_id)).where(
                    SearchRow.owner_id == owner_id
                )
            return list(s.exec(q.order_by(col(ReportRow.id)).limit(limit)))

    # ---- search views --------------------------------------------------------------------------

    def curves(self, search_id: int, max_points: int) -> CurvesOut:
        """Every trial's (step, objective) points, each step once (by its latest attempt: a step run again
        after a restart, see `ReportRow`), thinned to `max_points` each, and its status."""
        with self.session() as s:
            status = {
                str(tid): st
                for tid, st in s.exec(select(TrialRow.id, TrialRow.status).where(TrialRow.search_id == search_id))
            }
            rows = s.exec(
                select(ReportRow.trial_id, ReportRow.step, ReportRow.attempt, ReportRow.objective)
                .where(ReportRow.search_id == search_id, col(ReportRow.objective).is_not(None))
                .order_by(col(ReportRow.id))
            )
            points: dict[str, list[tuple[int, int, float]]] = {tid: [] for tid in status}
            for tid, step, attempt, objective in rows:
                if objective is not None and math.isfinite(objective):
                    points.setdefault(str(tid), []).append((step, attempt, objective))
        per = {tid: latest_per_step(p) for tid, p in points.items()}
        return CurvesOut(trials={k: _thin(v, max_points) for k, v in per.items()}, status=status)

    def timeline(self, search_id: int) -> TimelineOut | None:
        """Every quantum of the search's trials in start order (None: no such search)."""
        with self.session() as s:
            row = s.get(SearchRow, search_id)
            if row is None:
                return None
            quanta = s.exec(
                select(QuantumRow).where(QuantumRow.search_id == search_id).order_by(col(QuantumRow.started_at))
            )
            items = [
                TimelineItem(
                    trial_id=q.trial_id,
                    devices=device_list(q.devices),
                    started_at=q.started_at,
                    ended_at=q.ended_at,
                    packed_with=id_list(q.packed_with),
                )
                for q in quanta
            ]
        return TimelineOut(items=items, t0=row.started_at)

    def best_curve(self, search_id: int) -> BestCurveOut | None:
        """Best objective so far (by the spec's metric goal) versus seconds since the search started,
        one point per improvement (None: no such search)."""
        with self.session() as s:
            row = s.get(SearchRow, search_id)
            if row is None:
                return None
            spec = parsed_spec(row)
            t0 = row.started_at if row.started_at is not None else row.created_at
            reports = s.exec(
                select(ReportRow.at, ReportRow.objective)
                .where(ReportRow.search_id == search_id, col(ReportRow.objective).is_not(None))
                .order_by(col(ReportRow.at), col(ReportRow.id))
            )
            points: list[tuple[float, float]] = []
            best: float | None = None
            for at, objective in reports:
                if objective is None or not math.isfinite(objective):
                    continue
                if best is None or (spec.metric.better(objective, best) if spec else objective > best):
                    best = objective
                    points.append((round(max(0.0, at - t0), 3), objective))
        return BestCurveOut(points=points)
