"""Checks of resuming and tagging searches that the store tests share on SQLite and PostgreSQL
(tests/unit/test_store_contract.py, tests/distributed/test_lifecycle_pg.py)."""

from __future__ import annotations

import threading

import pytest

from quanta.db.errors import BudgetError, Conflict
from quanta.db.public.searches import SearchPatch
from quanta.db.store import Store
from quanta.spec import parse_spec

SPEC = {
    "name": "s",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"uniform": [0.0, 1.0]}},
    "metric": {"name": "loss", "goal": "minimize", "target": 0.1},
    "budget": {"max_trials": 7, "max_seconds": 100},
}


def assert_resumes_raise_the_budget_once_each(store: Store) -> None:
    """A stopped search is asked to resume: its stored budget is raised by what each request adds (eight
    requests at once from four threads add up, none lost), the spec keeps its key order, and a resume
    that cannot be is refused with nothing written."""
    sid = store.submit_search(parse_spec(SPEC), 0.0).id
    store.update_search(sid, status="stopped", started_at=1.0, finished_at=11.0, trials_created=2)
    order = list(store.search(sid).spec)
    out = store.resume_search(sid, 20.0, more_trials=1, more_seconds=50.0)
    assert out is not None and out.progress.max_trials == 8 and store.search(sid).command == "resume"
    assert store.search(sid).spec["budget"]["max_seconds"] == 150.0 and list(store.search(sid).spec) == order

    errors: list[BaseException] = []

    def twice() -> None:
        try:
            for _ in range(2):
                store.resume_search(sid, 21.0, more_trials=1)
        except BaseException as exc:  # noqa: BLE001  # raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=twice) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and store.search(sid).spec["budget"]["max_trials"] == 16

    with pytest.raises(BudgetError) as bad:
        store.resume_search(sid, 22.0, more_trials=100_000)
    assert bad.value.field == "max_trials" and store.search(sid).spec["budget"]["max_trials"] == 16
    store.update_search(sid, status="failed", command=None)
    with pytest.raises(Conflict, match="it is failed"):
        store.resume_search(sid, 23.0, more_trials=1)
    assert store.search(sid).command is None and store.resume_search(sid + 99, 23.0) is None


def assert_tags_filter_exactly(store: Store) -> None:
    """Tags are set and read back, and the list filters on one exactly, with the other filters."""
    a = store.submit_search(parse_spec(SPEC), 0.0).id
    b = store.submit_search(parse_spec({**SPEC, "name": "b"}), 0.0).id
    store.patch_search(a, SearchPatch(tags=["x", "x-large", "a/b"]))
    store.patch_search(b, SearchPatch(tags=["x-large"], notes="b's"))
    assert [s.id for s in store.search_page(0, 10, tag="x")[0]] == [a]
    assert [s.id for s in store.search_page(0, 10, tag="x-large")[0]] == [b, a]
    assert store.search_page(0, 10, tag="a/b")[1] == 1 and store.search_page(0, 10, tag="X")[1] == 0
    assert store.search_page(0, 10, tag="x-large", status="running")[1] == 0
    assert store.patch_search(b + 99, SearchPatch(tags=["x"])) is None
