"""Wire formats: every type survives to_dict -> JSON -> from_dict unchanged, and a bad payload is
refused with an error that names the field."""

from __future__ import annotations

import json

import pytest

from quanta.executor import actions as A
from quanta.executor.wire import (
    NodeDevice,
    NodeResidency,
    Wire,
    WireError,
    residency_from_json,
    residency_to_json,
)

SAMPLES: list[Wire] = [
    A.Run(3, ("n1/cpu:0", "n1/cpu:1")),
    A.Suspend(3, checkpoint=True),
    A.Migrate(4, ("n2/cpu:0",)),
    A.Stop(5, "target reached"),
    A.Run(3, ("n1/cpu:0",), until=150),
    A.Release(5),
    A.Handoff(6, "n2"),
    A.Fork(3, 9),
    A.Reconfigure(3, {"lr": 0.001, "optimizer.momentum": 0.8}),
    A.Forked(3, 9, 120, 1700000008.0),
    A.Forked(3, 9, 0, 1700000008.0, "trial 3 has no live process", gone=True),
    A.Adopt(9, {"lr": 0.01}),
    A.Adopted(9, 120, 1700000009.0),
    A.Adopted(9, 0, 1700000009.0, "trial 9 has no live process", gone=True),
    A.Configured(3, 121, {"lr": 0.001}, 1700000009.0),
    A.Reported(1, 10, {"accuracy": 0.5, "loss": 1.25}, 1700000000.5),
    A.Profiled(1, ("n1/cpu:0",), 12, 1.5, 300.0, 1700000001.0, 1700000000.0, (2, 3), 7),
    A.Parked(1, 12, 3.5, 1700000002.0),
    A.Parked(1, 151, 0.0, 1700000002.0, at_limit=True),
    A.Exited(3, "released", 101, None, 1700000006.0),
    A.Resumed(1, ("n1/cpu:1",), 8.0, True, 1700000003.0),
    A.Started(1, ("n1/cpu:0",), 250.0, 40, 1700000004.0),
    A.Checkpointed(1, 40, "/ck/search-1/checkpoints/trial-1.pt", 1700000005.0),
    A.Exited(1, "failed", 41, "Traceback ...", 1700000006.0, elastic=True, device_seconds=12.5),
    A.Exited(2, "completed", 100, None, 1700000007.0),
    NodeDevice("n1/cpu:0", "cpu", 2048.0),
    NodeResidency(("n1/cpu:0",), True, 12, 3.5, False, 2, 9, 4242),
    NodeResidency(("n1/cuda:0", "n1/cuda:1"), False),
]


def through_json(d: dict) -> dict:
    return json.loads(json.dumps(d))


@pytest.mark.parametrize("value", SAMPLES, ids=lambda v: type(v).__name__)
def test_round_trip_through_json(value: Wire) -> None:
    assert type(value).from_dict(through_json(value.to_dict())) == value


def _subclasses(cls: type) -> set[type]:
    out: set[type] = set()
    subs: list[type] = cls.__subclasses__()
    for sub in subs:
        out |= {sub} | _subclasses(sub)
    return out


def test_every_wire_type_has_a_round_trip_sample() -> None:
    assert _subclasses(Wire) <= {type(v) for v in SAMPLES}


@pytest.mark.parametrize(
    "order",
    [
        A.Order(A.Run(1, ("n1/cpu:0",)), 3),
        A.Order(A.Migrate(1, ("n1/cpu:1",)), 3),
        A.Order(A.Suspend(1, True)),
        A.Order(A.Stop(1, "stopped")),
        A.Order(A.Handoff(1, "n2"), 2),
    ],
    ids=lambda o: o.action.kind,
)
def test_orders_round_trip_with_the_shape_nodes_receive(order: A.Order) -> None:
    d = order.to_dict()
    assert A.Order.from_dict(through_json(d)) == order
    assert d["kind"] == order.action.kind and d.get("epoch") == order.epoch


def test_order_json_keeps_its_shape() -> None:
    assert A.Order(A.Run(7, ("n2/cpu:1",)), 1).to_dict() == {
        "kind": "run",
        "trial_id": 7,
        "devices": ["n2/cpu:1"],
        "until": None,
        "epoch": 1,
    }
    assert A.Order(A.Run(7, ("n2/cpu:1",), until=150), 1).to_dict()["until"] == 150
    assert A.Order(A.Handoff(3, "n2"), 1).to_dict() == {"kind": "handoff", "trial_id": 3, "to": "n2", "epoch": 1}
    assert A.Order(A.Suspend(7)).to_dict() == {"kind": "suspend", "trial_id": 7, "checkpoint": False}


@pytest.mark.parametrize("event", [v for v in SAMPLES if isinstance(v, A.Event)], ids=lambda v: type(v).__name__)
def test_events_round_trip_by_kind(event: A.Event) -> None:
    assert A.decode_event(A.event_kind(event), through_json(event.to_dict())) == event


def test_a_handoff_event_is_the_exit_of_the_source_process() -> None:
    e = A.Exited(3, "killed", 41, None, 5.0, device_seconds=2.5)
    assert A.decode_event(A.HANDOFF, through_json(e.to_dict())) == e


def test_residency_map_round_trips_with_string_keys() -> None:
    res = {7: NodeResidency(("n1/cpu:0",), True, 5, epoch=1, round=2), 12: NodeResidency((), False)}
    data = through_json(residency_to_json(res))
    assert set(data) == {"7", "12"}
    assert residency_from_json(data) == res


@pytest.mark.parametrize(
    ("decode", "payload", "message"),
    [
        (A.Order.from_dict, {"kind": "run", "trial_id": "7", "devices": []}, "Run.trial_id: expected int"),
        (A.Order.from_dict, {"kind": "run", "trial_id": 7}, "Run.devices: missing"),
        (A.Order.from_dict, {"kind": "run", "trial_id": 7, "devices": ["a", 2]}, "Run.devices[1]: expected str"),
        (A.Order.from_dict, {"kind": "run", "trial_id": 7, "devices": [], "epoch": "1"}, "Order.epoch"),
        (A.Order.from_dict, {"kind": "jump", "trial_id": 7}, "Order.kind"),
        (A.Order.from_dict, {"trial_id": 7}, "Order.kind"),
        (A.Order.from_dict, ["run", 7], "Order: expected an object"),
        (A.Order.from_dict, {"kind": "stop", "trial_id": 7, "why": "x"}, "Stop: unknown field 'why'"),
        (A.Order.from_dict, {"kind": "suspend", "trial_id": 7, "checkpoint": 1}, "Suspend.checkpoint: expected bool"),
        (NodeResidency.from_dict, {"devices": "n1/cpu:0", "running": True}, "NodeResidency.devices: expected a list"),
        (NodeResidency.from_dict, {"devices": [], "running": True, "steps": None}, "NodeResidency.steps"),
        (NodeResidency.from_dict, {"devices": [], "running": True, "pid": "12"}, "NodeResidency.pid"),
        (NodeDevice.from_dict, {"id": "n1/cpu:0", "memory_mb": "big"}, "NodeDevice.memory_mb: expected float"),
        (residency_from_json, {"x": {"devices": [], "running": True}}, "residency['x']"),
        (residency_from_json, {"7": {"devices": [], "running": "yes"}}, "residency['7']: NodeResidency.running"),
        (
            lambda d: A.decode_event("report", d),
            {"trial_id": 1, "step": 1, "metrics": {"a": "x"}, "at": 1.0},
            "Reported.metrics['a']: expected float",
        ),  # fmt: skip
        (lambda d: A.decode_event("exploded", d), {}, "event kind"),
    ],
)
def test_bad_payloads_name_the_field(decode, payload, message: str) -> None:
    with pytest.raises(WireError, match=None) as err:
        decode(payload)
    assert message in str(err.value)


def test_floats_accept_json_integers() -> None:
    d = NodeResidency(("n1/cpu:0",), True, device_seconds=3.0).to_dict()
    d["device_seconds"] = 3
    r = NodeResidency.from_dict(d)
    assert r.device_seconds == 3.0 and isinstance(r.device_seconds, float)


def test_a_status_enum_travels_as_its_string() -> None:
    from quanta.status import TrialStatus

    e = A.Exited(1, TrialStatus.KILLED, 3, None, 2.0)
    assert A.Exited.from_dict(through_json(e.to_dict())) == e
    assert through_json(e.to_dict())["status"] == "killed"
    assert A.Exited.from_dict(e.to_dict()).status is TrialStatus.KILLED  # in process, no JSON between
