"""The API's reads and writes over the store's engine. Every function is one short transaction; the API
never calls the controller: it writes rows (new searches, `command` columns, delete requests) that the
controller picks up at its next tick, and reads what the controller recorded."""

from __future__ import annotations

import math
import time
from typing import Any, Literal

from sqlalchemy import delete, func, or_, update
from sqlmodel import Session, col, select

from app.api.models import (
    BestCurveOut,
    BestOut,
    ClusterOut,
    CurvePoint,
    CurvesOut,
    DeviceOut,
    MetricOut,
    PairOut,
    ProgressOut,
    QuantumOut,
    SearchOut,
    TimelineItem,
    TimelineOut,
    TrialDetail,
    TrialOut,
)
from app.db.models import (
    ControllerStateRow,
    LatencyRow,
    PairRow,
    QuantumRow,
    ReportRow,
    SearchRow,
    TrialRow,
)
from app.db.store import Store
from app.spec import SearchSpec
from app.status import SEARCH_STARTED, TRIAL_ACTIVE, TRIAL_FINAL, SearchStatus, TrialStatus

DELETE_KEY = "delete:"

TrialSort = Literal["id", "-id", "metric", "-metric", "steps", "-steps", "number", "-number"]
SearchSort = Literal["id", "-id"]


class Conflict(Exception):
    """The request does not fit the row's current state (e.g. pausing a completed search)."""


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _ids(text: str) -> list[int]:
    return [int(p) for p in text.split(",") if p.strip().lstrip("-").isdigit()]


# ---- searches ----------------------------------------------------------------------------------


def search_out(row: SearchRow, trials_done: int) -> SearchOut:
    assert row.id is not None
    spec = row.spec or {}
    metric = spec.get("metric") or {}
    best = None
    if row.best_trial_id is not None:
        best = BestOut(trial_id=row.best_trial_id, metric=row.best_metric, params=row.best_params)
    return SearchOut(
        id=row.id,
        name=row.name,
        status=row.status,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        reached=bool(row.reached),
        seconds_to_target=row.seconds_to_target,
        best=best,
        progress=ProgressOut(
            trials_created=row.trials_created,
            trials_done=trials_done,
            max_trials=(spec.get("budget") or {}).get("max_trials"),
        ),
        metric=MetricOut(name=metric.get("name"), goal=metric.get("goal"), target=metric.get("target")),
        policy=(spec.get("scheduler") or {}).get("policy"),
        spec=spec,
        error=row.error,
    )


def _done_counts(s: Session, search_ids: list[int]) -> dict[int, int]:
    if not search_ids:
        return {}
    q = (
        select(TrialRow.search_id, func.count())
        .where(col(TrialRow.search_id).in_(search_ids), col(TrialRow.status).in_(TRIAL_FINAL))
        .group_by(TrialRow.search_id)
    )
    return {sid: n for sid, n in s.exec(q)}


def create_search(store: Store, spec: SearchSpec) -> SearchOut:
    """Insert a queued search (one transaction: it exists whole or not at all)."""
    row = store.create_search(spec.name, spec.model_dump(mode="json"), time.time())
    return search_out(row, 0)


def list_searches(
    store: Store, offset: int, limit: int, sort: SearchSort, status: str | None
) -> tuple[list[SearchOut], int]:
    with store.session() as s:
        q = select(SearchRow)
        count = select(func.count()).select_from(SearchRow)
        if status:
            q = q.where(SearchRow.status == status)
            count = count.where(SearchRow.status == status)
        order = col(SearchRow.id).desc() if sort == "-id" else col(SearchRow.id)
        rows = list(s.exec(q.order_by(order).offset(offset).limit(limit)))
        total = s.exec(count).one()
        done = _done_counts(s, [r.id for r in rows if r.id is not None])
    return [search_out(r, done.get(r.id, 0)) for r in rows], total


def get_search(store: Store, search_id: int) -> SearchOut | None:
    with store.session() as s:
        row = s.get(SearchRow, search_id)
        if row is None:
            return None
        return search_out(row, _done_counts(s, [search_id]).get(search_id, 0))


_COMMAND_NEEDS = {
    "stop": SEARCH_STARTED,
    "pause": (SearchStatus.RUNNING,),
    "resume": (SearchStatus.PAUSED,),
}


def command_search(store: Store, search_id: int, command: Literal["stop", "pause", "resume"]) -> SearchOut | None:
    """Ask the controller to stop/pause/resume a search. A queued search that the controller has not
    picked up yet is stopped here directly. Raises `Conflict` when the state does not allow it."""
    now = time.time()
    with store.session() as s:
        row = s.get(SearchRow, search_id)
        if row is None:
            return None
        if command == "stop":
            res = s.execute(
                update(SearchRow)
                .where(col(SearchRow.id) == search_id, col(SearchRow.status) == SearchStatus.QUEUED)
                .values(status=SearchStatus.STOPPED, finished_at=now, command=None)
            )
            if res.rowcount:  # type: ignore[attr-defined]
                s.commit()
                return get_search(store, search_id)
        res = s.execute(
            update(SearchRow)
            .where(col(SearchRow.id) == search_id, col(SearchRow.status).in_(_COMMAND_NEEDS[command]))
            .values(command=command)
        )
        s.commit()
        if not res.rowcount:  # type: ignore[attr-defined]
            current = s.get(SearchRow, search_id)
            state = current.status if current else "gone"
            raise Conflict(f"cannot {command} search {search_id}: it is {state}")
    return get_search(store, search_id)


# ---- deletion ----------------------------------------------------------------------------------


def delete_if_queued(store: Store, search_id: int) -> bool:
    """Delete a search the controller never started (it has no trials). True when deleted."""
    with store.session() as s:
        res = s.execute(
            delete(SearchRow).where(
                col(SearchRow.id) == search_id,
                col(SearchRow.status) == SearchStatus.QUEUED,
                col(SearchRow.started_at).is_(None),
            )
        )
        s.commit()
        return bool(res.rowcount)  # type: ignore[attr-defined]


def request_delete(store: Store, search_id: int) -> None:
    """Record that the search must go. The controller's host stops its trials, waits for their
    processes to exit, then calls `delete_search_rows` (see `app.api.serve`). Survives restarts."""
    store.set_state(f"{DELETE_KEY}{search_id}", {"at": time.time()})


def pending_deletes(store: Store) -> list[int]:
    with store.session() as s:
        keys = s.exec(select(ControllerStateRow.key).where(col(ControllerStateRow.key).startswith(DELETE_KEY)))
        return sorted(int(k.removeprefix(DELETE_KEY)) for k in keys if k.removeprefix(DELETE_KEY).isdigit())


def delete_search_rows(store: Store, search_id: int) -> None:
    """Delete a search with its trials and everything measured about them, in one transaction."""
    with store.session() as s:
        tids = list(s.exec(select(TrialRow.id).where(TrialRow.search_id == search_id)))
        if tids:
            s.execute(delete(ReportRow).where(col(ReportRow.trial_id).in_(tids)))
            s.execute(delete(QuantumRow).where(col(QuantumRow.trial_id).in_(tids)))
            s.execute(delete(LatencyRow).where(col(LatencyRow.trial_id).in_(tids)))
            s.execute(delete(PairRow).where(or_(col(PairRow.trial_a).in_(tids), col(PairRow.trial_b).in_(tids))))
            s.execute(delete(TrialRow).where(col(TrialRow.id).in_(tids)))
        s.execute(delete(ReportRow).where(col(ReportRow.search_id) == search_id))
        s.execute(delete(SearchRow).where(col(SearchRow.id) == search_id))
        s.execute(delete(ControllerStateRow).where(col(ControllerStateRow.key) == f"{DELETE_KEY}{search_id}"))
        s.commit()


def search_exists(store: Store, search_id: int) -> bool:
    with store.session() as s:
        return s.get(SearchRow, search_id) is not None


# ---- trials ------------------------------------------------------------------------------------


def trial_out(t: TrialRow) -> TrialOut:
    assert t.id is not None
    return TrialOut(
        id=t.id,
        search_id=t.search_id,
        number=t.number,
        params=t.params,
        status=t.status,
        metric=_finite(t.metric),
        best_metric=_finite(t.best_metric),
        steps=t.steps,
        device_seconds=round(t.device_seconds, 3),
        retries=t.retries,
        error=t.error,
        created_at=t.created_at,
        started_at=t.started_at,
        finished_at=t.finished_at,
    )


def list_trials(
    store: Store, search_id: int, offset: int, limit: int, sort: TrialSort, status: str | None
) -> tuple[list[TrialOut], int]:
    key = sort.lstrip("-")
    column = {"id": TrialRow.id, "number": TrialRow.number, "metric": TrialRow.metric, "steps": TrialRow.steps}[key]
    order = [col(column).desc() if sort.startswith("-") else col(column)]
    if key == "metric":
        order.insert(0, col(TrialRow.metric).is_(None))  # trials without a metric last, either way
    order.append(col(TrialRow.id))
    with store.session() as s:
        cond = [TrialRow.search_id == search_id]
        if status:
            cond.append(TrialRow.status == status)
        rows = list(s.exec(select(TrialRow).where(*cond).order_by(*order).offset(offset).limit(limit)))
        total = s.exec(select(func.count()).select_from(TrialRow).where(*cond)).one()
    return [trial_out(t) for t in rows], total


def trial_detail(store: Store, trial_id: int) -> TrialDetail | None:
    with store.session() as s:
        t = s.get(TrialRow, trial_id)
        if t is None:
            return None
        reports = s.exec(select(ReportRow).where(ReportRow.trial_id == trial_id).order_by(col(ReportRow.id)))
        curve = [
            CurvePoint(
                step=r.step,
                at=r.at,
                metrics={k: _finite(v) for k, v in r.metrics.items()},
                objective=_finite(r.objective),
            )
            for r in reports
        ]
        quanta = [
            QuantumOut(
                devices=[d for d in q.devices.split(",") if d],
                started_at=q.started_at,
                ended_at=q.ended_at,
                steps=q.steps,
                rate=q.rate,
                packed_with=_ids(q.packed_with),
            )
            for q in s.exec(select(QuantumRow).where(QuantumRow.trial_id == trial_id).order_by(col(QuantumRow.id)))
        ]
    return TrialDetail(**trial_out(t).model_dump(), curve=curve, quanta=quanta)


def stop_trial(store: Store, trial_id: int) -> TrialOut | None:
    with store.session() as s:
        t = s.get(TrialRow, trial_id)
        if t is None:
            return None
        res = s.execute(
            update(TrialRow)
            .where(col(TrialRow.id) == trial_id, col(TrialRow.status).in_(TRIAL_ACTIVE))
            .values(command="stop")
        )
        s.commit()
        if not res.rowcount:  # type: ignore[attr-defined]
            raise Conflict(f"cannot stop trial {trial_id}: it is {t.status}")
        return trial_out(t)


# ---- search views ------------------------------------------------------------------------------


def _thin(points: list[tuple[int, float]], max_points: int) -> list[tuple[int, float]]:
    """At most `max_points` evenly spread points, always keeping the last."""
    if len(points) <= max_points:
        return points
    stride = len(points) / max_points
    out = [points[int(i * stride)] for i in range(max_points - 1)]
    out.append(points[-1])
    return out


def curves(store: Store, search_id: int, max_points: int) -> CurvesOut:
    with store.session() as s:
        status = {
            str(tid): st
            for tid, st in s.exec(select(TrialRow.id, TrialRow.status).where(TrialRow.search_id == search_id))
        }
        rows = s.exec(
            select(ReportRow.trial_id, ReportRow.step, ReportRow.objective)
            .where(ReportRow.search_id == search_id, col(ReportRow.objective).is_not(None))
            .order_by(col(ReportRow.id))
        )
        per: dict[str, list[tuple[int, float]]] = {tid: [] for tid in status}
        for tid, step, objective in rows:
            if objective is not None and math.isfinite(objective):
                per.setdefault(str(tid), []).append((step, objective))
    return CurvesOut(trials={k: _thin(v, max_points) for k, v in per.items()}, status=status)


def timeline(store: Store, search_id: int) -> TimelineOut | None:
    with store.session() as s:
        row = s.get(SearchRow, search_id)
        if row is None:
            return None
        quanta = s.exec(
            select(QuantumRow).where(QuantumRow.search_id == search_id).order_by(col(QuantumRow.started_at))
        )
        items = [
            TimelineItem(
                trial_id=q.trial_id,
                devices=[d for d in q.devices.split(",") if d],
                started_at=q.started_at,
                ended_at=q.ended_at,
                packed_with=_ids(q.packed_with),
            )
            for q in quanta
        ]
    return TimelineOut(items=items, t0=row.started_at)


def best_curve(store: Store, search_id: int) -> BestCurveOut | None:
    with store.session() as s:
        row = s.get(SearchRow, search_id)
        if row is None:
            return None
        goal = ((row.spec or {}).get("metric") or {}).get("goal", "maximize")
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
            if best is None or (objective > best if goal == "maximize" else objective < best):
                best = objective
                points.append((round(max(0.0, at - t0), 3), objective))
    return BestCurveOut(points=points)


# ---- cluster -----------------------------------------------------------------------------------


def _gain(p: dict[str, Any]) -> float | None:
    ra, rb, sa, sb = p.get("rate_a"), p.get("rate_b"), p.get("solo_a"), p.get("solo_b")
    if None in (ra, rb, sa, sb) or not sa or not sb:
        return None
    return round(ra / sa + rb / sb, 4)


def cluster(store: Store) -> ClusterOut:
    """The controller's last published view of the devices. Trials that have since ended are left out
    (the controller stops publishing when nothing is alive)."""
    state = store.get_state("cluster") or {}
    devices = state.get("devices") or []
    ids = {tid for d in devices for tid in (*d.get("running", ()), *d.get("parked", ()))}
    alive: set[int] = set()
    if ids:
        with store.session() as s:
            q = select(TrialRow.id).where(col(TrialRow.id).in_(ids), col(TrialRow.status) == TrialStatus.RUNNING)
            alive = set(s.exec(q))
    out = [
        DeviceOut(
            id=d["id"],
            node=d.get("node", "local"),
            kind=d.get("kind", ""),
            memory_mb=d.get("memory_mb"),
            running=[t for t in d.get("running", ()) if t in alive],
            parked=[t for t in d.get("parked", ()) if t in alive],
        )
        for d in devices
    ]
    pairs = [
        PairOut(
            a=p["a"],
            b=p["b"],
            rate_a=p.get("rate_a"),
            rate_b=p.get("rate_b"),
            solo_a=p.get("solo_a"),
            solo_b=p.get("solo_b"),
            gain=_gain(p),
        )
        for p in state.get("pairs") or []
    ]
    return ClusterOut(devices=out, pairs=pairs, nodes=sorted({d.node for d in out}), at=state.get("at"))
