"""`NodeAgent`: one machine's side of distributed mode. It hosts that node's `LocalRuntime` (resident trial
processes forked from a pre-warmed template, in-memory park, profiling), carries out the actions the
controller sends (through Celery tasks, see `workers/tasks.py`), and writes what happens to the
database through a `NodeLedger`:

- every `flush_s` when something happened, and at least every `heartbeat_s`: one transaction with the
  heartbeat, the resident trials (with their assignment epoch and last applied round) and the new
  events, numbered per node;
- before applying an action it claims (trial, round) in the database, so a task delivered twice (late
  acknowledgement after a worker crash, or a producer retry) is applied once;
- fencing: a trial's process runs here only while the database assigns the trial to this node with the
  epoch the process started under. A Run whose epoch is not the current one is ignored; a resident
  process whose trial was reassigned (this node was presumed dead and came back) is stopped; and when
  the node cannot write its heartbeat for `lease_s` (shorter than the controller's dead-after time) it
  stops its trials itself, before the controller restarts them elsewhere;
- cross-node migration (`handoff`): park the trial, write its checkpoint to the shared store, end the
  process; the controller's link task then starts it on the target node from that checkpoint;
- distrust: with an `allowlist` (what `quanta worker` passes, from QUANTA_TRAINABLE_ALLOWLIST) it
  imports no warm-up module and starts no trial whose module is outside it (the trial is reported
  failed with the reason); it stops, suspends or releases only trials it runs, under the epoch the
  order names (an order for another node's trial, or one redelivered after the trial was reassigned,
  is refused).

Device ids: the controller's `n1/cpu:0` is this node's `cpu:0`.

The agent decides which orders run and writes the journal; it composes `node_admission.py` (the
allowlist gate), `trial_exits.py` (the processes' exits, and why the node itself ended any) and
`node_residency.py` (the resident trials written with each heartbeat).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from quanta.allowlist import Allowlist
from quanta.devices import Device
from quanta.executor.actions import (
    HANDOFF,
    Action,
    Event,
    Exited,
    Fork,
    Forked,
    Handoff,
    Migrate,
    Order,
    Profiled,
    Reconfigure,
    Release,
    Resumed,
    Run,
    Started,
    Stop,
    Suspend,
    TrialLaunch,
    event_kind,
)
from quanta.executor.runtime.base import LaunchFn
from quanta.executor.runtime.cluster import NodeLedger, global_device, split_device
from quanta.executor.runtime.local import LocalRuntime
from quanta.executor.runtime.node_admission import Admission
from quanta.executor.runtime.node_residency import ResidencyPublisher
from quanta.executor.runtime.trial_exits import TrialExits
from quanta.executor.wire import EventRecord, NodeDevice

log = logging.getLogger("quanta.node")
# How long a fence waits for an order being applied before it checks without the apply lock.
FENCE_LOCK_S = 1.0


class NodeAgent:
    def __init__(
        self,
        name: str,
        devices: Sequence[Device],
        ledger: NodeLedger,
        *,
        heartbeat_s: float = 1.0,
        flush_s: float = 0.1,
        lease_s: float = 5.0,
        warm_modules: Sequence[str] = (),
        park_timeout_s: float = 60.0,
        handoff_timeout_s: float = 60.0,
        allowlist: Allowlist | None = None,
    ):
        if not name or "/" in name or any(c.isspace() for c in name):
            raise ValueError(f"node name '{name}': must be non-empty, without '/' or spaces")
        self.name = name
        self.incarnation = uuid.uuid4().hex[:12]
        self.ledger = ledger
        self.heartbeat_s = heartbeat_s
        self.flush_s = flush_s
        self.lease_s = lease_s
        self.handoff_timeout_s = handoff_timeout_s
        self._devices = list(devices)
        self._apply_lock = threading.Lock()
        self._epochs: dict[int, int] = {}  # epoch each resident process started under
        self._rounds: dict[int, int] = {}  # last round applied per trial
        self._exits = TrialExits()
        self._residency = ResidencyPublisher(name, self._exits)
        self._pending: list[EventRecord] = []
        self._internal = itertools.count(-1, -1)  # rounds of the agent's own actions (never the controller's)
        self._stop = threading.Event()
        self._lease_lost = False
        self._beat_error_logged = 0.0
        self.allowlist = allowlist  # None: no check (tests); `quanta worker` always gives one
        self._admission = Admission(name, ledger, allowlist)
        self._own_events: queue.SimpleQueue[Event] = queue.SimpleQueue()  # made here, not by a process
        self.runtime = LocalRuntime(
            self._devices,
            LaunchFn(self._launch),
            node=name,
            warm_modules=self._admission.modules(warm_modules),
            park_timeout_s=park_timeout_s,
        )
        # Join the cluster only once trials can start here (the template has imported torch).
        self.runtime.wait_ready()
        self._seq = ledger.register(name, self.incarnation, self.devices())
        self._last_ok = time.monotonic()
        self._last_beat = 0.0
        self._last_fence_check = 0.0
        self._thread = threading.Thread(target=self._pump, name="quanta-node-pump", daemon=True)
        self._thread.start()

    # ---- what the tasks call -----------------------------------------------------------------

    def devices(self) -> list[NodeDevice]:
        """This node's devices under their cluster ids."""
        return [NodeDevice(global_device(self.name, d.id), d.placement_kind, d.memory_mb) for d in self._devices]

    def warm(self, modules: Sequence[str]) -> None:
        self.runtime.warm(self._admission.modules(modules))

    def checkpoint(self, trial_id: int) -> None:
        self.runtime.checkpoint(trial_id)

    def apply(self, round_no: int, orders: Sequence[Order]) -> dict[str, Any]:
        """Carry out one round's orders for this node, in reconcile's order: stops and suspensions
        (waiting until suspended trials have parked), hand-offs to other nodes, then runs and
        in-node migrations. Each (trial, round) is applied at most once, however often it is delivered.
        Returns what was done (for logs and tests)."""
        done: dict[str, Any] = {"applied": [], "duplicate": [], "stale": [], "refused": []}
        with self._apply_lock:
            todo = []
            for o in orders:
                if self.ledger.claim(self.name, o.trial_id, round_no):
                    todo.append(o)
                else:
                    done["duplicate"].append(o.trial_id)
            if not todo:
                return done
            first: list[Action] = []
            for o in todo:
                if not isinstance(o.action, Stop | Suspend | Release | Fork | Reconfigure):
                    continue
                if self._runs_here(o, done):
                    first.append(o.action)
                elif isinstance(o.action, Fork):
                    # Answered all the same (`gone`: no process of its current assignment here gives its
                    # state), so the controller never waits for an answer that cannot come.
                    why = f"trial {o.trial_id} has no process of its current assignment on node {self.name}"
                    self._own_events.put(Forked(o.trial_id, o.action.into, 0, time.time(), why, gone=True))
            handoffs = [o.action for o in todo if isinstance(o.action, Handoff)]
            runs = [o for o in todo if isinstance(o.action, Run | Migrate)]
            self.runtime.apply(round_no, first)
            for a in first:
                self._rounds[a.trial_id] = round_no
                done["applied"].append(a.trial_id)
            for h in handoffs:
                self._handoff(h, round_no)
                done["applied"].append(h.trial_id)
            if runs:
                self._runs(round_no, runs, done)
        return done

    def close(self, checkpoint_wait_s: float = 10.0) -> None:
        """Clean shutdown: checkpoint running trials (bounded), write the last events, leave the cluster
        (the controller restarts this node's trials elsewhere) and stop the trial processes."""
        if self._stop.is_set():
            return
        try:
            running = [tid for tid, r in self.runtime.residency().items() if r.running]
            if running and checkpoint_wait_s > 0:
                with self._apply_lock:
                    self.runtime.apply(next(self._internal), [Suspend(t, checkpoint=True) for t in running])
                time.sleep(min(1.0, checkpoint_wait_s))  # let the checkpoints land
        except Exception:
            log.exception("checkpointing before leaving failed")
        self._stop.set()
        self._thread.join(5)
        with contextlib.suppress(Exception):
            self._flush(force=True)
        with contextlib.suppress(Exception):
            self.ledger.leave(self.name, self.incarnation)
        self.runtime.close()

    # ---- actions -------------------------------------------------------------------------------

    def _runs_here(self, o: Order, done: dict[str, Any]) -> bool:
        """A stop, suspension or release is carried out only for a trial this node runs, and only under
        the epoch its process started with when the order names one (a stop redelivered after the trial
        moved on must not end its new process)."""
        tid = o.trial_id
        running = self._epochs.get(tid)
        if tid not in self.runtime.residency():
            why = "it does not run on this node"
        elif o.epoch is not None and running is not None and o.epoch < running:
            # Delivered late (the trial was assigned again since): stale, not hostile.
            log.warning(
                "trial %s: ignoring %s (epoch %s): its process runs under epoch %s",
                *(tid, o.action.kind, o.epoch, running),
            )
            done["stale"].append(tid)
            return False
        elif o.epoch is not None and o.epoch != (running or 0):
            why = f"its process runs under epoch {running or 0}, not {o.epoch}"
        else:
            return True
        log.warning("trial %s: refusing %s: %s", tid, o.action.kind, why)
        done["refused"].append(tid)
        return False

    def _local(self, devices: Sequence[str]) -> tuple[str, ...]:
        out = []
        for g in devices:
            node, local = split_device(g)
            if node != self.name:
                raise ValueError(f"device {g} is not on node {self.name}")
            out.append(local)
        return tuple(sorted(out))

    def _runs(self, round_no: int, runs: list[Order], done: dict[str, Any]) -> None:
        tids = [o.trial_id for o in runs]
        assigned = self.ledger.assignments_of(tids)
        resident = self.runtime.residency()
        go = []
        for o in runs:
            tid, epoch = o.trial_id, o.epoch or 0
            a = assigned.get(tid)
            if a is None or a.node != self.name or a.epoch != epoch:
                log.warning(
                    "trial %s: ignoring %s of round %s (epoch %s): the trial is assigned to %s",
                    tid,
                    o.action.kind,
                    round_no,
                    epoch,
                    f"{a.node} epoch {a.epoch}" if a else "no node",
                )
                done["stale"].append(tid)
                continue
            starts = tid not in resident  # a new process (a parked resident one is resumed instead)
            if tid in resident and self._epochs.get(tid) != epoch:
                # A process of an earlier assignment (this node was presumed dead, the trial ran
                # elsewhere meanwhile): its state is stale. End it, then start afresh from the checkpoint.
                self._end(tid, "stale", wait_s=self.handoff_timeout_s)
                starts = True
            self._epochs[tid] = epoch
            self._exits.forget(tid)
            action = o.action
            assert isinstance(action, Run | Migrate)
            try:
                local = self._local(action.devices)
            except ValueError as exc:
                log.error("trial %s: %s", tid, exc)
                continue
            if starts and self.allowlist is not None and not self._admit(tid, epoch, done):
                continue
            go.append(type(action)(tid, local, action.until))
            done["applied"].append(tid)
        self.runtime.apply(round_no, go)
        for started in go:
            self._rounds[started.trial_id] = round_no

    def _handoff(self, h: Handoff, round_no: int) -> None:
        """Checkpoint the trial to the shared store and end its process here (a cross-node move). The
        trial writes its checkpoint before it reads the stop (one connection, in order), and the task
        returns only once the process has exited: the target then restores a complete checkpoint.

        A trial that ended here meanwhile is not restarted on the target when it ended for good (completed,
        or failed in its own code): its start there, the task linked to this one, is claimed here for the
        target (same trial and round), so the target takes it for a duplicate and skips it. Otherwise (it
        crashed) the target restarts it from its last checkpoint."""
        tid = h.trial_id
        r = self.runtime.residency().get(tid)
        if r is None:
            status = self._exits.status(tid, wait_s=max(1.0, 10 * self.flush_s))
            if status in ("completed", "failed") and self.ledger.claim(h.to, tid, round_no):
                log.info("trial %s %s here before its hand-off to %s: not started there", tid, status, h.to)
            return
        self._exits.mark(tid, "handoff")
        if r.running:
            self.runtime.apply(next(self._internal), [Suspend(tid, checkpoint=True)])
        else:
            self.runtime.checkpoint(tid)
        self._end(tid, "handoff", wait_s=self.handoff_timeout_s)

    def _end(self, tid: int, why: str, wait_s: float) -> bool:
        """Stop a resident trial for a reason of this node (hand-off or fencing) and wait for its exit."""
        waiter = self._exits.ending(tid, why)
        self.runtime.apply(next(self._internal), [Stop(tid, f"node {self.name}: {why}")])
        ok = waiter.wait(wait_s)
        if not ok:
            log.warning("trial %s did not exit within %.0f s (%s)", tid, wait_s, why)
        return ok

    def _admit(self, tid: int, epoch: int, done: dict[str, Any]) -> bool:
        """Whether a trial about to start here may start (see `Admission.admit`). A refused trial is
        reported failed, with the reason."""
        try:
            error = self._admission.admit(tid, epoch)
        except Exception as exc:
            log.error("trial %s: cannot build its launch: %s", tid, exc)
            return False
        if error is not None:
            log.error("trial %s: %s", tid, error)
            self._own_events.put(Exited(tid, "failed", 0, error, time.time(), False, 0.0))
            done["refused"].append(tid)
            return False
        return True

    def _launch(self, trial_id: int) -> TrialLaunch:
        return self._admission.launch(trial_id, self._epochs.get(trial_id, 0))

    # ---- the pump: events and heartbeats to the database ----------------------------------------

    def _pump(self) -> None:
        while not self._stop.is_set():
            try:
                events = self.runtime.poll(self.flush_s)
                self._take(self._drain_own() + events)
                now = time.monotonic()
                if self._pending or now - self._last_beat >= self.heartbeat_s:
                    self._flush()
                if now - self._last_fence_check >= self.heartbeat_s:
                    self._last_fence_check = now
                    self._fence_check()
            except Exception:
                log.exception("node pump")
                time.sleep(0.5)

    def _drain_own(self) -> list[Event]:
        out: list[Event] = []
        while True:
            try:
                out.append(self._own_events.get_nowait())
            except queue.Empty:
                return out

    def _take(self, events: list[Event]) -> None:
        for e in events:
            tid = e.trial_id
            epoch = self._epochs.get(tid, 0)
            if isinstance(e, Profiled | Resumed | Started):  # the controller knows devices by cluster ids
                e = replace(e, devices=tuple(global_device(self.name, d) for d in e.devices))
            kind = event_kind(e)
            if isinstance(e, Exited):
                why = self._exits.took(tid, e.status)
                if why == "handoff":
                    kind = HANDOFF
                elif why in ("stale", "lease"):
                    e = replace(e, status="crashed", error=f"fenced on node {self.name} ({why})")
            self._seq += 1
            self._pending.append(EventRecord(self.name, self._seq, epoch, tid, kind, e.to_dict()))

    def _flush(self, force: bool = False) -> None:
        self._take(self._drain_own() + self.runtime.poll(0))
        self._exits.prune()
        residency = self._residency.build(self.runtime.residency(), self._epochs, self._rounds)
        now = time.monotonic()
        try:
            self.ledger.beat(self.name, self.incarnation, residency, list(self._pending))
        except Exception as exc:
            if now - self._beat_error_logged > 5:
                log.warning("heartbeat failed (%s); retrying", exc)
                self._beat_error_logged = now
            if now - self._last_ok > self.lease_s and not self._lease_lost:
                self._lose_lease()
            if force:
                raise
            return
        self._pending.clear()
        self._residency.written(residency)
        self._last_ok = self._last_beat = now
        if self._lease_lost:
            log.warning("heartbeat restored")
            self._lease_lost = False

    def _lose_lease(self) -> None:
        """No heartbeat for `lease_s`: the controller will soon presume this node dead and restart its
        trials elsewhere, so stop them here first (they are restarted from their checkpoints)."""
        self._lease_lost = True
        live = list(self.runtime.residency())
        if not live:
            return
        log.error("no heartbeat for %.1f s: stopping %d trials (fencing)", self.lease_s, len(live))
        judged = {tid: self._epochs.get(tid) for tid in live}
        threading.Thread(target=self._end_all, args=(judged, "lease"), daemon=True).start()

    def _end_all(self, judged: dict[int, int | None], why: str) -> None:
        """End each trial's process judged `why` under the epoch it was judged with, and only that one.
        Under the apply lock, so that no order starts another process meanwhile: a run of the trial's new
        assignment may have replaced the judged process since (its epoch then differs), and a stop by
        trial id would end the new process instead, with this node's reason or none at all (then read
        as a stop nobody ordered, ending the trial). An apply stuck in a database call (the very reason a
        lease is lost) must not hold a fence up: after `FENCE_LOCK_S` the check goes on without the lock,
        and the epoch comparison alone spares a process that replaced the judged one."""
        for tid, epoch in judged.items():
            locked = self._apply_lock.acquire(timeout=FENCE_LOCK_S)
            try:
                if tid not in self.runtime.residency() or self._epochs.get(tid) != epoch:
                    continue
                with contextlib.suppress(Exception):
                    self._end(tid, why, wait_s=10)
            finally:
                if locked:
                    self._apply_lock.release()

    def _fence_check(self) -> None:
        live = list(self.runtime.residency())
        if not live:
            return
        try:
            assigned = self.ledger.assignments_of(live)
        except Exception:
            return
        stale: dict[int, int | None] = {}
        for tid in live:
            a = assigned.get(tid)
            if self._exits.fenced(tid):
                continue
            if a is not None and (a.node != self.name or a.epoch != self._epochs.get(tid, a.epoch)):
                stale[tid] = self._epochs.get(tid)
        if stale:
            log.warning("trials %s were reassigned while this node was out of contact: stopping them", list(stale))
            threading.Thread(target=self._end_all, args=(stale, "stale"), daemon=True).start()
