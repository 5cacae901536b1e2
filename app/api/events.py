"""Server-sent events from database changes: `search` and `trial` when a row's visible state changes,
`report` for each new report row. A `Poller` remembers what it has sent; each `poll()` is one short
read of the store. The first poll only takes the baseline (clients load the current state through the
REST routes and follow changes here), unless a `Last-Event-ID` (a report id) says where to resume."""

from __future__ import annotations

import json
import math
from typing import Any

from sqlmodel import col, select

from app.api import crud
from app.db.models import ReportRow, SearchRow, TrialRow
from app.db.store import Store
from app.status import SEARCH_ACTIVE

MAX_REPORTS_PER_POLL = 1000


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def format_event(name: str, data: Any, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {json.dumps(_clean(data), separators=(',', ':'))}\n\n"


class Poller:
    def __init__(self, store: Store, search_id: int | None = None, last_report_id: int | None = None):
        self.store = store
        self.search_id = search_id
        self.last_report_id = last_report_id
        self._searches: dict[int, tuple] = {}
        self._trials: dict[int, tuple] = {}
        self._started = False

    def poll(self) -> list[str]:
        """Events (formatted) since the previous poll."""
        baseline = not self._started
        self._started = True
        out: list[str] = []
        with self.store.session() as s:
            q = select(SearchRow)
            if self.search_id is not None:
                q = q.where(SearchRow.id == self.search_id)
            rows = list(s.exec(q))
            changed: list[SearchRow] = []
            watch: set[int] = set()
            for r in rows:
                assert r.id is not None
                sig = (r.status, r.best_metric, r.best_trial_id, r.trials_created, r.reached, r.finished_at)
                if self._searches.get(r.id) != sig:
                    changed.append(r)
                    watch.add(r.id)
                self._searches[r.id] = sig
                if r.status in SEARCH_ACTIVE:
                    watch.add(r.id)
            if changed and not baseline:
                done = crud._done_counts(s, [r.id for r in changed if r.id is not None])
                for r in changed:
                    out.append(format_event("search", crud.search_out(r, done.get(r.id, 0)).model_dump(mode="json")))
            if watch:
                trials = s.exec(select(TrialRow).where(col(TrialRow.search_id).in_(watch)))
                for t in trials:
                    assert t.id is not None
                    sig = (t.status, t.steps, t.metric, t.best_metric, t.retries)
                    if self._trials.get(t.id) != sig and not baseline:
                        out.append(format_event("trial", crud.trial_out(t).model_dump(mode="json")))
                    self._trials[t.id] = sig
            if baseline and self.last_report_id is None:
                last = s.exec(select(ReportRow.id).order_by(col(ReportRow.id).desc()).limit(1)).first()
                self.last_report_id = last or 0
                return out
            q2 = select(ReportRow).where(col(ReportRow.id) > (self.last_report_id or 0))
            if self.search_id is not None:
                q2 = q2.where(ReportRow.search_id == self.search_id)
            for r in s.exec(q2.order_by(col(ReportRow.id)).limit(MAX_REPORTS_PER_POLL)):
                self.last_report_id = r.id
                data = {
                    "id": r.id,
                    "trial_id": r.trial_id,
                    "search_id": r.search_id,
                    "step": r.step,
                    "at": r.at,
                    "metrics": r.metrics,
                    "objective": r.objective,
                }
                out.append(format_event("report", data, r.id))
        return out
