"""One contract, two stores: the SQLModel `Store` on a temporary SQLite file and the in-memory
`MemoryStore` must answer every call the controller makes the same way."""

from __future__ import annotations

import pytest

from app.db.memory import MemoryStore
from app.db.models import LatencyRow, PairRow, QuantumRow, ReportRow
from app.db.store import Store


@pytest.fixture(params=["sql", "memory"])
def store(request, tmp_path):
    if request.param == "sql":
        return Store(f"sqlite:///{tmp_path / 'contract.db'}")
    return MemoryStore()


def test_searches_create_update_and_filter(store):
    a = store.create_search("a", {"name": "a"}, 1.0)
    b = store.create_search("b", {"name": "b"}, 2.0)
    assert a.id is not None and b.id is not None and a.id != b.id
    assert a.status == "queued" and a.created_at == 1.0 and a.spec == {"name": "a"}
    assert [s.name for s in store.searches_needing_controller()] == ["a", "b"]
    row = store.update_search(a.id, status="running", started_at=3.0)
    assert row.status == "running" and row.started_at == 3.0
    assert [s.name for s in store.searches(("running",))] == ["a"]
    assert [s.name for s in store.searches()] == ["a", "b"]
    assert [s.name for s in store.searches_needing_controller()] == ["b"]
    store.update_search(a.id, command="stop")
    assert [s.name for s in store.searches_needing_controller()] == ["a", "b"]
    assert store.search(a.id).command == "stop"
    assert store.search(9999) is None
    with pytest.raises(KeyError):
        store.update_search(9999, status="x")


def test_trials_add_update_commands(store):
    s = store.create_search("s", {}, 0.0)
    t1 = store.add_trial(s.id, 1, {"lr": 0.1}, {"lr": [0.1]}, 5.0)
    t0 = store.add_trial(s.id, 0, {"lr": 0.2}, {"lr": [0.2]}, 4.0)
    job = store.add_trial(0, 0, {"kind": "ResNet-50"}, {}, 6.0)  # a trace job: no search
    assert len({t1.id, t0.id, job.id}) == 3
    assert t1.status == "queued" and t1.steps == 0 and t1.device_seconds == 0.0 and t1.params == {"lr": 0.1}
    assert [t.number for t in store.trials(s.id)] == [0, 1]
    assert store.search(s.id).trials_created == 2
    store.update_trial(t1.id, status="running", steps=7, started_at=5.5)
    got = store.trial(t1.id)
    assert (got.status, got.steps, got.started_at) == ("running", 7, 5.5)
    assert store.trials_with_commands() == []
    store.update_trial(t0.id, command="stop")
    assert [t.id for t in store.trials_with_commands()] == [t0.id]
    store.update_trial(t0.id, command=None)
    assert store.trials_with_commands() == []
    assert store.trial(job.id).params == {"kind": "ResNet-50"}
    with pytest.raises(KeyError):
        store.update_trial(9999, status="x")


def test_measurement_rows(store):
    s = store.create_search("s", {}, 0.0)
    t = store.add_trial(s.id, 0, {}, {}, 0.0)
    store.add_rows([])
    store.add_rows(
        [
            ReportRow(trial_id=t.id, search_id=s.id, step=10, at=1.0, metrics={"acc": 0.5}, objective=0.5),
            ReportRow(trial_id=t.id, search_id=s.id, step=20, at=2.0, metrics={"acc": 0.6}, objective=0.6),
            QuantumRow(
                trial_id=t.id, search_id=s.id, devices="d0", started_at=0, ended_at=1, steps=5, rate=5, rss_mb=1
            ),
            LatencyRow(trial_id=t.id, kind="park", ms=3.0, at=1.0),
            LatencyRow(trial_id=t.id, kind="start", ms=9.0, at=0.5),
            PairRow(trial_a=1, trial_b=2, rate_a=1.0, rate_b=2.0, at=3.0),
        ]
    )
    assert [r.step for r in store.reports(t.id)] == [10, 20]
    assert [r.objective for r in store.search_reports(s.id)] == [0.5, 0.6]
    assert len(store.quanta(search_id=s.id)) == 1 and len(store.quanta(trial_id=t.id + 100)) == 0
    assert [r.kind for r in store.latencies()] == ["park", "start"]
    assert [r.ms for r in store.latencies("start")] == [9.0]
    assert [(p.trial_a, p.rate_b) for p in store.pairs()] == [(1, 2.0)]


def test_intents_and_state(store):
    assert store.last_intent() is None
    store.record_intent(1, 1.0, [{"kind": "run", "trial_id": 1, "devices": ["d0"]}])
    store.record_intent(2, 2.0, [{"kind": "suspend", "trial_id": 1, "checkpoint": False}])
    last = store.last_intent()
    assert last.round_no == 2 and last.actions[0]["kind"] == "suspend"
    assert store.get_state("policy") is None
    store.set_state("policy", {"name": "fifo", "state": {"offsets": {"1": 0.5}, "pair": (1, 2)}})
    store.set_state("controller", {"round_no": 3})
    store.set_state("controller", {"round_no": 4})
    # JSON semantics: tuples come back as lists.
    assert store.get_state("policy") == {"name": "fifo", "state": {"offsets": {"1": 0.5}, "pair": [1, 2]}}
    assert store.get_state("controller") == {"round_no": 4}
