"""`BookSync`: each tick, `SearchBook` takes up what users asked through the store and ends the searches
that are done.

Contract (`sync(now)`, from `SearchBook.sync`):
- What users asked through the database (the API writes rows, never calls the controller): a queued
  search is started like a new one (claimed by a conditional update, so a search another controller
  took or a deleted one is left alone); one whose spec or warm start is refused fails alone, with the
  reason. Under a quota (`TrialMaker.quota_room`) a queued search whose owner has no room stays queued,
  saying why in its `waiting` column, and a user with a quota starts at most one search per tick (the
  next sees its trials). `stop` ends a held search (`SearchBook.finish`), `pause` pauses a running one,
  `resume` takes up a paused one again with its spec as stored now (the API may have raised its
  budget), or an ended one (or one no controller holds) through `SearchBook.reopen`, the command left
  pending while any of its trials is still resident. A trial's `stop` stops it (`TRIAL_STOPPED_BY_USER`).
- Then each running search: it ends `completed` once its target is reached (under `stop_on_target`);
  `failed` when its trials show it cannot succeed (`SearchHealth.verdict`: trials failing in a row, a
  metric never reported, every trial failed; the reason in its `error`), a metric not reported while
  others are being warned about once, in the log and the search's `warning` (withdrawn if it comes);
  and when its budget is spent: the time it ran (since it started, less the time it spent ended before
  it was resumed), or `max_trials` created (forks aside) and none alive nor a fork under way. Otherwise
  it gets new trials (`TrialMaker.fill_search`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from quanta.controller.book_trials import TrialMaker
from quanta.controller.state import SearchState
from quanta.controller.trials import TrialIndex
from quanta.db.models import SearchRow
from quanta.db.protocol import ControllerStore
from quanta.db.warm import warm_items
from quanta.spec import spec_from_stored
from quanta.status import SEARCH_STARTED, TRIAL_STOPPED_BY_USER, SearchStatus

if TYPE_CHECKING:  # the book holds its sync: an annotation only
    from quanta.controller.book import SearchBook

log = logging.getLogger("quanta.controller")


class BookSync:
    """The store's commands and the searches' budgets, applied to `book` (see the module doc)."""

    def __init__(self, book: SearchBook, maker: TrialMaker, store: ControllerStore, index: TrialIndex):
        self._book = book
        self._maker = maker
        self._store = store
        self._index = index

    def sync(self, now: float, read_store: bool = True) -> None:
        """Commands from the store (when `read_store`), then each running search's budget and new trials."""
        if read_store:
            self._sync_store(now)
        for s in list(self._book.searches.values()):
            self._sync(s, now)

    def _cannot_start(self, search_id: int, exc: Exception) -> None:
        log.warning("search %s cannot start: %s", search_id, exc)
        self._book.forget(search_id)
        self._book.mark_failed(search_id, str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}")

    def _sync_store(self, now: float) -> None:
        """Pick up what users asked through the database (the API writes rows, never calls us):
        new searches (held queued while their owner has no room under a quota), stop/pause/resume of
        searches, stop of trials."""
        book = self._book
        rows = self._store.searches_needing_controller()
        idle = not self._index.alive  # nothing runs: quotas matter only to a search about to start
        if not idle or any(row.status == SearchStatus.QUEUED for row in rows):
            self._maker.read_quotas()
        starting: set[str] = set()  # users whose search started in this sync
        for row in rows:
            assert row.id is not None
            s = book.searches.get(row.id)
            if row.status == SearchStatus.QUEUED and s is None:
                try:  # a search that cannot start fails alone, with the reason; the others go on
                    spec = spec_from_stored(row.spec)
                except Exception as exc:
                    self._cannot_start(row.id, exc)
                    continue
                room, reason = self._maker.quota_room(row.owner, spec.resources.devices_per_trial)
                if room is not None and row.owner in starting:
                    continue  # one start per user with a quota and tick: the next sees its trials
                if room is not None and room < 1:
                    if row.waiting != reason:  # held queued, saying why (written when it changes)
                        self._store.update_search(row.id, waiting=reason)
                    continue
                # Claimed by a conditional update (queued -> running): a search deleted or started by
                # another controller meanwhile is left alone.
                if not self._store.claim_search(row.id, now):
                    continue
                try:
                    warm = warm_items(self._store, spec)  # WarmStartError: a ValueError naming the search
                    if spec.search.warm_start_from:
                        self._store.save_warm_start(row.id, warm)
                    book.activate(row.id, spec, now, history=[], owner=row.owner, warm=warm)
                except Exception as exc:
                    self._cannot_start(row.id, exc)
                    continue
                starting.add(row.owner)
                if row.waiting is not None:
                    self._store.update_search(row.id, waiting=None)
                continue
            command = row.command
            if command == "resume" and (s is None or s.status not in SEARCH_STARTED):
                book.reopen(row, s, now)  # (the command stays while its trials are still ending)
                continue
            self._store.update_search(row.id, command=None)
            if s is None or s.status not in SEARCH_STARTED:
                continue
            if command == "stop":
                book.finish(s, SearchStatus.STOPPED, "search stopped by user")
            elif command == "pause" and s.status == SearchStatus.RUNNING:
                s.status = SearchStatus.PAUSED
                self._store.update_search(row.id, status=SearchStatus.PAUSED)
            elif command == "resume":
                self._take_spec(s, row)  # its budget may have been raised
                if s.status == SearchStatus.PAUSED:
                    s.status = SearchStatus.RUNNING
                    self._store.update_search(row.id, status=SearchStatus.RUNNING)
        if idle:
            return  # a trial's command is for an alive one (a final trial's is cleared when one runs again)
        for trow in self._store.trials_with_commands():
            assert trow.id is not None
            self._store.update_trial(trow.id, command=None)
            t = self._index.alive.get(trow.id)
            if t is not None and trow.command == "stop":
                book.stop_trials([t], TRIAL_STOPPED_BY_USER)

    def _take_spec(self, s: SearchState, row: SearchRow) -> None:
        """Hold the spec stored for held search `s` now (a resume may have raised its budget)."""
        try:
            s.spec = spec_from_stored(row.spec)
        except Exception as exc:  # stored by this version's API: only a bug gets here
            log.warning("search %s: its stored spec no longer parses (%s): its budget stays", s.id, exc)
            return
        for t in s.trials.values():
            t.max_steps = s.spec.budget.max_steps

    def _sync(self, s: SearchState, now: float) -> None:
        if s.status != SearchStatus.RUNNING:
            return
        spec = s.spec
        if s.reached_at is not None and spec.budget.stop_on_target:
            self._book.finish(s, SearchStatus.COMPLETED, "target reached")
            return
        metric, in_row = spec.metric.name, spec.budget.max_consecutive_failures
        warning = s.health.warning(metric)
        if warning is not None:
            log.warning("search %s: %s", s.id, warning)
            self._store.update_search(s.id, warning=warning[:2000])
        elif s.health.retracted():
            log.info("search %s: metric '%s' reported after all: its warning is withdrawn", s.id, metric)
            self._store.update_search(s.id, warning=None)
        problem = s.health.verdict(metric, in_row)
        if problem is not None:
            self._book.fail(s, problem)
            return
        if now - s.started_at - s.idle_seconds >= spec.budget.max_seconds:
            self._budget_spent(s, "time budget spent")
            return
        self._maker.fill_search(s, now)
        if s.created - s.forked >= spec.budget.max_trials and not s.alive() and not s.forks_open:
            self._budget_spent(s, "all trials done")

    def _budget_spent(self, s: SearchState, reason: str) -> None:
        """End `s`, whose budget is spent: completed, unless its trials show it never could succeed."""
        problem = s.health.verdict(s.spec.metric.name, s.spec.budget.max_consecutive_failures, trials=s.created)
        if problem is not None:
            self._book.fail(s, problem)
        else:
            self._book.finish(s, SearchStatus.COMPLETED, reason)
