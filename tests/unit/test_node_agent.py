"""`NodeAgent`, the node side of the wire, on a fake local runtime and ledger: orders as the controller's
`CeleryRuntime` sends them (JSON) are decoded and applied in order, with local device ids, once per
(trial, round) and only under the current epoch; what the node writes back (residency, events) is
typed and decodes on the controller's side."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from quanta.devices import Device
from quanta.executor import actions as A
from quanta.executor.runtime import node as node_module
from quanta.executor.runtime.node import NodeAgent
from quanta.executor.wire import (
    Assignment,
    EventRecord,
    NodeDevice,
    NodeResidency,
    WireError,
    residency_from_json,
    residency_to_json,
)


class FakeLocal:
    """Stands in for `LocalRuntime`: records actions; a stopped trial exits (seen at the next poll)."""

    def __init__(self, devices: Sequence[Device], launcher: Any, **_: Any) -> None:
        self.applied: list[tuple[int, list[A.Action]]] = []
        self.resident: dict[int, A.Residency] = {}
        self.events: list[A.Event] = []
        self.lock = threading.Lock()

    def wait_ready(self) -> None:
        pass

    def apply(self, round_no: int, actions: Sequence[A.Action]) -> None:
        with self.lock:
            if actions:  # the agent hands over each phase of a round, empty or not
                self.applied.append((round_no, list(actions)))
            for a in actions:
                if isinstance(a, A.Run | A.Migrate):
                    self.resident[a.trial_id] = A.Residency(a.devices, True, 3, 1.5, extra={"pid": 100 + a.trial_id})
                    self.events.append(A.Started(a.trial_id, a.devices, 5.0, 0, time.time()))
                elif isinstance(a, A.Suspend):
                    self.resident[a.trial_id].running = False
                elif isinstance(a, A.Stop):
                    self.resident.pop(a.trial_id, None)
                    self.events.append(A.Exited(a.trial_id, "killed", 3, None, time.time(), device_seconds=1.5))

    def poll(self, timeout: float) -> list[A.Event]:
        with self.lock:
            out, self.events = self.events, []
        if not out:
            time.sleep(min(timeout, 0.01))
        return out

    def residency(self) -> dict[int, A.Residency]:
        with self.lock:
            return dict(self.resident)

    def checkpoint(self, trial_id: int) -> None:
        pass

    def close(self) -> None:
        pass


class FakeLedger:
    def __init__(self) -> None:
        self.assigned: dict[int, Assignment] = {}
        self.claimed: set[tuple[str, int, int]] = set()
        self.rows: list[EventRecord] = []
        self.residency: dict[str, Any] = {}
        self.devices: list[dict[str, Any]] = []

    def register(self, node: str, incarnation: str, devices: Sequence[NodeDevice]) -> int:
        self.devices = [d.to_dict() for d in devices]
        return 0

    def beat(self, node: str, incarnation: str, residency: Any, events: Any) -> None:
        self.residency = json.loads(json.dumps(residency_to_json(residency)))  # as the node row stores it
        self.rows += [replace(e, data=json.loads(json.dumps(e.data))) for e in events]

    def leave(self, node: str, incarnation: str) -> None:
        pass

    def claim(self, node: str, trial_id: int, round_no: int) -> bool:
        if (node, trial_id, round_no) in self.claimed:
            return False
        self.claimed.add((node, trial_id, round_no))
        return True

    def assignments_of(self, trial_ids: Sequence[int]) -> dict[int, Assignment]:
        return {t: self.assigned[t] for t in trial_ids if t in self.assigned}

    def launch(self, trial_id: int, epoch: int) -> A.TrialLaunch:
        raise AssertionError("the fake runtime launches nothing")


@pytest.fixture
def agent(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(node_module, "LocalRuntime", FakeLocal)
    ledger = FakeLedger()
    devices = [Device("cpu:0", "cpu", 0, (0,), 512.0), Device("cpu:1", "cpu", 1, (1,), 512.0)]
    a = NodeAgent("n1", devices, ledger, heartbeat_s=0.05, flush_s=0.01, handoff_timeout_s=5)
    yield a, ledger, a.runtime
    a.close(checkpoint_wait_s=0)


def orders(*dicts: dict[str, Any]) -> list[A.Order]:
    """What the worker's task does with the JSON it receives."""
    return [A.Order.from_dict(json.loads(json.dumps(d))) for d in dicts]


def wait_for(predicate, timeout: float = 5.0) -> None:  # noqa: ANN001
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_registers_its_devices_under_cluster_ids(agent) -> None:
    _, ledger, _ = agent
    assert [NodeDevice.from_dict(d) for d in ledger.devices] == [
        NodeDevice("n1/cpu:0", "cpu", 512.0),
        NodeDevice("n1/cpu:1", "cpu", 512.0),
    ]


def test_orders_apply_once_under_the_current_epoch_with_local_devices(agent) -> None:
    a, ledger, rt = agent
    ledger.assigned = {7: Assignment(7, "n1", 2), 8: Assignment(8, "n2", 1)}
    run7 = {"kind": "run", "trial_id": 7, "devices": ["n1/cpu:1"], "epoch": 2}
    run8 = {"kind": "run", "trial_id": 8, "devices": ["n1/cpu:0"], "epoch": 1}  # assigned elsewhere
    done = a.apply(1, orders(run7, run8))
    assert done == {"applied": [7], "duplicate": [], "stale": [8], "refused": []}
    assert rt.applied == [(1, [A.Run(7, ("cpu:1",))])]
    assert a.apply(1, orders(run7))["duplicate"] == [7]  # redelivered
    a.apply(2, orders({"kind": "suspend", "trial_id": 7, "checkpoint": True}))
    assert rt.applied[-1] == (2, [A.Suspend(7, True)])
    wait_for(lambda: "7" in ledger.residency and ledger.residency["7"]["round"] == 2)
    assert residency_from_json(ledger.residency)[7] == NodeResidency(("n1/cpu:1",), False, 3, 1.5, False, 2, 2, 107)
    wait_for(lambda: any(r.kind == "started" for r in ledger.rows))
    started = next(r for r in ledger.rows if r.kind == "started")
    assert (started.node, started.epoch, started.trial_id) == ("n1", 2, 7)
    e = A.decode_event(started.kind, started.data)
    assert isinstance(e, A.Started) and e.devices == ("n1/cpu:1",)  # cluster ids on the wire


def test_a_stop_or_suspend_of_an_earlier_epoch_leaves_the_current_process_alone(agent) -> None:
    """A stop meant for the process of epoch 1, delivered late (after the trial was assigned to this node
    again under epoch 2), must not end the process that runs now; one of the current epoch does."""
    a, ledger, rt = agent
    ledger.assigned = {5: Assignment(5, "n1", 2)}
    a.apply(10, orders({"kind": "run", "trial_id": 5, "devices": ["n1/cpu:0"], "epoch": 2}))
    late = a.apply(3, orders({"kind": "stop", "trial_id": 5, "reason": "old", "epoch": 1}))
    assert late == {"applied": [], "duplicate": [], "stale": [5], "refused": []}
    assert a.apply(4, orders({"kind": "suspend", "trial_id": 5, "epoch": 1}))["stale"] == [5]
    assert a.apply(5, orders({"kind": "release", "trial_id": 5, "epoch": 1}))["stale"] == [5]
    assert [type(x).__name__ for _, acts in rt.applied for x in acts] == ["Run"]
    assert 5 in rt.residency()
    done = a.apply(11, orders({"kind": "stop", "trial_id": 5, "reason": "now", "epoch": 2}))
    assert done["applied"] == [5] and 5 not in rt.residency()


def test_a_fork_and_a_config_change_reach_the_process_of_the_current_epoch_only(agent) -> None:
    a, ledger, rt = agent
    ledger.assigned = {5: Assignment(5, "n1", 2)}
    a.apply(1, orders({"kind": "run", "trial_id": 5, "devices": ["n1/cpu:0"], "epoch": 2}))
    assert a.apply(2, orders({"kind": "fork", "trial_id": 5, "into": 9, "epoch": 1}))["stale"] == [5]
    assert a.apply(3, orders({"kind": "fork", "trial_id": 6, "into": 9, "epoch": 2}))["refused"] == [6]  # not here
    # Neither reached a process, and both are answered (gone): the controller takes a checkpoint instead.
    answers = [(e.trial_id, e.into, e.gone) for e in a._drain_own() if isinstance(e, A.Forked)]
    assert answers == [(5, 9, True), (6, 9, True)]
    done = a.apply(4, orders({"kind": "fork", "trial_id": 5, "into": 9, "epoch": 2}))
    assert done["applied"] == [5] and rt.applied[-1] == (4, [A.Fork(5, 9)])
    a.apply(5, orders({"kind": "reconfigure", "trial_id": 5, "values": {"lr": 0.01}, "epoch": 2}))
    assert rt.applied[-1] == (5, [A.Reconfigure(5, {"lr": 0.01})])


def test_a_fence_ends_only_the_process_it_judged_stale(agent) -> None:
    """The fence check judges a process stale (its trial was assigned again) and ends it from another
    thread. When a run of the new assignment has replaced that process meanwhile, the new process goes on:
    a stop by trial id would end it, reported as fenced or as a stop nobody ordered."""
    a, ledger, rt = agent
    ledger.assigned = {5: Assignment(5, "n1", 1)}
    a.apply(1, orders({"kind": "run", "trial_id": 5, "devices": ["n1/cpu:0"], "epoch": 1}))
    ledger.assigned = {5: Assignment(5, "n1", 2)}
    a.apply(2, orders({"kind": "run", "trial_id": 5, "devices": ["n1/cpu:0"], "epoch": 2}))  # replaces it
    assert [type(x).__name__ for _, acts in rt.applied for x in acts] == ["Run", "Stop", "Run"]
    a._end_all({5: 1}, "stale")  # judged under epoch 1, carried out late
    assert 5 in rt.residency() and len(rt.applied) == 3
    a._end_all({5: 2}, "stale")  # the process it judged: ended, as fenced
    assert 5 not in rt.residency()
    wait_for(lambda: sum(r.kind == "exited" for r in ledger.rows) == 2)
    ends = [(r.epoch, A.decode_event(r.kind, r.data)) for r in ledger.rows if r.kind == "exited"]
    assert [(epoch, e.status, e.error) for epoch, e in ends] == [
        (1, "crashed", "fenced on node n1 (stale)"),
        (2, "crashed", "fenced on node n1 (stale)"),
    ]


def test_orders_of_stops_and_suspensions_carry_the_epoch_on_the_wire() -> None:
    for action in (A.Stop(4, "why"), A.Suspend(4, True), A.Release(4)):
        order = A.Order.from_dict(json.loads(json.dumps(A.Order(action, 3).to_dict())))
        assert (order.action, order.epoch) == (action, 3)


def test_a_handoff_ends_the_process_and_reports_its_exit_as_a_handoff(agent) -> None:
    a, ledger, rt = agent
    ledger.assigned = {3: Assignment(3, "n1", 1)}
    a.apply(1, orders({"kind": "run", "trial_id": 3, "devices": ["n1/cpu:0"], "epoch": 1}))
    done = a.apply(2, orders({"kind": "handoff", "trial_id": 3, "to": "n2", "epoch": 1}))
    assert done["applied"] == [3]
    kinds = [type(x).__name__ for _, acts in rt.applied for x in acts]
    assert kinds == ["Run", "Suspend", "Stop"]  # park with a checkpoint, then end the process
    wait_for(lambda: any(r.kind == A.HANDOFF for r in ledger.rows))
    row = next(r for r in ledger.rows if r.kind == A.HANDOFF)
    e = A.decode_event(row.kind, row.data)
    assert isinstance(e, A.Exited) and e.device_seconds == 1.5
    assert not any(r.kind == "exited" for r in ledger.rows)


@pytest.mark.parametrize(("status", "started_on_target"), [("completed", False), ("failed", False), ("crashed", True)])
def test_a_trial_that_ended_before_its_handoff_is_started_on_the_target_only_if_it_crashed(
    agent, status: str, started_on_target: bool
) -> None:
    a, ledger, rt = agent
    ledger.assigned = {3: Assignment(3, "n1", 1)}
    a.apply(1, orders({"kind": "run", "trial_id": 3, "devices": ["n1/cpu:0"], "epoch": 1}))
    with rt.lock:  # its process ends on its own just as the controller moves it to node n2
        rt.resident.pop(3)
        rt.events.append(A.Exited(3, status, 3, None, time.time(), device_seconds=1.5))
    done = a.apply(2, orders({"kind": "handoff", "trial_id": 3, "to": "n2", "epoch": 1}))
    assert done["applied"] == [3] and [type(x).__name__ for _, acts in rt.applied for x in acts] == ["Run"]
    # The start on n2 is the task linked to this one, with the same round: n2 claims it first, or finds it
    # claimed (a duplicate: skipped).
    assert (("n2", 3, 2) in ledger.claimed) is not started_on_target


def test_a_bad_order_is_refused_before_anything_is_applied() -> None:
    with pytest.raises(WireError, match="Run.devices"):
        orders({"kind": "run", "trial_id": 3, "devices": "n1/cpu:0", "epoch": 1})
