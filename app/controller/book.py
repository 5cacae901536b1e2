"""`SearchBook`: the controller's working set of searches, their lifecycle, and their trials' ends.

Contract:
- `submit` persists a new search and starts it; `load` rebuilds the active searches and their trials
  from the store after a restart (searchers from stored history; trials that were resident and are not
  any more go back to the queue, to resume from their checkpoints, with one more retry counted); each
  search is rebuilt by `quanta.controller.book_loading`, whose contract says what from what. A search
  that cannot be loaded fails alone, with the reason.
- `sync(now)` (each tick) takes up what users asked through the database (new searches, stop, pause,
  resume, trial stops) and ends the searches whose target, health or budget says so
  (`quanta.controller.book_sync`), and gives each running search new trials up to its parallelism and
  its owner's quotas (`quanta.controller.book_trials`; `maker`, the `TrialMaker`, also numbers forks and
  makes trace jobs for the controller: `maker.fork_number`, `maker.add_job`); their contracts say how.
- `finalize` is the one way a trial becomes final: row, searcher (`tell`), alive set and the search's
  health together.
- `finish` ends a search: its alive trials are stopped, asking resident ones for a checkpoint as they
  stop, so that a resume loses no work; a failed search's reason is stored with its status.
- `store_counts(s, computing)` stores how a search's trials stand (`TrialCounts`) when that changed.
- Searchers: with `searcher_wait_s` None each is built and asked on the caller's thread (the simulator,
  tests: deterministic); with a number, each lives on a thread of its own (`SearcherHost`), waited for
  at most that long by the tick (`TrialMaker`). A searcher that cannot be built or asked fails its
  search alone, with the reason.
- Resume (`reopen`, on a `resume` of a search this book does not hold running or paused: one that
  ended, or one whose controller ended without ending it): it is taken up again as after a restart, its
  searcher rebuilt from its whole history (new trials continue its numbering, so no configuration is
  asked again), its budget as stored now (the API raises it), and the trials its end stopped
  (`resumable_trial`) queued to go on from their checkpoints. It waits while any of its trials is still
  resident.
- Forks (`quanta.controller.forks`): a forked trial takes the next number of its search (`maker.fork_number`)
  but is not the searcher's: it never asks, tells or observes it, its history leaves it out, and it does
  not count against `max_trials`. A fork whose parent's state is still being taken (no `fork_step`) is
  the fork desk's, not the book's, after a restart too.
Every fact is written through to the store as it happens. It stops trials itself (ending a search, a
user's stop) as a round of `Stop` actions of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from quanta.controller.book_loading import read_stored_search, restore_search
from quanta.controller.book_sync import BookSync
from quanta.controller.book_trials import TrialMaker
from quanta.controller.rounds import Rounds
from quanta.controller.searcher_host import SearcherHost
from quanta.controller.state import SearchState, Signals, TrialState, objective_loss
from quanta.controller.trials import TrialIndex
from quanta.db.models import FIRST_ADMIN, SearchRow
from quanta.db.protocol import ControllerStore
from quanta.db.warm import items_from_json, warm_items
from quanta.executor.actions import Stop
from quanta.executor.runtime.base import Runtime
from quanta.search.factory import make_searcher
from quanta.search.searcher import HistoryItem, Searcher
from quanta.spec import SearchSpec
from quanta.status import SEARCH_STARTED, SearchStatus, TrialStatus, count_trials, resumable_trial

log = logging.getLogger("quanta.controller")


class SearchBook:
    """The active searches and their trials, held in memory and written through to the store (see the
    module doc); its parts make new trials (`TrialMaker`) and apply the store's commands (`BookSync`)."""

    def __init__(
        self,
        store: ControllerStore,
        runtime: Runtime,
        index: TrialIndex,
        rounds: Rounds,
        signals: Signals,
        *,
        searcher_wait_s: float | None = None,
    ):
        self._store = store
        self._searcher_wait_s = searcher_wait_s
        self._runtime = runtime
        self._index = index
        self._rounds = rounds
        self._signals = signals
        self.searches: dict[int, SearchState] = {}  # active searches (and ended ones until deleted)
        # Trials the last plan holds at a rung (successive halving): alive, but not counted against their
        # search's parallelism, so that new configurations keep coming while they wait.
        self.held: frozenset[int] = frozenset()
        # Handles the events the runtime holds now (the controller binds its own): before a search is taken
        # up again, the exits of its trials' last processes are handled, not applied to their next ones.
        self.drain: Callable[[], None] = lambda: None
        # New trials (a search's, a fork's number, a trace job): called by the controller and the forks.
        self.maker = TrialMaker(self, store, runtime, index, signals, searcher_wait_s)
        self._store_sync = BookSync(self, self.maker, store, index)

    # ---- looking up ----------------------------------------------------------------------------

    def search(self, search_id: int) -> SearchState | None:
        return self.searches.get(search_id)

    def governing(self) -> SearchState | None:
        """The oldest running search: its spec chooses the cluster's policy and quantum."""
        return next((s for s in self.searches.values() if s.status == SearchStatus.RUNNING), None)

    # ---- starting searches ---------------------------------------------------------------------

    def submit(self, spec: SearchSpec, owner: str = FIRST_ADMIN) -> int:
        """Persist a validated spec as a new search of user `owner` and start it. Returns the search id.
        Raises `WarmStartError` (nothing stored) when a search it warm-starts from is missing or does not fit."""
        now = self._runtime.now()
        warm = warm_items(self._store, spec)
        row = self._store.create_search(spec.name, spec.model_dump(mode="json"), now, owner)
        assert row.id is not None
        if spec.search.warm_start_from:
            self._store.save_warm_start(row.id, warm)
        self._store.update_search(row.id, status=SearchStatus.RUNNING, started_at=now)
        self.activate(row.id, spec, now, history=[], owner=owner, warm=warm)
        return row.id

    def activate(
        self,
        search_id: int,
        spec: SearchSpec,
        started_at: float,
        history: list[HistoryItem],
        owner: str = FIRST_ADMIN,
        warm: list[dict[str, Any]] | None = None,
    ) -> SearchState:
        """Hold search `search_id` (of user `owner`) as running, its searcher rebuilt from `history` and
        seeded with the stored warm-start items `warm` (`quanta.db.warm`): built here, or on its own thread
        when the book hosts searchers (`searcher_wait_s`)."""
        items = items_from_json(warm or [])

        def build() -> Searcher:
            return make_searcher(
                spec.space,
                spec.seed,
                spec.search,
                rungs=spec.searcher_rungs(),
                history=history,
                warm=items,
                pareto=spec.pareto,
            )

        searcher: Searcher
        if self._searcher_wait_s is None:
            searcher = build()
        else:
            searcher = SearcherHost(build, f"quanta-searcher-{search_id}", on_ready=self._wake)
        state = SearchState(search_id, spec, searcher, started_at, owner=owner)
        self.searches[search_id] = state
        self._runtime.warm([spec.module])
        self._signals.wake = True
        return state

    def _wake(self) -> None:
        """A hosted searcher finished an ask (on its thread): the controller stops waiting and ticks."""
        self._signals.wake = True

    def load(self) -> None:
        """Rebuild the working set from the store (after a restart): active searches continue, their
        searchers are rebuilt from stored history, and trials that were resident restart from their
        checkpoints (their processes died with the previous controller) unless the runtime still
        holds them (node agents outlive a controller in distributed mode)."""
        # Queued searches are left to sync, which starts them like new ones. Each search is loaded on its
        # own: one that cannot be (a spec or history this version refuses) is marked failed, the rest go on.
        for row in self._store.searches(SEARCH_STARTED):
            assert row.id is not None
            try:
                self.load_one(row)
            except Exception as exc:
                log.exception("search %s cannot be loaded: marked failed", row.id)
                self.forget(row.id)
                self.mark_failed(row.id, f"cannot be loaded after a restart: {type(exc).__name__}: {exc}")

    def mark_failed(self, search_id: int, reason: str) -> None:
        """Store search `search_id`, which this book does not hold (any more), as failed with `reason`."""
        now = self._runtime.now()
        self._store.update_search(
            search_id, status=SearchStatus.FAILED, error=reason[:2000], finished_at=now, command=None
        )

    def load_one(self, row: SearchRow) -> None:
        """Activate one stored running or paused search with its trials, rebuilt from the store by
        `quanta.controller.book_loading` (see `load`)."""
        assert row.id is not None
        stored = read_stored_search(self._store, row)
        started = row.started_at or row.created_at
        s = self.activate(row.id, stored.spec, started, stored.history, owner=row.owner, warm=stored.warm)
        for ts in restore_search(s, stored, self._runtime.residency(), self._store):
            self.track(s, ts)

    def reopen(self, row: SearchRow, held: SearchState | None, now: float) -> bool:
        """Take up search `row` again on a `resume` (see the module doc): an ended one (`held` while this
        book still holds it) is running again with the trials its end stopped queued to go on from their
        checkpoints, and the time it spent ended set aside from its time budget; a running or paused one
        no controller holds is loaded as after a restart. False (nothing done, the command left pending)
        while any of its trials is still resident."""
        assert row.id is not None
        if held is not None:
            resident = self._runtime.residency()
            if any(t.id in resident for t in held.trials.values()):
                return False
            self.drain()
            self.forget(row.id)
        fields: dict[str, Any] = {"command": None, "waiting": None}
        requeued: list[int] = []
        if SearchStatus(row.status).final:
            for t in self._store.trials(row.id):
                if resumable_trial(t.status, t.reason):
                    assert t.id is not None
                    self._store.update_trial(t.id, status=TrialStatus.QUEUED, finished_at=None, reason=None)
                    requeued.append(t.id)
            idle = row.idle_seconds + max(0.0, now - row.finished_at) if row.finished_at is not None else 0.0
            fields.update(status=SearchStatus.RUNNING, finished_at=None, idle_seconds=idle, error=None)
        fresh = self._store.update_search(row.id, **fields)
        try:
            self.load_one(fresh)
        except Exception as exc:
            log.exception("search %s cannot be resumed: marked failed", row.id)
            self.forget(row.id)
            self.mark_failed(row.id, f"cannot be resumed: {type(exc).__name__}: {exc}")
            return True
        s = self.searches[row.id]
        for tid in requeued:  # it ran before: a later process of it, from its checkpoint when it has one
            s.trials[tid].resume = True
        log.info("search %s resumed (%d trials go on)", row.id, len(requeued))
        return True

    # ---- trials --------------------------------------------------------------------------------

    def track(self, s: SearchState | None, ts: TrialState) -> None:
        """Hold trial `ts` (of search `s`, or a job when None) in the working set."""
        if s is not None:
            s.trials[ts.id] = ts
            ts.devices_needed = s.spec.resources.devices_per_trial
            ts.max_steps = s.spec.budget.max_steps if ts.own_max_steps is None else ts.own_max_steps
        self._index.add(ts)

    def mark_running(self, trial_ids: list[int], now: float) -> None:
        """Queued trials among `trial_ids` are being started (a round's `Run` actions)."""
        for tid in trial_ids:
            ts = self._index.get(tid)
            if ts is not None and ts.status == TrialStatus.QUEUED:
                self._index.touch(ts.id)
                ts.status = TrialStatus.RUNNING
                ts.started_at = ts.started_at or now
                self._store.update_trial(ts.id, status=TrialStatus.RUNNING, started_at=ts.started_at)

    def finalize(
        self, t: TrialState, status: TrialStatus, now: float, error: str | None = None, *, reason: str | None = None
    ) -> None:
        """Trial `t` ends with `status` (a final one): its row, its searcher and the alive set learn it.
        `error`: why a failed trial failed; `reason`: why a stopped or killed trial ended early (for a killed
        one, the policy's verdict)."""
        t.status = status
        self._index.finalized(t)
        t.finished_at = now
        if status == TrialStatus.FAILED:
            t.error = error
        if reason is not None:
            t.reason = reason[:2000]
        self._store.update_trial(
            t.id,
            status=status.value,
            finished_at=now,
            error=t.error,
            reason=t.reason,
            steps=t.steps,
            metric=t.metric,
            best_metric=t.best,
            device_seconds=t.device_seconds,
        )
        s = self.searches.get(t.search_id)
        if s is not None:
            if t.parent_id is None:  # a fork is none of the searcher's proposals
                s.searcher.tell(
                    t.number, objective_loss(s.spec, t.metric), status != TrialStatus.FAILED and t.metric is not None
                )
            s.health.ended(t.id, status)
        self._signals.wake = True

    def stop_trials(self, trials: list[TrialState], reason: str, *, checkpoint: bool = False) -> None:
        """Stop `trials` (final now, `STOPPED` with `reason`); `checkpoint`: resident ones write a checkpoint
        first, to go on from it if their search is resumed."""
        now = self._runtime.now()
        resident = self._runtime.residency()
        stops = [Stop(t.id, reason, checkpoint=checkpoint) for t in trials if t.id in resident]
        for t in trials:
            self.finalize(t, TrialStatus.STOPPED, now, reason=reason)
        if stops:
            self._runtime.apply(self._rounds.record(now, stops), stops)

    # ---- the lifecycle -------------------------------------------------------------------------

    def sync(self, now: float, read_store: bool = True) -> None:
        """Commands from the store (unless `read_store` is False: not due this tick), then each running
        search's budget and new trials (`BookSync`)."""
        self._store_sync.sync(now, read_store)

    def fail(self, s: SearchState, reason: str) -> None:
        """End search `s` as failed, `reason` stored as its error (its alive trials are stopped)."""
        self.finish(s, SearchStatus.FAILED, reason, error=reason)

    def finish(self, s: SearchState, status: SearchStatus, reason: str, *, error: str | None = None) -> None:
        """End search `s` with `status`: its alive trials are stopped (`TrialStatus.STOPPED`, with `reason`:
        nothing judged them). `error` (a failed search's) is stored in the same write as the status, so
        that no reader sees a failed search without its reason."""
        now = self._runtime.now()
        s.status = status
        self.stop_trials(s.alive(), reason, checkpoint=True)
        s.waiting = None  # an ended search waits for nothing
        s.counts = count_trials((t.status, True, False, t.at_rung) for t in s.trials.values())
        fields: dict[str, object] = {"error": error[:2000]} if error is not None else {}
        self._store.update_search(
            s.id, status=status, finished_at=now, waiting=None, trial_counts=s.counts.as_dict(), **fields
        )
        if isinstance(s.searcher, SearcherHost):
            s.searcher.close()  # an ended search asks nothing more: its thread ends
        level = logging.WARNING if status == SearchStatus.FAILED else logging.INFO
        log.log(level, "search %s %s: %s", s.id, status, reason)

    def store_counts(self, s: SearchState, computing: frozenset[int] | set[int]) -> None:
        """Store how search `s`'s trials stand (`TrialCounts`), the trials in `computing` running now, when
        that changed since it was last stored."""
        counts = count_trials(
            (t.status, t.started_at is not None or t.resume, t.id in computing, t.at_rung) for t in s.trials.values()
        )
        if counts != s.counts:
            s.counts = counts
            self._store.update_search(s.id, trial_counts=counts.as_dict())

    def forget(self, search_id: int) -> None:
        """Drop a deleted search and its trials from the working set (its rows are gone)."""
        gone = self.searches.pop(search_id, None)
        if gone is not None and isinstance(gone.searcher, SearcherHost):
            gone.searcher.close()
        self._index.forget([tid for tid, t in self._index.by_id.items() if t.search_id == search_id])
