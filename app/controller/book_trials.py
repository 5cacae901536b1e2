"""`TrialMaker`: the trials `SearchBook` creates: a search's new ones from its searcher, a fork's number,
a trace job.

Contract:
- `fill(now)` / `fill_search(s, now)`: each running search's searcher is asked for new trials up to its
  `alive_cap` (trials the last plan `held` at a rung do not count; at most `MAX_NEW_PER_TICK` per search
  and tick, and never beyond `max_trials`); each new trial is stored, tracked by the book and makes the
  tick plan again at once (`Signals.replan`).
- `alive_cap(spec)`: a search's parallelism (a population-based search's: its population); under a
  run-to-rung policy no more than the cluster's devices + `lookahead`, so that each configuration is
  asked of the searcher just before a device takes it up.
- Quotas (per user, `max_alive_trials` and `max_devices`; 0 = none; `read_quotas` reads them from the
  store at each sync): a user's alive trials (held ones aside, as for parallelism) never exceed
  `max_alive_trials`, and the devices they need together never exceed `max_devices` (so they can never
  occupy more at once). `quota_room` says how many more trials the quotas allow, and why when a quota is
  what limits it. A running search whose owner has no room makes no new trials and says why in its
  `waiting` column (stored when that changes) until room frees up.
- A hosted searcher (`SearcherHost`, the book's `searcher_wait_s` a number): the suggestions it has
  finished are taken first, what is still wanted is asked on its thread and waited for at most
  `searcher_wait_s` (the rest is taken at a later tick: a slow searcher delays its own search's trials,
  never the other searches'). A searcher that cannot be built or asked fails its search alone, with the
  reason.
- `fork_number(s)`: the next number of search `s` for a fork (counted as forked, so not against
  `max_trials`), once the searcher has no ask outstanding and has asked every point the user gave.
- `add_job`: a trial of no search (a trace job), numbered after every job the store holds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from quanta.controller.searcher_host import SearcherHost
from quanta.controller.state import SearchState, Signals, TrialState
from quanta.controller.trials import TrialIndex
from quanta.db.protocol import ControllerStore
from quanta.executor.policy.knobs import PbtKnobs, RunToRungKnobs
from quanta.executor.runtime.base import Runtime
from quanta.search.searcher import Suggestion
from quanta.spec import SearchSpec
from quanta.status import SearchStatus

if TYPE_CHECKING:  # the book holds its maker: an annotation only
    from quanta.controller.book import SearchBook

log = logging.getLogger("quanta.controller")

# Trials one search may create in one tick: a huge parallelism fills over several ticks instead of
# holding the controller (and the database) for one long burst.
MAX_NEW_PER_TICK = 64


class TrialMaker:
    """New trials for the searches (and jobs) of `book`, which it tracks and ends through the book."""

    def __init__(
        self,
        book: SearchBook,
        store: ControllerStore,
        runtime: Runtime,
        index: TrialIndex,
        signals: Signals,
        searcher_wait_s: float | None,
    ):
        self._book = book
        self._store = store
        self._runtime = runtime
        self._index = index
        self._signals = signals
        self._searcher_wait_s = searcher_wait_s
        # user name -> (max alive trials, max devices) of the users with a quota, as of the last sync
        self._quotas: dict[str, tuple[int, int]] = {}
        self._next_job: int | None = None  # the next trace job's number (None: not read from the store yet)

    # ---- quotas and caps -----------------------------------------------------------------------

    def read_quotas(self) -> None:
        """Read the users' quotas from the store (every sync: an admin's change holds from the next tick)."""
        self._quotas = {
            u.name: (u.max_alive_trials, u.max_devices)
            for u in self._store.users()
            if u.max_alive_trials > 0 or u.max_devices > 0
        }

    def quota_room(self, owner: str, devices_per_trial: int) -> tuple[int | None, str | None]:
        """How many more trials of `devices_per_trial` devices user `owner`'s quotas allow now (None: no
        quota), and the reason when a quota is what limits it."""
        limits = self._quotas.get(owner)
        if limits is None:
            return None, None
        max_trials, max_devices = limits
        held = self._book.held
        alive = devices = 0
        for other in self._book.searches.values():
            if other.owner == owner:
                for t in other.alive():
                    if t.id not in held:
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

    # ---- a search's new trials -----------------------------------------------------------------

    def fill(self, now: float) -> int:
        """New trials for every running search whose parallelism has room (after a plan held some at a
        rung); how many were created."""
        searches = list(self._book.searches.values())
        return sum(self.fill_search(s, now) for s in searches if s.status == SearchStatus.RUNNING)

    def fill_search(self, s: SearchState, now: float) -> int:
        """Ask `s`'s searcher for new trials up to its `alive_cap` (held trials do not count; at most
        `MAX_NEW_PER_TICK`) and its owner's quota. Returns how many were created."""
        spec = s.spec
        # Over the alive trials not held (held ones are most of a successive-halving search's alive).
        alive = self._index.alive
        active = sum(1 for tid in alive.keys() - self._book.held if alive[tid].search_id == s.id)
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
        self._book.finish(s, SearchStatus.FAILED, f"its searcher failed: {reason}", error=f"searcher: {reason}")

    def _new_trial(self, s: SearchState, now: float, suggestion: Suggestion | None = None) -> TrialState:
        """Trial number `s.created` of search `s`, with `suggestion` (asked of the searcher now if None)."""
        number = s.created
        if suggestion is None:
            suggestion = s.searcher.ask(number)
        row = self._store.add_trial(s.id, number, suggestion.params, suggestion.vals, now)
        assert row.id is not None
        s.created = number + 1
        ts = TrialState(row.id, s.id, number, suggestion.params, suggestion.vals, now)
        self._book.track(s, ts)
        self._signals.replan = True  # a new trial is placed now, not a quantum later
        return ts

    # ---- forks and jobs ------------------------------------------------------------------------

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
        self._book.track(None, ts)
        ts.devices_needed, ts.max_steps = devices_needed, steps
        self._signals.wake = True
        return row.id
