"""`ReaderQueries`: what the API (and the dashboard through it) reads from and asks of the store, as
read models (`quanta.db.public`). Part of `Store` (SQL only: `MemoryStore`, the simulator's store, serves
no API; see `quanta.db.protocol`).

Every method is one short transaction. The API never calls the controller: its requests are rows
(a queued search, a `command` column, a deletion request) the controller picks up at its next tick.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import ColumnElement, delete, func, text, update
from sqlmodel import Session, col, select

from quanta.db.models import FIRST_ADMIN, ClusterView, LatencyRow, QuantumRow, ReportRow, SearchRow, TrialRow
from quanta.db.public.cluster import ClusterOut, DeviceOut, PairOut
from quanta.db.public.readable import finite, parsed_spec
from quanta.db.public.searches import SearchOut, SearchPatch, SearchSummary
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
from quanta.spec import SearchSpec, SpecError, parse_spec, spec_from_stored
from quanta.status import (
    SEARCH_STARTED,
    TRIAL_ACTIVE,
    TRIAL_FINAL,
    TRIAL_STOPPED_BY_USER,
    SearchStatus,
    TrialStatus,
)

TrialSort = Literal["id", "-id", "metric", "-metric", "steps", "-steps", "number", "-number"]
SearchSort = Literal["id", "-id"]
SearchCommand = Literal["stop", "pause", "resume"]

# The states a search must be in for each command.
COMMAND_NEEDS: dict[str, tuple[SearchStatus, ...]] = {
    "stop": SEARCH_STARTED,
    "pause": (SearchStatus.RUNNING,),
    "resume": (SearchStatus.PAUSED,),
}


@dataclass(frozen=True)
class MetricFacts:
    """Counts and rows the Prometheus metrics are computed from (`quanta.api.metrics`)."""

    trials_by_status: dict[str, int]
    searches_by_status: dict[str, int]
    quanta_total: int
    recent_quanta: list[tuple[list[str], float, float]]  # (devices, started_at, ended_at)
    latencies: list[tuple[str, float]]  # (kind, ms)
    best_metrics: list[tuple[int, str, str, float]]  # (search id, search name, metric name, best value)


@dataclass(frozen=True)
class Owner:
    """Who a search belongs to: the user's id (None: that user was deleted, so no member owns it) and
    the name it was submitted under."""

    id: int | None
    name: str


class Conflict(Exception):
    """The request does not fit the row's current state (e.g. pausing a completed search)."""


class BudgetError(ValueError):
    """A resume's budget is out of bounds: `field` (`max_trials` or `max_seconds`) and why."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


# The searches whose tags include one (`:tag`): JSON lists are read by each database's own functions.
_HAS_TAG = {
    "sqlite": "EXISTS (SELECT 1 FROM json_each(search.tags) AS t WHERE t.value = :tag)",
    "postgresql": "EXISTS (SELECT 1 FROM json_array_elements_text(search.tags) AS t(v) WHERE t.v = :tag)",
}


def _ids(text: str) -> list[int]:
    return [int(p) for p in text.split(",") if p.strip().lstrip("-").isdigit()]


def _devices(text: str) -> list[str]:
    return [d for d in text.split(",") if d]


def _thin(points: list[tuple[int, float]], max_points: int) -> list[tuple[int, float]]:
    """At most `max_points` evenly spread points, always keeping the last."""
    if len(points) <= max_points:
        return points
    stride = len(points) / max_points
    out = [points[int(i * stride)] for i in range(max_points - 1)]
    out.append(points[-1])
    return out


def _gain(p: PairOut) -> float | None:
    ra, rb, sa, sb = p.rate_a, p.rate_b, p.solo_a, p.solo_b
    if ra is None or rb is None or not sa or not sb:
        return None
    return round(ra / sa + rb / sb, 4)


class ReaderQueries:
    """Mixed into `Store`, which provides `session()` and `cluster_view()`."""

    def session(self) -> Session:
        raise NotImplementedError

    def cluster_view(self) -> ClusterView | None:
        raise NotImplementedError

    def create_search(
        self, name: str, spec: dict[str, Any], at: float, owner: str = FIRST_ADMIN, *, owner_id: int | None = None
    ) -> SearchRow:
        raise NotImplementedError

    # ---- searches ------------------------------------------------------------------------------

    def trials_done(self, search_ids: Sequence[int]) -> dict[int, int]:
        """Per search, how many of its trials are final (searches without any are left out)."""
        if not search_ids:
            return {}
        with self.session() as s:
            return self._trials_done(s, search_ids)

    @staticmethod
    def _trials_done(s: Session, search_ids: Sequence[int]) -> dict[int, int]:
        q = (
            select(TrialRow.search_id, func.count())
            .where(col(TrialRow.search_id).in_(list(search_ids)), col(TrialRow.status).in_(TRIAL_FINAL))
            .group_by(col(TrialRow.search_id))
        )
        return {sid: n for sid, n in s.exec(q)}

    def submit_search(
        self, spec: SearchSpec, at: float, owner: str = FIRST_ADMIN, *, owner_id: int | None = None
    ) -> SearchOut:
        """Insert a queued search of user `owner_id` named `owner` (without an id: the user of that name)
        (it exists whole or not at all); the controller starts it."""
        row = self.create_search(spec.name, spec.model_dump(mode="json"), at, owner, owner_id=owner_id)
        return SearchOut.from_row(row, 0)

    def search_owner(self, search_id: int) -> Owner | None:
        """Who the search belongs to (None: no such search)."""
        with self.session() as s:
            hit = s.exec(select(SearchRow.owner_id, SearchRow.owner).where(SearchRow.id == search_id)).first()
            return Owner(*hit) if hit is not None else None

    def trial_owner(self, trial_id: int) -> Owner | None:
        """Who the trial's search belongs to (None: no such trial, or a trial of no search: a trace job)."""
        with self.session() as s:
            q = select(SearchRow.owner_id, SearchRow.owner).join(TrialRow, col(TrialRow.search_id) == col(SearchRow.id))
            hit = s.exec(q.where(TrialRow.id == trial_id)).first()
            return Owner(*hit) if hit is not None else None

    def has_search(self, search_id: int) -> bool:
        with self.session() as s:
            return s.exec(select(SearchRow.id).where(SearchRow.id == search_id)).first() is not None

    def search_out(self, search_id: int) -> SearchOut | None:
        with self.session() as s:
            row = s.get(SearchRow, search_id)
            if row is None:
                return None
            return SearchOut.from_row(row, self._trials_done(s, [search_id]).get(search_id, 0))

    def search_page(
        self,
        offset: int,
        limit: int,
        sort: SearchSort = "-id",
        status: SearchStatus | None = None,
        owner_id: int | None = None,
        tag: str | None = None,
    ) -> tuple[list[SearchSummary], int]:
        """One page of searches (without their specs: a page of large specs is megabytes, and the list is
        fetched again after each event) and the number of all that match `status`, `owner_id` (a
        user's id) and `tag` (one of their tags, exactly)."""
        with self.session() as s:
            q = select(SearchRow)
            count = select(func.count()).select_from(SearchRow)
            conditions: list[ColumnElement[bool] | Any] = []
            if status:
                conditions.append(SearchRow.status == status)
            if owner_id is not None:
                conditions.append(SearchRow.owner_id == owner_id)
            if tag is not None:
                conditions.append(text(_HAS_TAG[s.get_bind().dialect.name]).bindparams(tag=tag))
            if conditions:
                q = q.where(*conditions)
                count = count.where(*conditions)
            order = col(SearchRow.id).desc() if sort == "-id" else col(SearchRow.id)
            rows = list(s.exec(q.order_by(order).offset(offset).limit(limit)))
            total = s.exec(count).one()
            done = self._trials_done(s, [r.id for r in rows if r.id is not None])
        return [SearchSummary.from_row(r, done.get(r.id or 0, 0)) for r in rows], total

    def command_search(self, search_id: int, command: SearchCommand, at: float) -> SearchOut | None:
        """Ask the controller to stop/pause/resume a search (None: no such search). A queued search the
        controller has not picked up yet is stopped here directly. Raises `Conflict` when its state does
        not allow the command."""
        with self.session() as s:
            if s.get(SearchRow, search_id) is None:
                return None
            if command == "stop":
                res = s.execute(
                    update(SearchRow)
                    .where(col(SearchRow.id) == search_id, col(SearchRow.status) == SearchStatus.QUEUED)
                    .values(status=SearchStatus.STOPPED, finished_at=at, command=None, waiting=None)
                )
                if res.rowcount:  # type: ignore[attr-defined]  # an UPDATE/DELETE returns a CursorResult
                    s.commit()
                    return self.search_out(search_id)
            res = s.execute(
                update(SearchRow)
                .where(col(SearchRow.id) == search_id, col(SearchRow.status).in_(COMMAND_NEEDS[command]))
                .values(command=command)
            )
            s.commit()
            if not res.rowcount:  # type: ignore[attr-defined]  # an UPDATE/DELETE returns a CursorResult
                current = s.get(SearchRow, search_id)
                state = current.status if current else "gone"
                raise Conflict(f"cannot {command} search {search_id}: it is {state}")
        return self.search_out(search_id)

    def patch_search(self, search_id: int, patch: SearchPatch) -> SearchOut | None:
        """Set the search's tags and notes (those `patch` has; an empty `notes` removes them). None: no such
        search. Tags and notes are the users' own: the controller never writes them, so this one UPDATE
        races with nothing."""
        values: dict[str, Any] = {}
        if patch.tags is not None:
            values["tags"] = list(patch.tags)
        if "notes" in patch.model_fields_set:
            values["notes"] = patch.notes or None
        with self.session() as s:
            if values:
                res = s.execute(update(SearchRow).where(col(SearchRow.id) == search_id).values(**values))
                s.commit()
                if not res.rowcount:  # type: ignore[attr-defined]  # an UPDATE/DELETE returns a CursorResult
                    return None
        return self.search_out(search_id)

    def resume_search(
        self, search_id: int, at: float, *, more_trials: int = 0, more_seconds: float = 0.0, unheld: bool = False
    ) -> SearchOut | None:
        """Ask the controller to resume the search with its budget raised by `more_trials` and
        `more_seconds` (None: no such search). A paused search runs again; a stopped or completed one is
        taken up again (`SearchBook`): its searcher goes on from its whole history, the trials its end
        stopped go on from their checkpoints, and the time it spent ended does not count against its
        time budget. One that ended at its target goes on to its budget (`budget.stop_on_target` becomes
        false). A running search takes the raised budget only (`Conflict` without one), unless `unheld`:
        the caller holds the database's controller lease, so no controller holds a running or paused
        search, which is then taken up as after a restart.

        `Conflict` for a queued or failed search, and for an ended one that would end again at once: its
        time budget spent (give `more_seconds`), or its trials all made and none to go on (give
        `more_trials`). `BudgetError` when the raised budget is out of the spec's bounds."""
        with self.session() as s:
            # The row is locked first (PostgreSQL: a row lock; SQLite: the database's write lock) and read
            # after: two requests raising one budget add up, neither overwrites the other.
            res = s.execute(
                update(SearchRow).where(col(SearchRow.id) == search_id).values(command=col(SearchRow.command))
            )
            if not res.rowcount:  # type: ignore[attr-defined]  # an UPDATE/DELETE returns a CursorResult
                return None
            row = s.get(SearchRow, search_id)
            assert row is not None
            state = SearchStatus(row.status)
            more = more_trials > 0 or more_seconds > 0
            if state in (SearchStatus.QUEUED, SearchStatus.FAILED) or (
                state == SearchStatus.RUNNING and not more and not unheld
            ):
                raise Conflict(f"cannot resume search {search_id}: it is {state}")
            try:
                spec = spec_from_stored(row.spec)
            except SpecError as exc:
                raise Conflict(f"cannot resume search {search_id}: its stored spec does not parse ({exc})") from None
            budget = dict(row.spec.get("budget") or {})
            budget["max_trials"] = spec.budget.max_trials + more_trials
            budget["max_seconds"] = spec.budget.max_seconds + more_seconds
            if state.final and row.reached:
                budget["stop_on_target"] = False  # it ended there: resumed, it goes on to its budget
            stored = {**row.spec, "budget": budget}
            try:
                raised = parse_spec(stored, stored=True).budget
            except SpecError as exc:
                field, reason = exc.errors[0]
                name = field.removeprefix("budget.")
                raise BudgetError(name, f"{reason} (with the budget raised: {field} {budget.get(name)})") from None
            if state.final:
                ran = (row.finished_at or at) - (row.started_at or row.created_at) - row.idle_seconds
                if ran >= raised.max_seconds:
                    raise Conflict(
                        f"cannot resume search {search_id}: its time budget is spent ({ran:.0f} of "
                        f"{raised.max_seconds:g} s): give more seconds"
                    )
                made = s.exec(  # forks are none of the searcher's: they do not count against max_trials
                    select(func.count())
                    .select_from(TrialRow)
                    .where(TrialRow.search_id == search_id, col(TrialRow.parent_id).is_(None))
                ).one()
                if made >= raised.max_trials and not self._resumable_trials(s, search_id):
                    raise Conflict(
                        f"cannot resume search {search_id}: its {raised.max_trials} trials are all made and "
                        "none was stopped by its end: give more trials"
                    )
            row.spec = stored
            row.command = "resume"
            s.add(row)
            s.commit()
        return self.search_out(search_id)

    @staticmethod
    def _resumable_trials(s: Session, search_id: int) -> int:
        """How many of the search's trials its end stopped (`quanta.status.resumable_trial`)."""
        q = select(func.count()).select_from(TrialRow)
        q = q.where(TrialRow.search_id == search_id, TrialRow.status == TrialStatus.STOPPED)
        return s.exec(q.where(func.coalesce(TrialRow.reason, "") != TRIAL_STOPPED_BY_USER)).one()

    def delete_if_queued(self, search_id: int) -> bool:
        """Delete a search the controller never started (it has no trials). True when deleted."""
        with self.session() as s:
            res = s.execute(
                delete(SearchRow).where(
                    col(SearchRow.id) == search_id,
                    col(SearchRow.status) == SearchStatus.QUEUED,
                    col(SearchRow.started_at).is_(None),
                )
            )
            s.commit()
            return bool(res.rowcount)  # type: ignore[attr-defined]  # an UPDATE/DELETE returns a CursorResult

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
                    devices=_devices(q.devices),
                    started_at=q.started_at,
                    ended_at=q.ended_at,
                    steps=q.steps,
                    rate=q.rate,
                    packed_with=_ids(q.packed_with),
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
                    devices=_devices(q.devices),
                    started_at=q.started_at,
                    ended_at=q.ended_at,
                    packed_with=_ids(q.packed_with),
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
            recent_quanta=[(_devices(d), a, b) for d, a, b in recent],
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
