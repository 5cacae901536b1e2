"""`DbCluster` (both sides of distributed mode's database) on SQLite, and the shared launch builder."""

from __future__ import annotations

import time

from quanta.db.cluster import DbCluster
from quanta.db.store import Store
from quanta.executor.wire import EventRecord, NodeDevice, NodeResidency
from quanta.spec import parse_spec

SPEC = {
    "name": "s",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"uniform": [0.1, 0.2]}},
    "metric": {"name": "accuracy"},
    "budget": {"max_steps": 77},
    "scheduler": {"checkpoint_every_quanta": 3},
    "seed": 5,
    "config": {"batch": 8},
}


def make(tmp_path) -> tuple[Store, DbCluster]:
    store = Store(f"sqlite:///{tmp_path}/q.db")
    return store, DbCluster(workdir=tmp_path / "ck", engine=store.engine)


def test_claims_are_once_per_node_trial_and_round(tmp_path) -> None:
    _, db = make(tmp_path)
    assert db.claim("n1", 1, 5) is True
    assert db.claim("n1", 1, 5) is False  # redelivered
    assert db.claim("n1", 1, 6) is True
    assert db.claim("n2", 1, 5) is True  # the target side of a hand-off in the same round


def test_events_are_numbered_per_node_and_a_retried_beat_writes_nothing_twice(tmp_path) -> None:
    _, db = make(tmp_path)
    assert db.register("n1", "a", [NodeDevice("n1/cpu:0", "cpu", 1.0)]) == 0
    db.register("n2", "b", [])
    ev = [EventRecord("n1", 1, 1, 7, "report", {"trial_id": 7, "step": 1, "metrics": {}, "at": 1.0})]
    db.beat("n1", "a", {7: NodeResidency(("n1/cpu:0",), True, epoch=1)}, ev)
    assert db.nodes()[0].residency == {7: NodeResidency(("n1/cpu:0",), True, epoch=1)}
    assert db.nodes()[0].devices == (NodeDevice("n1/cpu:0", "cpu", 1.0),)
    db.beat("n1", "a", {}, ev)  # the commit of the first was not heard of: retried
    db.beat("n2", "b", {}, [EventRecord("n2", 1, 0, 8, "report", {"trial_id": 8, "step": 0, "metrics": {}, "at": 0.5})])
    rows = db.events_since({})
    assert [(r.node, r.seq, r.trial_id) for r in rows] == [("n2", 1, 8), ("n1", 1, 7)]  # merged by time
    assert db.events_since({"n1": 1}) == [rows[0]]
    assert db.events_since({"n1": 1, "n2": 1}) == []
    assert db.register("n1", "c", []) == 1  # a restarted node continues its numbering
    [n1, n2] = db.nodes()
    assert (n1.name, n1.incarnation, n1.seq, n1.status) == ("n1", "c", 1, "up")
    db.leave("n2", "b")
    assert db.nodes()[1].status == "left"


def test_assignments_and_cursor(tmp_path) -> None:
    _, db = make(tmp_path)
    assert db.assign(3, "n1") == 1
    assert db.assign(3, "n2") == 2
    assert db.assignments_of([3, 4])[3].node == "n2"
    assert db.load_cursor() == {"handled": {}, "returned": {}}
    db.save_cursor({"handled": {"n1": 2}, "returned": {"n1": 4}})
    assert db.load_cursor() == {"handled": {"n1": 2}, "returned": {"n1": 4}}


def test_launch_from_the_database_matches_the_controllers(tmp_path) -> None:
    store, db = make(tmp_path)
    spec = parse_spec(SPEC)
    sid = store.create_search("s", spec.model_dump(mode="json"), time.time()).id
    tid = store.add_trial(sid, 0, {"lr": 0.15}, {"lr": [0.15]}, time.time()).id
    first = db.launch(tid, epoch=1)
    assert first.config == {"seed": 5, "batch": 8, "lr": 0.15}
    assert first.max_steps == 77 and first.checkpoint_every_quanta == 3 and first.resume is False
    assert first.checkpoint_path == str(tmp_path / "ck" / f"search-{sid}" / "checkpoints" / f"trial-{tid}.pt")
    assert db.launch(tid, epoch=2).resume is True  # moved or restarted elsewhere
    store.update_trial(tid, checkpoint_step=10)
    assert db.launch(tid, epoch=1).resume is True

    from quanta.controller import Controller, ControllerOptions

    class NoRuntime:
        def now(self) -> float:
            return time.time()

        def warm(self, modules) -> None:  # noqa: ANN001
            pass

        def residency(self) -> dict:
            return {}

        def bind(self, launcher) -> None:  # noqa: ANN001
            pass

    store.update_search(sid, status="running")
    ctl = Controller(store, NoRuntime(), ControllerOptions(workdir=tmp_path / "ck"))  # type: ignore[arg-type]
    ctl.load()
    ctl.trial(tid).resume = True
    assert ctl.launcher.launch(tid) == db.launch(tid, epoch=1)
