"""Server-sent events from database changes: `search` (a `SearchSummary`, without the spec) and `trial`
when a row's visible state changes, `report` for each new report row. A `Poller` remembers what it has
sent; each `poll()` is one short read of the store. The first poll only takes the baseline (clients load
the current state through the REST routes and follow changes here), unless a `Last-Event-ID` (a report
id) says where to resume."""

from __future__ import annotations

import json
import math
from typing import Any

from app.db.models import SearchRow
from app.db.public import SearchSummary, TrialOut
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
    """`owner_id`: only the searches (and their trials and reports) of this user; None for all."""

    def __init__(
        self,
        store: Store,
        search_id: int | None = None,
        last_report_id: int | None = None,
        owner_id: int | None = None,
    ):
        self.store = store
        self.search_id = search_id
        self.owner_id = owner_id
        self.last_report_id = last_report_id
        self._searches: dict[int, tuple] = {}
        self._trials: dict[int, tuple] = {}
        self._started = False

    def poll(self) -> list[str]:
        """Events (formatted) since the previous poll."""
        baseline = not self._started
        self._started = True
        out: list[str] = []
        store = self.store
        if self.search_id is None:
            rows = store.searches()
        else:
            one = store.search(self.search_id)
            rows = [one] if one is not None else []
        if self.owner_id is not None:
            rows = [r for r in rows if r.owner_id == self.owner_id]
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
            done = store.trials_done([r.id for r in changed if r.id is not None])
            for r in changed:
                search = SearchSummary.from_row(r, done.get(r.id or 0, 0))
                out.append(format_event("search", search.model_dump(mode="json")))
        for t in store.trials_of(sorted(watch)):
            assert t.id is not None
            trial_sig = (t.status, t.steps, t.metric, t.best_metric, t.retries)
            if self._trials.get(t.id) != trial_sig and not baseline:
                out.append(format_event("trial", TrialOut.from_row(t).model_dump(mode="json")))
            self._trials[t.id] = trial_sig
        if baseline and self.last_report_id is None:
            self.last_report_id = store.last_report_id()
            return out
        for rep in store.reports_after(self.last_report_id or 0, self.search_id, MAX_REPORTS_PER_POLL, self.owner_id):
            self.last_report_id = rep.id
            data = {
                "id": rep.id,
                "trial_id": rep.trial_id,
                "search_id": rep.search_id,
                "step": rep.step,
                "at": rep.at,
                "metrics": rep.metrics,
                "objective": rep.objective,
            }
            out.append(format_event("report", data, rep.id))
        return out
