"""Commands users write to the database (pause/resume/stop) reach trial processes."""

from __future__ import annotations

import time

from quanta.controller import Controller, ControllerOptions
from quanta.db.store import Store
from quanta.devices import parse_devices
from quanta.executor.runtime.local import LocalRuntime
from quanta.spec import parse_spec

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


def test_a_stopped_search_resumes_from_its_checkpoints_and_asks_only_new_configurations(tmp_path):
    """Stopped by its user mid-trial, a search is resumed with two more trials: the trials its stop ended
    wrote a checkpoint as they stopped and go on from it (their steps after it are a later attempt's), the
    searcher asks only for new configurations (numbered after the first ones), and its time budget does
    not count the time it spent stopped."""
    store = Store(f"sqlite:///{tmp_path}/q.db")
    rt = LocalRuntime(parse_devices("cpu:2"), warm_modules=["tests.trainables"])
    ctl = Controller(store, rt, ControllerOptions(workdir=tmp_path))
    spec = {
        **SPEC,
        "space": {"lr": {"loguniform": [0.001, 0.1]}},
        "budget": {"max_trials": 2, "max_steps": 600, "max_seconds": 60},
        "config": {"report_every": 50, "sleep_s": 0.001},
    }
    try:
        sid = ctl.submit(parse_spec(spec))
        step_until(ctl, lambda: len(store.trials(sid)) == 2 and all(t.steps >= 150 for t in store.trials(sid)))
        store.command_search(sid, "stop", time.time())
        step_until(ctl, lambda: store.search(sid).status == "stopped")
        ctl.settle()  # the trials' checkpoints and exits are recorded
        stopped = {t.id: t for t in store.trials(sid)}
        assert {t.reason for t in stopped.values()} == {"search stopped by user"}
        assert all(t.checkpoint_step and t.checkpoint_step >= 150 for t in stopped.values())  # written at the stop
        time.sleep(1.0)  # ended for a while: not counted against its time budget
        resumed = store.resume_search(sid, time.time(), more_trials=2)
        assert resumed.progress.max_trials == 4 and store.search(sid).command == "resume"
        step_until(ctl, lambda: store.search(sid).status == "running")
        assert store.search(sid).idle_seconds >= 1.0 and store.search(sid).finished_at is None
        step_until(ctl, lambda: store.search(sid).status == "completed", timeout=90)
    finally:
        ctl.close()
    trials = store.trials(sid)
    assert [t.number for t in trials] == [0, 1, 2, 3]
    assert len({t.params["lr"] for t in trials}) == 4  # no configuration asked twice
    assert all(t.status == "completed" and t.steps == 600 for t in trials)
    for tid, before in stopped.items():
        reports = store.reports(tid)
        later = [r for r in reports if r.attempt > 0]
        assert later and min(r.step for r in later) >= before.checkpoint_step  # from its checkpoint on
