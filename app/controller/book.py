"""`SearchBook`: the search lifecycle and the trials it creates.

Contract:
- `submit` persists a new search and starts it; `load` rebuilds the active searches and their trials
  from the store after a restart (searchers from stored history; trials that were resident and are not
  any more go back to the queue, to resume from their checkpoints, with one more retry counted); each
  search is rebuilt by `quanta.controller.book_loading`, whose contract says what from what.
- `sync(now)` picks up what users asked through the database (new searches, stop/pause/resume,
  trial stops), ends searches whose target or budget says so (the time budget counts the time a search
  ran: since it started, less the time it spent ended before it was resumed), and asks each running search's searcher
  for new trials up to its parallelism (trials the last plan `held` at a rung do not count; at most
  `MAX_NEW_PER_TICK` per search and tick); under a run-to-rung policy no more than the cluster's devices
  + `lookahead` (`alive_cap`).
- `finalize` is the one way a trial becomes final: row, searcher (`tell`), alive set and the search's
  health together.
- A search whose trials show it cannot succeed ends `failed` with the reason in its `error`
  (`SearchHealth.verdict`: trials failing in a row, a metric never reported, every trial failed); a
  metric not reported while others are is warned about once, in the log and the search's `warning`.
- `store_counts(s, computing)` stores how a search's trials stand (`TrialCounts`) when that changed.
- Searchers: with `searcher_wait_s` None each is built and asked on the caller's thread (the simulator,
  tests: deterministic); with a number, each lives on a thread of its own (`SearcherHost`) and the tick
  waits at most that long for a searcher's build and asks: a wide space or a long history delays that
  search's new trials to a later tick, never the other searches' scheduling. A searcher that cannot be
  built or asked fails its search alone, with the reason.
- Resume (`resume` on a search this book does not hold running or paused: one that ended, or one whose
  controller ended without ending it): it is taken up again as after a restart, its searcher rebuilt
  from its whole history (new trials continue its numbering, so no configuration is asked again), its
  budget as stored now (the API raises it), and the trials its end stopped (`resumable_trial`) queued
  to go on from their checkpoints. It waits while any of its trials is still resident. Ending a search
  asks its resident trials for a checkpoint as they stop, so that a resume loses no work.
- `add_job` creates a trial that belongs to no search (a trace job).
- Forks (`quanta.controller.forks`): a forked trial takes the next number of its search (`fork_number`,
  once the searcher has no ask outstanding) but is not the searcher's: it never asks, tells or observes
  it, its history leaves it out, and it does not count against `max_trials`. A fork whose parent's
  state is still being taken (no `fork_step`) is the fork desk's, not the book's, after a restart too.
- Quotas (per user, `max_alive_trials` and `max_devices`; 0 = none, read from the store at each sync):
  a user's alive trials (held ones aside, as for parallelism) never exceed `max_alive_trials`, and the
  devices they need together never exceed `max_devices` (so they can never occupy more at once). A
  queued search whose owner has no room stays queued; a running one makes no new trials; either says
  why in its `waiting` column until room frees up.
Every fact is written through to the store as it happens. It stops trials itself (ending a search, a
user's stop) as a round of `Stop` actions of its own.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

from quanta.controller.book_loading import read_stored_search, restore_search
from quanta.controller.rounds import Rounds
from quanta.controller.searcher_host import SearcherHost
from quanta.controller.state import SearchState, Signals, TrialState, objective_loss
from quanta.controller.trials import TrialIndex
from quanta.db.models import FIRST_ADMIN, SearchRow
from quanta.db.protocol import ControllerStore
from quanta.db.warm import items_from_json, warm_items
from quanta.executor.actions import Stop
from quanta.executor.policy.knobs import PbtKnobs, RunToRungKnobs
from quanta.executor.runtime.base import Runtime
from quanta.search.factory import make_searcher
from quanta.search.searcher import HistoryItem, Searcher, Suggestion
from quanta.spec import SearchSpec, spec_from_stored
from quanta.status import (
    SEARCH_STARTED,
    TRIAL_STOPPED_BY_USER,
    SearchStatus,
    TrialStatus,
    count_trials,
    resumable_trial,
)

log = logging.getLogger("quanta.controller")

# Trials one search may create in one tick: a huge parallelism fills over several ticks instead of
# holding the controller (and the database) for one long burst.
MAX_NEW_PER_TICK = 64


class SearchBook:
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
        # user name -> (max alive trials, max devices) of the users with a quota, as of the last sync
        self._quotas: dict[str, tuple[int, int]] = {}
        self._next_job: int | None = None  # the next trace job's number (None: not read from the store yet)
        # Handles the events the runtime holds now (the controller binds its own): before a search is taken
        # up again, the exits of its trials' last processes are handled, not applied to their next ones.
        self.drain: Callable[[], None] = lambda: None

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
        self._activate(row.id, spec, now, history=[], owner=owner, warm=warm)
        return row.id

    def _activate(
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
                self._load_one(row)
            except Exception as exc:
                log.exception("search %s cannot be loaded: marked failed", row.id)
                self.forget(row.id)
                self._fail(row.id, f"cannot be loaded after a restart: {type(exc).__name__}: {exc}")

    def _fail(self, search_id: int, reason: str) -> None:
        now = self._runtime.now()
        self._store.update_search(
            search_id, status=SearchStatus.FAILED, error=reason[:2000], finished_at=now, command=None
        )

    def _load_one(self, row: SearchRow) -> None:
        """Activate one stored running or paused search with its trials, rebuilt from the store by
        `quanta.controller.book_loading` (see `load`)."""
        assert row.id is not None
        stored = read_stored_search(self._store, row)
        started = row.started_at or row.created_at
        s = self._activate(row.id, stored.spec, started, stored.history, owner=row.owner, warm=stored.warm)
        for ts in restore_search(s, stored, self._runtime.residency(), self._store):
            self.track(s, ts)

    # ---- trials --------------------------------------------------------------------------------

    def track(self, s: SearchState | None, ts: TrialState) -> None:
        """Hold trial `ts` (of search `s`, or a job when None) in the working set."""
        if s is not None:
            s.trials[ts.id] = ts
            ts.devices_needed = s.spec.resources.devices_per_trial
            ts.max_steps = s.spec.budget.max_steps if ts.own_max_steps is None else ts.own_max_steps
        self._index.add(ts)

    def add_job(
        self,
        kind: str,
        steps: int,
        devices_needed: int = 1,
        *,
        trainable: str | None = None,
        config: dict[str, Any] | None = None,
        owner: str = "",
        kind_rates: Mapping[str, float] | None = None,
    ) -> int:
        """Submit a job that is not part of a search (a trace job): it runs `steps` mini-batches on
        `devices_needed` devices and is placed by the same policy as search trials; `owner` is the user it
        counts against in the share layer; `kind_rates` its known solo rate per device kind (ValueError
        for a negative or non-finite one)."""
        rates = {str(k): float(r) for k, r in (kind_rates or {}).items()}
        bad = [k for k, r in rates.items() if not math.isfinite(r) or r < 0]
        if bad:
            raise ValueError(f"kind_rates: the rate on {bad[0]} must be a finite number >= 0, not {rates[bad[0]]}")
        now = self._runtime.now()
        if self._next_job is None:  # numbers are unique per search, jobs' "search" 0 included
            self._next_job = 1 + max((t.number for t in self._store.trials(0)), default=-1)
        number = max(len(self._index.by_id), self._next_job)
        self._next_job = number + 1
        row = self._store.add_trial(0, number, {"kind": kind}, {}, now)
        assert row.id is not None
        ts = TrialState(row.id, 0, number, {"kind": kind}, {}, now, kind=kind, trainable=trainable, owner=owner)
        ts.config = dict(config or {})
        ts.kind_rates = rates
        self.track(None, ts)
        ts.devices_needed, ts.max_steps = devices_needed, steps
        self._signals.wake = True
        return row.id

    def _new_trial(self, s: SearchState, now: float, suggestion: Suggestion | None = None) -> TrialState:
        """Trial number `s.created` of search `s`, with `suggestion` (asked of the searcher now if None)."""
        number = s.created
        if suggestion is None:
            suggestion = s.searcher.ask(number)
        row = self._store.add_trial(s.id, number, suggestion.params, suggestion.vals, now)
        assert row.id is not None
        s.created = number + 1
        ts = TrialState(row.id, s.id, number, suggestion.params, suggestion.vals, now)
        self.track(s, ts)
        self._signals.replan = True  # a new trial is placed now, not a quantum later
        return ts

    def fork_number(self, s: SearchState) -> int | None:
        """The number a new fork of search `s` takes (the next of its sequence, counted as forked), or None
        while it cannot have one yet: the searcher has an ask outstanding (it was given the next number)
        or has not asked all the points the user gave (a point is asked by its number)."""
        if isinstance(s.searcher, SearcherHost) and s.searcher.outstanding():
            return None
        if s.created - s.forked < len(s.spec.search.points_to_evaluate):
            return None
        number = s.created
        s.created += 1
        s.forked += 1
        return number

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

    def _stop_trials(self, trials: list[TrialState], reason: str, *, checkpoint: bool = False) -> None:
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

    def sync(self, now: float) -> None:
        """Commands from the store, then each running search's budget and new trials."""
        self._sync_store(now)
        for s in list(self.searches.values()):
            self._sync(s, now)

    def _cannot_start(self, search_id: int, exc: Exception) -> None:
        log.warning("search %s cannot start: %s", search_id, exc)
        self.forget(search_id)
        self._fail(search_id, str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}")

    def _sync_store(self, now: float) -> None:
        """Pick up what users asked through the database (the API writes rows, never calls us):
        new searches (held queued while their owner has no room under a quota), stop/pause/resume of
        searches, stop of trials."""
        rows = self._store.searches_needing_controller()
        self._quotas = {  # read every sync: an admin's change holds from the next tick
            u.name: (u.max_alive_trials, u.max_devices)
            for u in self._store.users()
            if u.max_alive_trials > 0 or u.max_devices > 0
        }
        starting: set[str] = set()  # users whose search started in this sync
        for row in rows:
            assert row.id is not None
            s = self.searches.get(row.id)
            if row.status == SearchStatus.QUEUED and s is None:
                try:  # a search that cannot start fails alone, with the reason; the others go on
                    spec = spec_from_stored(row.spec)
                except Exception as exc:
                    self._cannot_start(row.id, exc)
                    continue
                room, reason = self.quota_room(row.owner, spec.resources.devices_per_trial)
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
                    self._activate(row.id, spec, now, history=[], owner=row.owner, warm=warm)
                except Exception as exc:
                    self._cannot_start(row.id, exc)
                    continue
                starting.add(row.owner)
                if row.waiting is not None:
                    self._store.update_search(row.id, waiting=None)
                continue
            command = row.command
            if command == "resume" and (s is None or s.status not in SEARCH_STARTED):
                self._reopen(row, s, now)  # (the command stays while its trials are still ending)
                continue
            self._store.update_search(row.id, command=None)
            if s is None or s.status not in SEARCH_STARTED:
                continue
            if command == "stop":
                self.finish(s, SearchStatus.STOPPED, "search stopped by user")
            elif command == "pause" and s.status == SearchStatus.RUNNING:
                s.status = SearchStatus.PAUSED
                self._store.update_search(row.id, status=SearchStatus.PAUSED)
            elif command == "resume":
                self._take_spec(s, row)  # its budget may have been raised
                if s.status == SearchStatus.PAUSED:
                    s.status = SearchStatus.RUNNING
                    self._store.update_search(row.id, status=SearchStatus.RUNNING)
        for trow in self._store.trials_with_commands():
            assert trow.id is not None
            self._store.update_trial(trow.id, command=None)
            t = self._index.alive.get(trow.id)
            if t is not None and trow.command == "stop":
                self._stop_trials([t], TRIAL_STOPPED_BY_USER)

    def _take_spec(self, s: SearchState, row: SearchRow) -> None:
        """Hold the spec stored for held search `s` now (a resume may have raised its budget)."""
        try:
            s.spec = spec_from_stored(row.spec)
        except Exception as exc:  # stored by this version's API: only a bug gets here
            log.warning("search %s: its stored spec no longer parses (%s): its budget stays", s.id, exc)
            return
        for t in s.trials.values():
            t.max_steps = s.spec.budget.max_steps

    def _reopen(self, row: SearchRow, held: SearchState | None, now: float) -> bool:
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
            self._load_one(fresh)
        except Exception as exc:
            log.exception("search %s cannot be resumed: marked failed", row.id)
            self.forget(row.id)
            self._fail(row.id, f"cannot be resumed: {type(exc).__name__}: {exc}")
            return True
        s = self.searches[row.id]
        for tid in requeued:  # it ran before: a later process of it, from its checkpoint when it has one
            s.trials[tid].resume = True
        log.info("search %s resumed (%d trials go on)", row.id, len(requeued))
        return True

    def _sync(self, s: SearchState, now: float) -> None:
        if s.status != SearchStatus.RUNNING:
            return
        spec = s.spec
        if s.reached_at is not None and spec.budget.stop_on_target:
            self.finish(s, SearchStatus.COMPLETED, "target reached")
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
            self.fail(s, problem)
            return
        if now - s.started_at - s.idle_seconds >= spec.budget.max_seconds:
            self._budget_spent(s, "time budget spent")
            return
        self._fill(s, now)
        if s.created - s.forked >= spec.budget.max_trials and not s.alive() and not s.forks_open:
            self._budget_spent(s, "all trials done")

    def _budget_spent(self, s: SearchState, reason: str) -> None:
        """End `s`, whose budget is spent: completed, unless its trials show it never could succeed."""
        problem = s.health.verdict(s.spec.metric.name, s.spec.budget.max_consecutive_failures, trials=s.created)
        if problem is not None:
            self.fail(s, problem)
        else:
            self.finish(s, SearchStatus.COMPLETED, reason)

    def fail(self, s: SearchState, reason: str) -> None:
        """End search `s` as failed, `reason` stored as its error (its alive trials are stopped)."""
        self.finish(s, SearchStatus.FAILED, reason, error=reason)

    def quota_room(self, owner: str, devices_per_trial: int) -> tuple[int | None, str | None]:
        """How many more trials of `devices_per_trial` devices user `owner`'s quotas allow now (None: no
        quota), and the reason when a quota is what limits it."""
        limits = self._quotas.get(owner)
        if limits is None:
            return None, None
        max_trials, max_devices = limits
        alive = devices = 0
        for other in self.searches.values():
            if other.owner == owner:
                for t in other.alive():
                    if t.id not in self.held:
                        alive += 1
                        devices += t.devices_needed
        room: int | None = None
        reason = None
        if max_trials > 0:
            room = max(0, max_trials - alive)
            reason = f"quota: user {owner} has {alive} of at most {max_trials} alive trials"
        if max_devices > 0:
            by_devices = max(0, (max_devices - devices) // max(1, devices_per_trial))
            if room is None or by_devices < room:
                room = by_devices
                reason = (
                    f"quota: user {owner}'s alive trials hold {devices} of at most {max_devices} devices"
                    f" (a trial needs {devices_per_trial})"
                )
        return room, reason

    def alive_cap(self, spec: SearchSpec) -> int:
        """How many trials of a search with `spec` may be alive (held ones aside): its parallelism, and
        under a policy that runs trials to their next rung without time-slicing (`RunToRungKnobs`) no
        more than the cluster's devices can take plus its `lookahead`, so that each configuration is
        asked of the searcher just before a device takes it up."""
        knobs = spec.scheduler
        if isinstance(knobs, PbtKnobs):
            return knobs.population  # its parallelism: the population, a member replaced only when one ends
        if not isinstance(knobs, RunToRungKnobs) or knobs.lookahead is None:
            return spec.parallelism  # a time-slicing policy wants every trial of its parallelism alive
        slots = len(self._runtime.devices()) // max(1, spec.resources.devices_per_trial)
        return min(spec.parallelism, max(1, slots) + knobs.lookahead)

    def _fill(self, s: SearchState, now: float) -> int:
        """Ask `s`'s searcher for new trials up to its `alive_cap` (held trials do not count; at most
        `MAX_NEW_PER_TICK`) and its owner's quota. Returns how many were created."""
        spec = s.spec
        # Over the alive trials not held (held ones are most of a successive-halving search's alive).
        alive = self._index.alive
        active = sum(1 for tid in alive.keys() - self.held if alive[tid].search_id == s.id)
        want = min(self.alive_cap(spec) - active, spec.budget.max_trials - (s.created - s.forked), MAX_NEW_PER_TICK)
        room, _ = self.quota_room(s.owner, spec.resources.devices_per_trial) if want > 0 else (None, None)
        capped = room is not None and room < want
        if room is not None:
            want = min(want, room)
        if isinstance(s.searcher, SearcherHost):
            want = self._fill_hosted(s, s.searcher, max(0, want), now)
        else:
            for _ in range(max(0, want)):
                self._new_trial(s, now)
        # Why it makes no more trials, as things stand after these: stored when it changes.
        waiting = self.quota_room(s.owner, spec.resources.devices_per_trial)[1] if capped else None
        if waiting != s.waiting:
            s.waiting = waiting
            self._store.update_search(s.id, waiting=waiting)
        return max(0, want)

    def _fill_hosted(self, s: SearchState, host: SearcherHost, want: int, now: float) -> int:
        """Up to `want` new trials of `s` from its hosted searcher: the suggestions it has finished, then
        asks for what is still wanted, waited for at most `searcher_wait_s` (what comes later is taken at
        a later tick; the host wakes the controller when it does). Returns how many were created."""
        assert self._searcher_wait_s is not None
        created = self._take_ready(s, host, want, now)
        missing = want - created - host.outstanding()
        for _ in range(max(0, missing)):
            host.request(host.next_number(s.created))
        if created < want and self._searcher_wait_s > 0:
            host.wait(self._searcher_wait_s)
            created += self._take_ready(s, host, want - created, now)
        failure = host.failure()
        if failure is not None and s.status == SearchStatus.RUNNING:
            self._searcher_failed(s, failure)
        return created

    def _take_ready(self, s: SearchState, host: SearcherHost, limit: int, now: float) -> int:
        taken = 0
        for number, suggestion in host.ready(limit):
            assert number == s.created, f"search {s.id}: suggestion {number} for trial {s.created}"
            self._new_trial(s, now, suggestion)
            taken += 1
        return taken

    def _searcher_failed(self, s: SearchState, exc: BaseException) -> None:
        """Search `s`'s searcher could not be built or asked: the search fails alone, with the reason."""
        log.warning("search %s: its searcher failed: %s", s.id, exc)
        reason = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        self.finish(s, SearchStatus.FAILED, f"its searcher failed: {reason}", error=f"searcher: {reason}")

    def fill(self, now: float) -> int:
        """New trials for every running search whose parallelism has room (after a plan held some at a
        rung); how many were created."""
        return sum(self._fill(s, now) for s in list(self.searches.values()) if s.status == SearchStatus.RUNNING)

    def finish(self, s: SearchState, status: SearchStatus, reason: str, *, error: str | None = None) -> None:
        """End search `s` with `status`: its alive trials are stopped (`TrialStatus.STOPPED`, with `reason`:
        nothing judged them). `error` (a failed search's) is stored in the same write as the status, so
        that no reader sees a failed search without its reason."""
        now = self._runtime.now()
        s.status = status
        self._stop_trials(s.alive(), reason, checkpoint=True)
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
