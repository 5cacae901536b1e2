"""Nothing reported is lost on a real PostgreSQL: a NaN or infinite metric is stored as null with a flag
(PostgreSQL's json type refuses NaN, which used to fail the whole batch, other trials' reports included),
a write that fails while the database is away is kept and retried, and in distributed mode a batch of
node events is acknowledged (the event cursor moved past it) only once its rows are stored."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from quanta.controller import Controller, ControllerOptions
from quanta.controller import recorder as recorder_module
from quanta.db.cluster import DbCluster
from quanta.db.store import Store
from quanta.executor.actions import Event, Reported, event_kind, reported
from quanta.executor.runtime.celery_runtime import CeleryRuntime
from quanta.executor.wire import EventRecord, NodeDevice
from quanta.spec import parse_spec
from tests.conftest_services import PostgresServer, RedisServer, postgres_fixture

pytestmark = [pytest.mark.services]

SPEC = {
    "name": "durable",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"uniform": [0.1, 0.2]}},
    "metric": {"name": "accuracy", "goal": "maximize"},
    "budget": {"max_trials": 2, "max_steps": 100},
    "seed": 1,
}


pg = pytest.fixture(scope="module", name="pg")(postgres_fixture)  # its own server: these tests halt and restart it


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    """A real Redis for the controller's messages (no worker reads them here)."""
    server = RedisServer().start()
    yield server.url
    server.stop()


class Node:
    """Writes events to the database as a node agent does (`NodeLedger.beat`)."""

    def __init__(self, cluster: DbCluster, name: str = "n1") -> None:
        self.cluster, self.name, self.seq = cluster, name, 0
        cluster.register(name, "inc", [NodeDevice(f"{name}/cpu:0", "cpu", 1000.0)])

    def write(self, events: list[Event]) -> None:
        records = []
        for e in events:
            self.seq += 1
            records.append(EventRecord(self.name, self.seq, 0, e.trial_id, event_kind(e), e.to_dict()))
        self.cluster.beat(self.name, "inc", {}, records)


def _setup(pg: PostgresServer, broker: str, tmp_path: Path) -> tuple[Store, DbCluster, Controller, list[int], int]:
    store = Store(pg.create_database())
    cluster = DbCluster(workdir=tmp_path, engine=store.engine)
    spec = parse_spec(SPEC)
    sid = store.create_search(spec.name, spec.model_dump(mode="json"), time.time()).id
    assert sid is not None
    store.update_search(sid, status="running")
    tids = [store.add_trial(sid, n, {"lr": 0.15}, {"lr": [0.15]}, time.time()).id for n in range(2)]
    rt = CeleryRuntime(broker, cluster)
    ctl = Controller(store, rt, ControllerOptions(workdir=tmp_path))
    ctl.load()
    return store, cluster, ctl, [t for t in tids if t is not None], sid


def _stored(store: Store, sid: int) -> list[tuple[int, int, dict, dict | None]]:
    return sorted((r.trial_id, r.step, r.metrics, r.non_finite) for r in store.search_reports(sid))


def test_a_nan_report_does_not_drop_other_trials_reports(pg: PostgresServer, broker: str, tmp_path: Path) -> None:
    store, cluster, ctl, (a, b), sid = _setup(pg, broker, tmp_path)
    now = time.time()
    # Raw non-finite values, as a runtime that does not clean them would hand them over.
    ctl.handle(
        [
            Reported(a, 5, {"accuracy": math.nan, "loss": math.inf}, now),
            Reported(b, 5, {"accuracy": 0.5, "loss": -math.inf}, now),
        ]
    )
    # Through a node: the event row itself must be storable (json refuses NaN there too).
    Node(cluster).write([reported(a, 6, {"accuracy": 0.25, "loss": math.nan}, now + 1)])
    ctl.handle(ctl.runtime.poll(0))
    assert _stored(store, sid) == [
        (a, 5, {"accuracy": None, "loss": None}, {"accuracy": "nan", "loss": "inf"}),
        (a, 6, {"accuracy": 0.25, "loss": None}, {"loss": "nan"}),
        (b, 5, {"accuracy": 0.5, "loss": None}, {"loss": "-inf"}),
    ]
    assert store.search(sid).best_metric == 0.5  # the NaN never became anyone's best


def test_rows_are_kept_and_retried_while_the_database_restarts(
    pg: PostgresServer, broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reports without the objective touch no trial row: only the batched write meets the outage, and its
    retries (with backoff) outlast a database that is back within seconds."""
    store, cluster, ctl, (a, b), sid = _setup(pg, broker, tmp_path)
    monkeypatch.setattr(recorder_module, "FLUSH_DELAYS_S", (0.5, 1.0, 2.0, 4.0, 8.0, 16.0))
    now = time.time()
    batch: list[Event] = [Reported(t, s, {"loss": 1.0 / (s + 1)}, now + s) for t in (a, b) for s in range(3)]
    pg.halt()
    restarter = threading.Thread(target=lambda: (time.sleep(1.0), pg.start()))
    restarter.start()
    try:
        ctl.handle(batch)  # does not raise: a try after the restart succeeds
    finally:
        restarter.join()
    assert [(t, s) for t, s, _, _ in _stored(store, sid)] == [(t, s) for t in sorted((a, b)) for s in range(3)]
    assert ctl.recorder.pending == 0


def test_an_outage_loses_nothing_and_acknowledges_only_stored_events(
    pg: PostgresServer, broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Distributed mode: the database goes away while the controller records a batch of node events. The
    batch is not acknowledged; once the database is back it is delivered again and stored once."""
    store, cluster, ctl, (a, b), sid = _setup(pg, broker, tmp_path)
    monkeypatch.setattr(recorder_module, "FLUSH_DELAYS_S", (0.05,))
    node = Node(cluster)
    now = time.time()
    node.write([reported(t, s, {"accuracy": 0.1 * s, "loss": 1.0}, now + s) for t in (a, b) for s in range(3)])
    batch = ctl.runtime.poll(0)
    assert len(batch) == 6
    pg.halt()
    with pytest.raises(Exception):  # noqa: B017 (whatever the driver raises for a server that is gone)
        ctl.handle(batch)
    pg.start()
    deadline = time.monotonic() + 60
    while True:  # what the controller loop does: log, wait, go on with the next round
        try:
            ctl.handle(ctl.runtime.poll(0.2))
            break
        except Exception:
            assert time.monotonic() < deadline, "the database did not come back"
            time.sleep(0.2)
    node.write([reported(a, 3, {"accuracy": 0.9, "loss": 0.5}, now + 10)])
    ctl.handle(ctl.runtime.poll(1.0))
    stored = [(t, s) for t, s, _, _ in _stored(store, sid)]
    assert stored == sorted([(t, s) for t in (a, b) for s in range(3)] + [(a, 3)]), "lost or doubled"
    assert store.search(sid).best_metric == pytest.approx(0.9)
    ctl.runtime.poll(0)  # acknowledges the last batch
    # A controller started now has nothing left to read: every event is acknowledged, once.
    assert CeleryRuntime(broker, cluster).poll(0) == []
