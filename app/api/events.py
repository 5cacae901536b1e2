"""Server-sent events from database changes: `search` (a `SearchSummary`, without the spec: sent when its
status, best, progress, trial counts or warning change) and `trial` when a row's visible state changes,
`report` for each new report row. A `Poller` remembers what it has sent; each `poll()` is one short read
of the store. The first poll only takes the baseline (clients load
the current state through the REST routes and follow changes here), unless a `Last-Event-ID` (a report
id) says where to resume.

Every open stream polls, so their reads are shared (`SharedReads`): streams poll at the same instants
(multiples of the poll interval), and a read another stream made a moment before is answered from it, so
twenty streams cost the database about what one does instead of taking the API's threads from requests."""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from quanta.db.models import ReportRow, SearchRow, TrialRow, UserRow
from quanta.db.public.searches import SearchSummary
from quanta.db.public.trials import TrialOut
from quanta.db.store import Store
from quanta.status import SEARCH_ACTIVE

MAX_REPORTS_PER_POLL = 1000
T = TypeVar("T")


class SharedReads:
    """The store's reads a `Poller` makes (same names and arguments), shared by every stream of a server:
    a read asked for again within `fresh_s` of the last time it was made is answered with that result,
    and of the streams asking at once one reads while the others wait for its answer. `verify` checks a
    stream's token the same way (a revoked token is refused at most `fresh_s` later than by a request).
    Thread-safe; the rows it hands out are shared, so readers must not change them (a Poller does not)."""

    def __init__(self, store: Store, fresh_s: float):
        self.store = store
        self.fresh_s = fresh_s
        self._lock = threading.Lock()
        self._memo: dict[tuple[Any, ...], tuple[float, Any]] = {}
        self._gates: dict[tuple[Any, ...], threading.Lock] = {}

    def _shared(self, key: tuple[Any, ...], read: Callable[[], T]) -> T:
        with self._lock:
            hit = self._memo.get(key)
            if hit is not None and time.monotonic() - hit[0] < self.fresh_s:
                return hit[1]
            gate = self._gates.setdefault(key, threading.Lock())
        with gate:  # one reader per key at a time: the others take its answer
            with self._lock:
                hit = self._memo.get(key)
                if hit is not None and time.monotonic() - hit[0] < self.fresh_s:
                    return hit[1]
            started = time.monotonic()  # fresh from when the read began: nothing newer is missed
            value = read()
            with self._lock:
                self._memo[key] = (started, value)
                if len(self._memo) > 512:  # keys of past report positions and gone streams
                    old = [k for k, (at, _) in self._memo.items() if started - at >= self.fresh_s]
                    for k in old:
                        del self._memo[k]
                        self._gates.pop(k, None)
            return value

    def searches(self) -> list[SearchRow]:
        return self._shared(("searches",), self.store.searches)

    def search(self, search_id: int) -> SearchRow | None:
        return self._shared(("search", search_id), lambda: self.store.search(search_id))

    def trials_done(self, search_ids: Sequence[int]) -> dict[int, int]:
        ids = tuple(search_ids)
        return self._shared(("trials_done", ids), lambda: self.store.trials_done(ids))

    def trials_of(self, search_ids: Sequence[int]) -> list[TrialRow]:
        ids = tuple(search_ids)
        return self._shared(("trials_of", ids), lambda: self.store.trials_of(ids))

    def last_report_id(self) -> int:
        return self._shared(("last_report_id",), self.store.last_report_id)

    def reports_after(
        self, report_id: int, search_id: int | None = None, limit: int = 1000, owner_id: int | None = None
    ) -> list[ReportRow]:
        key = ("reports_after", report_id, search_id, limit, owner_id)
        return self._shared(key, lambda: self.store.reports_after(report_id, search_id, limit, owner_id))

    def verify(self, token: str) -> UserRow | None:
        """The token's user, as `quanta.api.auth.verify` says (None: refused)."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        return self._shared(("verify", digest), lambda: self.store.authenticate(token, time.time()))


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
        store: Store | SharedReads,
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
            counts = tuple(sorted((r.trial_counts or {}).items()))
            best = (r.best_metric, r.best_trial_id, r.reached)
            budget = ((r.spec or {}).get("budget") or {}).get("max_trials")  # raised by a resume
            info = (tuple(r.tags or ()), r.notes, budget)
            sig = (r.status, *best, r.trials_created, r.finished_at, r.warning, counts, *info)
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
