"""`CeleryRuntime`: the controller's runtime for many machines. Each node runs `quanta worker` (a Celery
worker on its own queue `node.<name>`, hosting a `NodeAgent`); this runtime sends a round's actions to
the nodes' queues BY TASK NAME through a client-only Celery app (so `app/` never imports `workers/`),
and reads nodes, heartbeats, residency and events from the database through a `ClusterView`.

This module holds what the runtime decides: where each action goes, under which assignment epoch, what
it expects back from the node, and which events reach the controller. The parts it composes own one
concern each: `celery_conf.py` (task names, queues, settings shared with the workers), `outbox.py`
(messages waiting for the broker), `event_cursor.py` (how far the node events were read and handled),
`node_watch.py` (which nodes are alive).

Why it survives faults:
- Redis down: publishing fails, the messages wait in an in-process outbox (in order) and go out when the
  broker is back; nodes keep heartbeating and writing events to the database, so nothing reported is
  lost, only new actions are delayed. A message lost with the broker (Redis restarted empty) is
  noticed because the node never reports that round: the expectation expires and the controller
  plans the trial again.
- Controller killed: the event cursor is persisted ("handled" = every event the controller has
  finished with, "returned" = the last batch handed over); a restarted runtime re-reads from
  "handled" and skips reports of the uncertain window that are already stored.
- Node dead (no heartbeat change for `dead_after_s`, or a new incarnation): its trials get
  `Exited(crashed)`, which makes the controller restart them elsewhere from their checkpoints.
  Assignment epochs fence a node that comes back: its stale processes are ignored here and stopped
  there.
- Cross-node moves: the source node checkpoints to the shared store and ends the process, and a
  linked task starts it on the target node from that checkpoint (no controller round trip). A stop or
  release sent meanwhile would reach the target before that start, find no process and be refused, and
  the process would then run on: it is held until the target reports the process (`_send_held`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from celery import Celery

from quanta.executor.actions import (
    HANDOFF,
    Action,
    Event,
    Exited,
    Fork,
    Handoff,
    Migrate,
    Order,
    Reconfigure,
    Release,
    Reported,
    Residency,
    Run,
    Stop,
    Suspend,
    decode_event,
)
from quanta.executor.policy.types import DeviceView
from quanta.executor.runtime.base import Launcher
from quanta.executor.runtime.celery_conf import APPLY_TASK, CHECKPOINT_TASK, WARM_TASK, celery_conf, queue_of
from quanta.executor.runtime.cluster import LIFECYCLE, ClusterView, split_device
from quanta.executor.runtime.event_cursor import EventCursor
from quanta.executor.runtime.node_watch import NodeWatch
from quanta.executor.runtime.outbox import Message, Outbox
from quanta.executor.wire import Assignment, EventRecord, NodeInfo, NodeResidency

log = logging.getLogger("quanta.celery")


@dataclass
class _Expect:
    """What the controller asked of a trial in a round, until the node reports that round applied."""

    round_no: int
    node: str
    devices: tuple[str, ...]
    running: bool
    deadline: float
    stop: bool = False
    source: str | None = None  # a cross-node move: the node handing the trial off


class CeleryRuntime:
    """The `Runtime` over node agents. Only the controller's thread calls it.

    A population's exploit is not adopted in place here (`adopts_in_place` False): the target's process is
    released and started again from the staged state, which the controller reads from the shared store,
    whether or not source and target are on one node."""

    adopts_in_place = False
    acks_by_polling = True  # its event cursor (`EventCursor.ack`)

    def __init__(
        self,
        broker_url: str,
        cluster: ClusterView,
        *,
        dead_after_s: float = 10.0,
        expect_timeout_s: float = 30.0,
        poll_interval_s: float = 0.1,
        batch_limit: int = 1000,
        celery: Celery | None = None,
    ):
        self.cluster = cluster
        self.dead_after_s = dead_after_s
        self.expect_timeout_s = expect_timeout_s
        self.poll_interval_s = poll_interval_s
        self.batch_limit = batch_limit
        if celery is None:
            celery = Celery("quanta-client", set_as_current=False)
            celery.conf.update(celery_conf(broker_url))
        self._celery = celery
        self._cursor = EventCursor(cluster)
        self._assign: dict[int, Assignment] = cluster.assignments()
        self._watch = NodeWatch(cluster, dead_after_s, self._lost)
        self._nodes = self._watch.nodes  # the same dict: name -> what is known of that node
        self._expect: dict[int, _Expect] = {}
        self._carry: dict[int, float] = {}  # device seconds of processes left behind by hand-offs
        self._exited_epoch: dict[int, int] = {}
        self._synth: list[tuple[int, int, str]] = []  # (trial, epoch, error) of trials on lost nodes
        self._held: dict[int, tuple[int, Stop | Release]] = {}  # (round, order) waiting for a start in flight
        self._outbox = Outbox(self._publish, self._sent)
        self._modules: list[str] = []
        self._read_error_logged = 0.0
        self._refresh()

    # ---- Runtime protocol ----------------------------------------------------------------------

    def devices(self) -> list[DeviceView]:
        out = []
        for name in sorted(self._nodes):
            n = self._nodes[name]
            if n.alive:
                for d in n.info.devices:
                    out.append(DeviceView(d.id, name, d.kind, d.memory_mb))
        return out

    def bind(self, launcher: Launcher) -> None:
        """Launches come from the database: each node agent builds them from its ledger."""

    def now(self) -> float:
        return time.time()

    def warm(self, modules: Sequence[str]) -> None:
        for m in modules:
            if m not in self._modules:
                self._modules.append(m)
        self._warm_nodes()

    def apply(self, round_no: int, actions: Sequence[Action]) -> None:
        by_node: dict[str, list[Order]] = {}
        links: dict[str, list[tuple[str, Order]]] = {}
        deadline = time.monotonic() + self.expect_timeout_s
        for a in actions:
            tid = a.trial_id
            where = self._where(tid)
            # Stops, releases and suspensions carry the epoch of the process they mean: delivered late
            # (after the trial was assigned again), a node ignores them instead of ending the new process.
            known = self._assign.get(tid)
            current_epoch = known.epoch if known is not None else None
            if isinstance(a, Stop | Release):  # both end the process where it is
                pending = self._expect.get(tid)
                if pending is not None and pending.source is not None and time.monotonic() <= pending.deadline:
                    # A cross-node move not applied yet (module docstring): held, the trial resident
                    # meanwhile. A start on one node is in that node's queue ahead of the order.
                    self._held[tid] = (round_no, a)
                    continue
                self._held.pop(tid, None)
                node = where or (known.node if known is not None else None)
                if node is not None:
                    by_node.setdefault(node, []).append(Order(a, current_epoch))
                    self._expect[tid] = _Expect(round_no, node, (), False, deadline, stop=True)
                continue
            if isinstance(a, Fork | Reconfigure):  # to the process where it is, under its epoch
                if where is not None:  # (no process: the controller takes a fork from the checkpoint)
                    by_node.setdefault(where, []).append(Order(a, current_epoch))
                continue
            if isinstance(a, Suspend):
                if where is not None:
                    by_node.setdefault(where, []).append(Order(a, current_epoch))
                    here = self._residency_of(tid)
                    devices = here.devices if here else ()
                    self._expect[tid] = _Expect(round_no, where, devices, False, deadline)
                continue
            assert isinstance(a, Run | Migrate)
            try:
                target = self._target(a.devices)
            except ValueError as exc:
                log.error("trial %s: %s", tid, exc)
                continue
            if where is None or where == target:
                current = self._assign.get(tid)
                if where is None or current is None or current.node != target:
                    epoch = self._new_epoch(tid, target)  # a new process
                else:
                    epoch = current.epoch
                by_node.setdefault(target, []).append(Order(a, epoch))
            else:  # cross-node: checkpoint and end on `where`, then start on `target` (linked task)
                old = self._assign.get(tid)
                epoch = self._new_epoch(tid, target)
                by_node.setdefault(where, []).append(Order(Handoff(tid, target), old.epoch if old else 0))
                links.setdefault(where, []).append((target, Order(Run(tid, a.devices, a.until), epoch)))
            source = where if where is not None and where != target else None
            self._expect[tid] = _Expect(round_no, target, tuple(sorted(a.devices)), True, deadline, source=source)
        for node, orders in by_node.items():
            trials = tuple(o.trial_id for o in orders)
            args = [round_no, [o.to_dict() for o in orders]]
            self._outbox.send(Message(node, APPLY_TASK, args, links.get(node, []), trials))

    def poll(self, timeout: float) -> list[Event]:
        end = time.monotonic() + max(0.0, timeout)
        self._cursor.ack()
        while True:
            self._outbox.flush()
            events: list[Event] = []
            try:
                self._refresh()
                records = self.cluster.events_since(self._cursor.position, self.batch_limit)
                events = self._translate(records)
            except Exception as exc:  # the database is away: try again; the controller's tick will tell
                self._watch.restart_observation()
                if time.monotonic() - self._read_error_logged > 5:
                    log.warning("cannot read the cluster state: %s", exc)
                    self._read_error_logged = time.monotonic()
            self._send_held()
            events += self._take_synth()
            if events:
                self._cursor.returned()
                return events
            left = end - time.monotonic()
            if left <= 0:
                return []
            time.sleep(min(self.poll_interval_s, left))

    def residency(self) -> dict[int, Residency]:
        out: dict[int, Residency] = {}
        reported: dict[int, tuple[str, NodeResidency]] = {}
        for name, n in self._nodes.items():
            if not n.alive:
                continue
            for tid, r in n.info.residency.items():
                if not self._valid(tid, name, r):
                    continue
                reported[tid] = (name, r)
                out[tid] = Residency(
                    r.devices,
                    r.running,
                    r.steps,
                    r.device_seconds + self._carry.get(tid, 0.0),
                    r.elastic,
                    {"node": name, "pid": r.pid, "epoch": r.epoch},
                )
        now = time.monotonic()
        for tid, x in list(self._expect.items()):
            rep = reported.get(tid)
            if rep is not None and rep[0] == x.node and rep[1].round >= x.round_no:
                del self._expect[tid]  # the node has applied it: what it reports is the truth
                continue
            if now > x.deadline:
                log.warning("trial %s: node %s did not apply round %s in time", tid, x.node, x.round_no)
                del self._expect[tid]
                if x.running and rep is None:
                    # A start that never arrived (the message went down with the broker, or its node
                    # refused it): no process runs and no exit will come, while the controller holds the
                    # trial as running. Report it crashed, so it is queued again (under a new epoch: a
                    # late delivery of the lost order is then refused as stale).
                    a = self._assign.get(tid)
                    why = f"node {x.node} did not apply round {x.round_no} in time: its start was lost"
                    self._synth.append((tid, a.epoch if a else 0, why))
                continue
            if x.stop:
                continue
            base = out.get(tid)
            out[tid] = Residency(
                x.devices,
                x.running,
                base.steps if base else 0,
                base.device_seconds if base else self._carry.get(tid, 0.0),
                base.elastic if base else False,
                {"node": x.node, "expected_round": x.round_no},
            )
        return out

    def checkpoint(self, trial_id: int) -> None:
        """Ask a resident trial to write its checkpoint now."""
        where = self._where(trial_id)
        if where is not None:
            self._outbox.send(Message(where, CHECKPOINT_TASK, [trial_id]))

    def close(self) -> None:
        """Stop talking to the cluster. Trials keep running on their nodes (a restarted controller takes
        them over); stop searches first to end them."""
        self._cursor.ack()
        self._outbox.flush()
        if self._outbox:
            log.warning("%d messages to nodes were not sent (broker unreachable)", len(self._outbox))
        with contextlib.suppress(Exception):
            self._celery.close()

    # ---- views ---------------------------------------------------------------------------------

    def nodes(self) -> dict[str, dict[str, Any]]:
        """Node name -> {alive, devices, heartbeat_at, trials} (for status pages and tests)."""
        return {
            name: {
                "alive": n.alive,
                "status": n.info.status,
                "devices": [d.id for d in n.info.devices],
                "heartbeat_at": n.info.heartbeat_at,
                "trials": sorted(n.info.residency),
            }
            for name, n in self._nodes.items()
        }

    def pending_messages(self) -> int:
        return len(self._outbox)

    # ---- internals -----------------------------------------------------------------------------

    def _send_held(self) -> None:
        """Send the stops and releases held for starts in flight whose node has applied them (or never
        will: the expectation expired, and the order goes where the trial was assigned)."""
        if not self._held:
            return
        self.residency()  # drops the expectations their nodes have applied
        for tid, (round_no, order) in list(self._held.items()):
            x = self._expect.get(tid)
            if x is None or x.source is None:
                del self._held[tid]
                self.apply(round_no, [order])

    def _valid(self, tid: int, node: str, r: NodeResidency) -> bool:
        """A resident process counts only if it runs under the trial's current assignment."""
        a = self._assign.get(tid)
        return a is None or (a.node == node and r.epoch == a.epoch)

    def _residency_of(self, tid: int) -> Residency | None:
        return self.residency().get(tid)

    def _where(self, tid: int) -> str | None:
        x = self._expect.get(tid)
        if x is not None and not x.stop and time.monotonic() <= x.deadline:
            return x.node
        for name, n in self._nodes.items():
            if n.alive:
                r = n.info.residency.get(tid)
                if r is not None and self._valid(tid, name, r):
                    return name
        return None

    def _target(self, devices: Sequence[str]) -> str:
        nodes = {split_device(d)[0] for d in devices}
        if len(nodes) != 1:
            raise ValueError(f"devices {list(devices)} span nodes {sorted(nodes)}: a trial runs on one node")
        node = nodes.pop()
        n = self._nodes.get(node)
        if n is None or not n.alive:
            raise ValueError(f"node {node} is not alive")
        return node

    def _new_epoch(self, tid: int, node: str) -> int:
        epoch = self.cluster.assign(tid, node)
        self._assign[tid] = Assignment(tid, node, epoch)
        return epoch

    def _refresh(self) -> None:
        self._watch.refresh()
        self._warm_nodes()

    def _lost(self, info: NodeInfo, why: str) -> None:
        """The node's processes (those of `info`, its last row before) are gone: its trials crashed
        (restartable from their checkpoints)."""
        log.warning("%s: restarting its trials elsewhere", why)
        tids = {tid for tid, r in info.residency.items() if self._valid(tid, info.name, r)}
        # Trials expected there, and trials it was handing off (the linked start never comes).
        tids |= {tid for tid, x in self._expect.items() if info.name in (x.node, x.source) and not x.stop}
        for tid in sorted(tids):
            a = self._assign.get(tid)
            self._synth.append((tid, a.epoch if a else 0, why))
            self._expect.pop(tid, None)

    def _take_synth(self) -> list[Event]:
        out: list[Event] = []
        for tid, epoch, why in self._synth:
            if self._exited_epoch.get(tid, -1) >= epoch:
                continue  # its exit was reported after all
            self._exited_epoch[tid] = epoch
            out.append(Exited(tid, "crashed", 0, why, time.time(), False, self._carry.pop(tid, 0.0)))
        self._synth.clear()
        return out

    def _translate(self, records: list[EventRecord]) -> list[Event]:
        out: list[Event] = []
        for r in records:
            self._cursor.advance(r.node, r.seq)
            e = self._event(r)
            if e is not None:
                out.append(e)
        return out

    def _event(self, r: EventRecord) -> Event | None:
        tid = r.trial_id
        a = self._assign.get(tid)
        current = a.epoch if a is not None else r.epoch
        if r.kind == HANDOFF:  # the source side of a move: its device time carries over
            self._carry[tid] = self._carry.get(tid, 0.0) + Exited.from_dict(r.data).device_seconds
            return None
        if r.kind in LIFECYCLE and r.epoch < current:
            return None  # a process of an earlier assignment
        e = decode_event(r.kind, r.data)
        if isinstance(e, Reported):
            if self._cursor.uncertain(r.node, r.seq) and self.cluster.has_report(tid, e.step, e.at):
                return None
        elif isinstance(e, Exited):
            if self._exited_epoch.get(tid, -1) >= r.epoch and r.epoch == current and e.status == "crashed":
                return None  # already reported as crashed (its node was presumed lost)
            self._exited_epoch[tid] = r.epoch
            self._expect.pop(tid, None)
            self._held.pop(tid, None)  # the process it meant has ended
            carry = self._carry.pop(tid, 0.0)
            if carry:
                e = replace(e, device_seconds=e.device_seconds + carry)
        return e

    def redeliver(self) -> None:
        """The last batch was not handled durably: read it again on the next poll, skipping its reports
        that did get stored (as after a controller restart)."""
        self._cursor.redeliver()

    def _warm_nodes(self) -> None:
        if not self._modules:
            return
        for name, n in self._nodes.items():
            todo = [m for m in self._modules if m not in n.warmed]
            if n.alive and todo:
                n.warmed.update(todo)
                self._outbox.send(Message(name, WARM_TASK, [todo]))

    # ---- sending -------------------------------------------------------------------------------

    def _sent(self, msg: Message) -> None:
        deadline = time.monotonic() + self.expect_timeout_s
        for tid in msg.trials:  # the clock of an expectation starts when its message leaves
            x = self._expect.get(tid)
            if x is not None:
                x.deadline = max(x.deadline, deadline)

    def _publish(self, msg: Message) -> None:
        links = [
            self._celery.signature(APPLY_TASK, args=[msg.args[0], [o.to_dict()]], queue=queue_of(node), immutable=True)
            for node, o in msg.links
        ]
        self._celery.send_task(msg.task, args=msg.args, queue=queue_of(msg.node), link=links or None)
