"""`Controller`: one tick = sync searches -> snapshot (judged, for a policy that asks) -> policy.plan ->
reconcile -> record intent -> runtime.apply; between ticks it turns runtime events into stored facts.

The tick is a thin loop over named parts, each in its own module:
    SearchBook      (book.py)      search lifecycle and searchers; creates (book_trials.py) and finalises
                                   trials; the store's commands and budgets (book_sync.py)
    Forks           (forks.py)     trials started from another's state, config changes, their lineage
    Exploits        (exploits.py)  a population's exploits (through Forks): staged, adopted in place or
                                   through a restart, committed by a rename
    EventRecorder   (recorder.py)  runtime events -> trial state and stored rows
    ReportTracking  (tracking.py)  stored reports -> the spec's trackers (TensorBoard, MLflow, W&B)
    SnapshotBuilder (snapshot.py)  the frozen ClusterSnapshot a policy plans on (view cache, pair rates,
                                   the judge's verdicts)
    PolicyChoice    (policies.py)  which policy and quantum govern, the policy's and the judge's carried state
    Rounds          (rounds.py)    numbered rounds of actions, recorded as intent before they are applied
    TrialLauncher   (launcher.py)  the Launcher bound to the runtime (what a trial's process needs)
    cluster_view    (publish.py)   what runs where, for the API and the dashboard

It holds a working copy of the active searches in memory (a cache: `load()` rebuilds it from the store
after a restart) and writes every fact through to the store. It knows nothing about which runtime it
drives (local processes, Celery nodes or the simulator's virtual clock). Not thread-safe: call it from
one thread.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from quanta.controller.book import SearchBook
from quanta.controller.forks import Forks
from quanta.controller.launcher import TrialLauncher
from quanta.controller.options import ControllerOptions
from quanta.controller.packed import PackedRates
from quanta.controller.policies import PolicyChoice
from quanta.controller.publish import cluster_view
from quanta.controller.recorder import EventRecorder
from quanta.controller.rounds import Rounds
from quanta.controller.snapshot import KnownResidency, SnapshotBuilder
from quanta.controller.state import SearchState, Signals, TrialState
from quanta.controller.tracking import ReportTracking
from quanta.controller.trials import TrialIndex
from quanta.db.protocol import ControllerStore
from quanta.executor.actions import Action, Event, Exited, Migrate, Run, Stop
from quanta.executor.policy.types import ClusterSnapshot, Placement, Plan, Policy
from quanta.executor.reconcile import reconcile
from quanta.executor.runtime.base import Runtime
from quanta.spec import SearchSpec
from quanta.status import SEARCH_STARTED, SearchStatus, TrialStatus

# The longest the controller holds rows between ticks before it stores them, on a runtime that lets it
# (`Runtime.acks_by_polling` False); readers see reports this much later at most.
FLUSH_EVERY_S = 0.1


class Controller:
    """Drives one runtime for all active searches (and trace jobs). `options.policy`/`quantum_s` fix the
    cluster's policy (the simulator sets them); otherwise the oldest running search's spec chooses it.
    Binds its launcher to `runtime` on construction."""

    def __init__(self, store: ControllerStore, runtime: Runtime, options: ControllerOptions | None = None):
        self.store = store
        self.runtime = runtime
        self.options = options = options or ControllerOptions()
        self._signals = Signals()
        self._index = TrialIndex()
        self._rounds = Rounds(store)
        pairs = PackedRates()
        self.book = SearchBook(
            store, runtime, self._index, self._rounds, self._signals, searcher_wait_s=options.searcher_wait_s
        )
        self.forks = Forks(store, runtime, self.book, self._index, self._rounds, self._signals, options.workdir)
        self.tracking = ReportTracking(self.book, self._index)
        self.recorder = EventRecorder(
            store,
            runtime,
            self.book,
            self._index,
            pairs,
            self._signals,
            on_stored=self.tracking.stored,
            forks=self.forks,
        )
        self.snapshots = SnapshotBuilder(
            runtime, self.book, self._index, pairs, cache_views=options.cache_views, kind_aware=options.kind_aware
        )
        self.book.drain = self._drain
        self.policies = PolicyChoice(store, options.policy, options.quantum_s, self.book.searches, options.share)
        self.launcher = TrialLauncher(self.book, self._index, options.workdir, self.forks)
        self.last_plan: Plan | None = None
        self._last_tick: float | None = None
        self._last_plan_at: float | None = None
        self._published_at = -math.inf
        self._store_read_at = -math.inf  # when the tick last read users' requests (`read_store_every_s`)
        self._user_weights: dict[str, float] = {}
        self._user_weights_due = True  # read them at the next snapshot (an idle tick builds none)
        self._progress_written: dict[int, tuple[int, float]] = {}  # what _publish last wrote of resident trials
        runtime.bind(self.launcher)

    # ---- what the service, the CLI and the simulator ask -----------------------------------------

    def submit(self, spec: SearchSpec) -> int:
        """Persist a validated spec as a new search and start it. Returns the search id."""
        return self.book.submit(spec)

    def load(self) -> None:
        """Rebuild the working set from the store after a restart (see `SearchBook.load`), and the fork
        requests still open (`Forks.load`)."""
        self.book.load()
        self.forks.load()

    def fork(self, trial_id: int, values: Mapping[str, Any] | None = None, steps: int | None = None) -> int:
        """Start a new trial of trial `trial_id`'s search from its state (at its next boundary, or its last
        checkpoint) with new `values` for mutable parameters and `steps` mini-batches beyond the fork (see
        `Forks`). Returns the request's id (`ForkRow`): carried out from the next tick on."""
        return self.forks.request(trial_id, values or {}, steps)

    def reconfigure(self, trial_id: int, values: Mapping[str, Any]) -> None:
        """New values of alive trial `trial_id`'s mutable parameters, taken at its next boundary (see
        `Forks.reconfigure`)."""
        self.forks.reconfigure(trial_id, values)

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
        counts against in the share layer; `kind_rates` its solo rate per device kind when known
        beforehand (the simulator's throughput table; 0: it cannot run on that kind)."""
        return self.book.maker.add_job(
            kind, steps, devices_needed, trainable=trainable, config=config, owner=owner, kind_rates=kind_rates
        )

    def stop_search(
        self, search_id: int, status: SearchStatus = SearchStatus.STOPPED, reason: str = "search stopped"
    ) -> None:
        s = self.book.search(search_id)
        if s is not None and s.status in SEARCH_STARTED:  # one that has ended stays as it ended
            self.book.finish(s, status, reason)

    def forget_search(self, search_id: int) -> None:
        """Drop a deleted search and its trials from memory (after its rows were deleted)."""
        self.book.forget(search_id)

    def search(self, search_id: int) -> SearchState | None:
        return self.book.search(search_id)

    def searches(self) -> list[SearchState]:
        """The searches held in memory: active ones, and those ended since (until deleted)."""
        return list(self.book.searches.values())

    def trial(self, trial_id: int) -> TrialState:
        """A trial held in memory (KeyError if none)."""
        return self._index.by_id[trial_id]

    def trials_of(self, search_id: int) -> list[TrialState]:
        return [t for t in self._index.by_id.values() if t.search_id == search_id]

    def alive(self) -> list[TrialState]:
        """Trials not final (queued or resident), in arrival order."""
        return list(self._index.alive.values())

    def has_alive(self) -> bool:
        return bool(self._index.alive)

    def idle(self) -> bool:
        """Nothing to wait for: no trial alive and no search running. `step` then returns at once after
        its tick; a loop around it should rest until its next tick rather than step again at once."""
        return not self._index.alive and self.book.governing() is None

    @property
    def round_no(self) -> int:
        """The last round of actions recorded."""
        return self._rounds.round_no

    def handle(self, events: list[Event]) -> None:
        """Turn runtime events into trial state and rows (see `EventRecorder`). When that fails (the
        database is away), the runtime is told to deliver the batch again (`Runtime.redeliver`): the
        next poll must not acknowledge events whose rows are not stored."""
        try:
            self.recorder.handle(events)
        except Exception:
            self.runtime.redeliver()
            raise
        self.tracking.handled(events)

    def _drain(self) -> None:
        """Handle the events the runtime holds now, without waiting."""
        self.handle(self.runtime.poll(0))

    def flush(self) -> None:
        """Store the buffered rows (retried; on failure they stay buffered and the runtime redelivers)."""
        try:
            self.recorder.flush()
        except Exception:
            self.runtime.redeliver()
            raise

    def snapshot(self, now: float) -> ClusterSnapshot:
        """The frozen view the policy plans on (see `SnapshotBuilder`)."""
        policy = self.policies.last
        if self._user_weights_due or not self.options.read_store_every_s:  # 0: read for every snapshot
            self._user_weights, self._user_weights_due = self.store.user_weights(), False
        return self.snapshots.build(
            now,
            policy_state=self.policies.state,
            quantum_s=self._quantum(),
            round_no=self._rounds.round_no,
            judge_knobs=policy.judge_knobs if policy is not None else None,
            judge_state=self.policies.judge_state,
            user_weights=self._user_weights,
        )

    def close(self) -> None:
        try:
            self.flush()
            self.runtime.close()
        finally:
            self.tracking.close()  # what the trackers have queued is written

    # ---- the tick ------------------------------------------------------------------------------

    def tick(self) -> Plan | None:
        """One round: sync searches -> (if planning is due) snapshot -> plan -> reconcile -> publish ->
        record intent -> apply. Returns the plan in force (None when nothing is to be planned)."""
        now = self.runtime.now()
        began, freed_at = time.perf_counter(), self._signals.freed_at
        self._last_tick = now
        woken = self._signals.wake  # something changed since the last tick (a trial ended, a command, ...)
        self._signals.wake, self._signals.freed_at = False, None
        was_idle = not self._index.alive
        read = was_idle or now - self._store_read_at >= self.options.read_store_every_s
        if read:
            self._store_read_at, self._user_weights_due = now, True
        # Before the book's: a search with a fork to carry out does not end meanwhile.
        self.forks.sync(now, read_requests=read)
        self.book.sync(now, read_store=read)
        if was_idle and self._index.alive:
            # An idle controller does not poll its runtime, so what it knows of the nodes may be old (a
            # node restarted meanwhile still reads as its earlier self, alive). Read it before this round
            # places anything: a plan on the old view sends work to the new process, which the loss the
            # next poll then sees takes away again.
            self._drain()
        # No running search (e.g. the only one is paused): keep planning with the last policy so resident
        # trials of paused searches are parked.
        policy = self.policies.current(self.book.governing())
        if policy is None:
            policy = self.policies.last
        if policy is None or (not self._index.alive and not self.runtime.residency()):
            return None
        if not self._plan_due(now, policy, woken):
            return self.last_plan
        self._last_plan_at, self._signals.replan = now, False
        self.policies.last = policy
        snapshot = self.snapshot(now)
        plan = policy.plan(snapshot)
        self.policies.remember(policy, plan, self.snapshots.judge_state)
        newly_held = frozenset(plan.hold) - self.book.held
        self.book.held = frozenset(plan.hold)
        if newly_held and self.book.maker.fill(now):
            # Trials held at a rung just left their search's parallelism and new trials took their place:
            # plan again now, so that a device the holds freed goes to a new configuration this round.
            snapshot = self.snapshot(now)
            plan = policy.plan(snapshot)
            self.policies.remember(policy, plan, self.snapshots.judge_state)
            self.book.held = frozenset(plan.hold)
        used = {d for d, ids in plan.placement.items() if ids}
        self.forks.exploits.free_devices = frozenset(d.id for d in snapshot.devices if d.id not in used)
        if plan.publish:  # written at this boundary: sent before the round's runs, and before this round's
            self.forks.exploits.publish(plan.publish, now)  # exploits, which then wait for it
        for target, (source, values) in plan.exploits.items():
            self.forks.exploit(target, source, values)
        if plan.exploits:  # their sources are asked for their state now, not at the next event or quantum
            self.forks.exploits.sync(now)
        actions = self._actions(plan, now)
        self.last_plan = plan
        published_round = self._rounds.round_no  # the view is of the rounds before this plan's own
        if actions:
            round_no = self._rounds.record(now, actions, self.policies.take_unsaved())
            runs = [a.trial_id for a in actions if isinstance(a, Run)]
            self.book.mark_running(runs, now)
            if runs:  # the round's own latency: from the freed device (or the due tick) to its commands
                self.recorder.reaction(runs[0], time.perf_counter() - (began if freed_at is None else freed_at))
            self.runtime.apply(round_no, actions)
        self.policies.save()  # a plan with no actions: its state on its own
        # After the commands, not before: its writes (a few ms a round) would hold every freed device idle.
        self._publish(snapshot, plan, now, published_round)
        return plan

    def _plan_due(self, now: float, policy: Policy, woken: bool) -> bool:
        """Ticks may come more often than quanta (the service ticks to pick up commands promptly): plan
        again only when a quantum has passed or something changed, so quanta keep their length."""
        if woken or self._signals.wake or self._signals.replan or policy is not self.policies.last:
            return True
        if self._quiet_until() > now + 1e-6:
            return False  # the last plan holds until then (`Plan.quiet_until`)
        return self._last_plan_at is None or now - self._last_plan_at >= self._quantum() - 1e-3

    def _quiet_until(self) -> float:
        """Until when the last plan holds without an event: its `quiet_until` when the options trust it,
        else -inf."""
        plan = self.last_plan
        if not self.options.trust_quiet or plan is None or plan.quiet_until is None:
            return -math.inf
        return plan.quiet_until

    def _actions(self, plan: Plan, now: float) -> list[Action]:
        """The actions that take the cluster from where the snapshot saw it to `plan`, for trials we know.
        Trials the plan stops become final now (resident ones are stopped by the runtime)."""
        trial = self._index.get
        residency = KnownResidency(self.snapshots.residency_seen, trial)
        current = Placement(
            resident=residency, running=frozenset(t for t in self.snapshots.running_seen if trial(t) is not None)
        )
        for tid in plan.stop:
            ts = trial(tid)
            if ts is not None and tid not in residency:
                self.book.finalize(ts, TrialStatus.KILLED, now, reason=plan.reasons.get(tid, "stopped by policy"))
        actions = []
        exploiting = self.forks.exploiting()  # they wait for their new state (`Forks.exploit`)
        for a in reconcile(current, plan):
            ts = trial(a.trial_id)
            if ts is None or (a.trial_id in exploiting and isinstance(a, Run | Migrate)):
                continue
            if isinstance(a, Run) and ts.status == TrialStatus.RUNNING and a.trial_id not in residency:
                # Started before, and no longer resident: its process has ended and its exit is still on
                # its way. Starting it again would run a finished trial twice; the exit decides (a crash
                # re-queues it, and a queued trial is started by the next plan).
                continue
            actions.append(a)
        for a in actions:
            if isinstance(a, Stop):
                ts = trial(a.trial_id)
                if ts is not None and not ts.status.final:
                    why = plan.reasons.get(a.trial_id, "stopped by policy")
                    self.book.finalize(ts, TrialStatus.KILLED, now, reason=why)
        return actions

    def _publish(self, snapshot: ClusterSnapshot, plan: Plan, now: float, round_no: int) -> None:
        """Store what runs where, resident trials' steps and device time (so readers see them before the
        trial ends) and how each active search's trials stand, at most every `options.publish_every_s`."""
        if now - self._published_at < self.options.publish_every_s:
            return
        self._published_at = now
        self.store.publish_cluster_view(cluster_view(snapshot, plan, round_no))
        # Only what moved since it was last written: a parked trial stays resident, unchanged, for long.
        progress = {t.id: (t.steps_done, t.device_seconds) for t in snapshot.trials if t.devices}
        moved = [(tid, *now_at) for tid, now_at in progress.items() if self._progress_written.get(tid) != now_at]
        self.store.update_progress(moved)
        self._progress_written = progress
        computing = plan.running()
        for s in self.book.searches.values():
            if s.status.active:
                self.book.store_counts(s, computing)

    def _quantum(self) -> float:
        return self.policies.quantum(self.book.governing())

    # ---- driving the tick ----------------------------------------------------------------------

    def step(self, max_wait: float | None = None) -> None:
        """One tick, then handle events until the next tick is due (a quantum later, or sooner when
        a trial ends and frees a device)."""
        self.tick()
        last = self._last_tick or self.runtime.now()
        quantum = self._quantum()
        # A quiet plan (trusted) lets the controller wait for an event instead of the next quantum; a
        # finite promise ends on the tick grid (whole quanta), where the controller would have planned.
        quiet = self._quiet_until() - last
        if quiet <= quantum:
            span = quantum
        elif math.isinf(quiet) or math.isinf(quantum):
            span = math.inf
        else:
            span = math.ceil(quiet / quantum - 1e-9) * quantum
        due = last + (span if max_wait is None else min(span, max_wait))
        # Whatever woke us during the tick (new trials, stops) was planned in it already.
        self._signals.wake = False
        while not self._signals.wake and not self.idle():
            timeout = due - self.runtime.now()
            if timeout <= 0:
                break
            self._handle_between_ticks(self.runtime.poll(min(timeout, self.options.poll_cap_s, self._flush_due())))
        self.flush()

    def _flush_due(self) -> float:
        """Seconds until the rows buffered between ticks are due to be stored (inf: none are buffered)."""
        held = self.recorder.buffered_for()
        return math.inf if held is None else max(0.0, FLUSH_EVERY_S - held)

    def _handle_between_ticks(self, events: list[Event]) -> None:
        """As `handle`, but on a runtime whose events live in this process the rows are stored at most
        every `FLUSH_EVERY_S` and at the end of the step, not once per batch: with steps of a millisecond
        a batch comes every few, and a transaction each was most of the controller's CPU."""
        if self.runtime.acks_by_polling:
            self.handle(events)  # the next poll acknowledges this batch: it must be stored first
            return
        self.recorder.handle(events, flush=False)
        # A trial's end goes to the trackers after its last reports (`ReportTracking`): store them now.
        if self._flush_due() <= 0.0 or any(isinstance(e, Exited) for e in events):
            self.flush()
        self.tracking.handled(events)

    def run(self, search_id: int, on_progress: Callable[[SearchState], None] | None = None) -> SearchState:
        """Tick until the search ends; returns its final state."""
        s = self.book.searches[search_id]
        while s.status == SearchStatus.RUNNING:
            self.step()
            if on_progress:
                on_progress(s)
        self.settle()
        return s

    def settle(self, timeout_s: float = 10.0) -> None:
        """After a search ended: handle events until none of our trials is resident any more (stopping
        trials report their end, so their rows are final), for at most `timeout_s`; then store them."""
        deadline = self.runtime.now() + timeout_s
        while self.runtime.now() < deadline:
            resident = any(tid in self._index.by_id for tid in self.runtime.residency())
            # A trial that left the runtime may still have its end queued (with its device time): drain it.
            events = self.runtime.poll(0.2 if resident else 0.0)
            self.handle(events)
            if not resident and not events:
                break
        self.flush()
