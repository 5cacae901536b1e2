"""Commands users write to the database (pause/resume/stop) reach trial processes."""

from __future__ import annotations

import time

from app.controller import Controller, ControllerOptions
from app.db.store import Store
from app.devices import parse_devices
from app.executor.runtime.local import LocalRuntime
from app.spec import parse_spec

SPEC = {
    "name": "cmd",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"choice": [0.01]}},
    "metric": {"name": "accuracy", "target": 2.0},
    "budget": {"max_trials": 2, "max_steps": 100000},
    "parallelism": 2,
    "search": {"algorithm": "random"},
    "scheduler": {"policy": "timeslice", "quantum_s": 0.2},
    "config": {"report_every": 500, "sleep_s": 0.001},
}


def step_until(ctl: Controller, cond, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not met in time"
        ctl.step()


def test_pause_parks_every_trial_and_resume_continues(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/q.db")
    rt = LocalRuntime(parse_devices("cpu:2"), warm_modules=["tests.trainables"])
    ctl = Controller(store, rt, ControllerOptions(workdir=tmp_path))
    try:
        sid = ctl.submit(parse_spec(SPEC))
        step_until(ctl, lambda: sum(r.running for r in rt.residency().values()) == 2)
        store.update_search(sid, command="pause")
        step_until(
            ctl, lambda: store.search(sid).status == "paused" and not any(r.running for r in rt.residency().values())
        )
        parked_steps = {t: r.steps for t, r in rt.residency().items()}
        for _ in range(3):
            ctl.step()
        assert {t: r.steps for t, r in rt.residency().items()} == parked_steps  # nothing computes
        store.update_search(sid, command="resume")
        step_until(ctl, lambda: sum(r.running for r in rt.residency().values()) == 2)
        assert store.search(sid).status == "running"
        trial = store.trials(sid)[0]
        store.update_trial(trial.id, command="stop")
        step_until(ctl, lambda: store.trial(trial.id).status == "stopped")
        assert store.trial(trial.id).reason == "stopped by user"  # a user stop is no verdict: not killed
        store.update_search(sid, command="stop")
        step_until(ctl, lambda: store.search(sid).status == "stopped")
    finally:
        ctl.close()
    # Nothing judged these trials: a user stopped one, the search's stop ended the rest.
    assert {t.status for t in store.trials(sid)} == {"stopped"}
    assert {t.reason for t in store.trials(sid)} == {"stopped by user", "search stopped by user"}
