"""Warm start with real trial processes: `quanta run --db` on an existing database (seeded from an earlier
search; a missing id or another space is a CLI error naming it, with nothing stored), and a warm-started
search whose controller is restarted in the middle, then asks exactly what it would have asked."""

from __future__ import annotations

import time

import pytest

from quanta.controller import Controller, ControllerOptions
from quanta.db.store import Store
from quanta.devices import parse_devices
from quanta.executor.runtime.local import LocalRuntime
from quanta.spec import parse_spec
from tests.integration.test_quanta_run import TINY, quanta_run

EARLIER = {
    **TINY,
    "name": "earlier",
    "metric": {"name": "accuracy", "goal": "maximize", "target": 2.0},  # never reached: runs its budget
    "budget": {"max_trials": 3, "max_steps": 30},
    "parallelism": 2,
    "config": {"report_every": 10},
}
POINT = {"lr": 0.05, "hidden": 8}


@pytest.mark.slow
def test_quanta_run_warm_starts_from_a_search_in_the_same_database(tmp_path):
    code, output, _ = quanta_run(tmp_path, EARLIER)
    assert code == 3, output
    warm = {**EARLIER["search"], "warm_start_from": [1], "points_to_evaluate": [POINT]}
    later = {**EARLIER, "name": "later", "search": warm}
    code, output, _ = quanta_run(tmp_path, later)
    assert code == 3, output
    store = Store(f"sqlite:///{tmp_path}/q.db")
    first = store.trials(2)[0]
    assert first.number == 0 and first.params == POINT
    kept = store.warm_start(2)
    assert kept is not None and [d["number"] for d in kept] == [0, 1, 2]
    assert [d["vals"] for d in kept] == [t.vals for t in store.trials(1)]

    missing = {**later, "search": {**later["search"], "warm_start_from": [1, 9]}}
    code, output, _ = quanta_run(tmp_path, missing)
    assert code == 2 and "search.warm_start_from[1]: search 9 does not exist" in " ".join(output.split()), output
    other = {**later, "space": {**later["space"], "lr": {"loguniform": [0.001, 0.1]}}}
    code, output, _ = quanta_run(tmp_path, other)
    said = " ".join(output.split())
    assert code == 2 and "space.lr: loguniform [0.001, 0.1] here, loguniform [0.003, 0.1] there" in said, said
    assert [s.id for s in store.searches()] == [1, 2]  # nothing stored for the refused ones


def test_a_warm_started_search_restarted_in_the_middle_asks_what_it_would_have_asked(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/q.db")
    devices = parse_devices("cpu:2")

    def controller() -> Controller:
        rt = LocalRuntime(devices, warm_modules=["tests.trainables"])
        return Controller(store, rt, ControllerOptions(workdir=tmp_path / "work"))

    ctl = controller()
    try:
        earlier = ctl.submit(parse_spec({**EARLIER, "budget": {"max_trials": 4, "max_steps": 40}}))
        ctl.run(earlier)
        spec = parse_spec(
            {
                **EARLIER,
                "name": "later",
                "budget": {"max_trials": 6, "max_steps": 200},
                "parallelism": 1,
                "search": {
                    "algorithm": "tpe",
                    "n_startup": 2,
                    "warm_start_from": [earlier],
                    "points_to_evaluate": [POINT],
                },
                "config": {"report_every": 20, "sleep_s": 0.005},
            }
        )
        sid = ctl.submit(spec)
        # Run until two trials have ended and the third is computing, then stop the controller.
        deadline = time.monotonic() + 120
        while sum(t.status.final for t in ctl.trials_of(sid)) < 2 or len(ctl.trials_of(sid)) < 3:
            assert time.monotonic() < deadline, "the search did not get to its third trial"
            ctl.step()
        searcher = ctl.search(sid).searcher
        history = searcher.history()
        n = len(history)
        expected = searcher.ask(n)  # what it would have asked next
    finally:
        ctl.close()

    again = controller()
    try:
        again.load()
        restored = again.search(sid).searcher
        assert restored.history() == history
        assert restored.ask(n) == expected
        # A fresh controller to finish the search (the restored searcher above has asked n already).
    finally:
        again.close()
    final = controller()
    try:
        final.load()
        state = final.run(sid)
    finally:
        final.close()
    trials = store.trials(sid)
    assert state.status == "completed" and len(trials) == 6 and all(t.status == "completed" for t in trials)
    assert trials[0].params == POINT
    assert sorted(t.number for t in trials) == list(range(6))
