"""A restart stores nothing twice: kill -9 `quanta serve` while a trial that has no checkpoint yet is
running, start it again on the same database, and let the search finish. The trial runs its steps again
from the start (nothing to resume from), as a new attempt: its retries count the restart, no report is
stored twice for one (trial, step, attempt), the steps it ran twice are stored once per attempt, and
`/curves` shows every step once, by the run the trial finished."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from app.db.store import Store
from tests.integration.live_server import alive, descendants, start_server

MAX_STEPS = 80
SPEC = {
    "name": "no-checkpoint",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"loguniform": [0.001, 0.05]}},
    "metric": {"name": "accuracy", "goal": "maximize", "target": 2.0},  # never reached: runs its budget
    "budget": {"max_trials": 1, "max_steps": MAX_STEPS},
    "parallelism": 1,
    "search": {"algorithm": "random"},
    # fifo never parks a trial, and a checkpoint is due only after an hour: the trial has none when killed
    "scheduler": {"policy": "fifo", "checkpoint_every_s": 3600.0},
    "config": {"sleep_s": 0.04, "report_every": 5},
}


@pytest.mark.slow
def test_a_trial_run_again_after_a_kill_9_stores_each_report_once_and_curves_show_each_step_once(tmp_path):
    db_url = f"sqlite:///{tmp_path / 'quanta.db'}"
    server = start_server(tmp_path, db_url=db_url, name="first", devices="cpu:1")
    try:
        server.wait_ready()
        r = server.post("/api/v1/searches", json=SPEC)
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        store = Store(db_url)
        deadline = time.monotonic() + 90
        while max((r.step for r in store.search_reports(sid)), default=-1) < 20:
            assert time.monotonic() < deadline, f"no reports past step 20 in time:\n{server.log()}"
            time.sleep(0.1)
        procs = descendants(server.proc.pid)
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(10)
        (trial,) = store.trials(sid)
        assert trial.checkpoint_step is None and trial.retries == 0
        before = max(r.step for r in store.search_reports(sid))
        deadline = time.monotonic() + 10
        while any(alive(p) for p in procs):
            assert time.monotonic() < deadline, "the trial outlived its server"
            time.sleep(0.05)
    finally:
        server.stop()

    server = start_server(tmp_path, db_url=db_url, name="second", devices="cpu:1")
    try:
        server.wait_ready()
        deadline = time.monotonic() + 120
        while (s := server.get(f"/api/v1/searches/{sid}").json())["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, f"the search did not finish:\n{server.log()}"
            time.sleep(0.3)
        assert s["status"] == "completed", s
        curves = server.get(f"/api/v1/searches/{sid}/curves", params={"max_points": 1000}).json()
    finally:
        server.stop()

    steps = [step for step, _ in curves["trials"][str(trial.id)]]
    assert steps == sorted(set(steps)), f"/curves shows a step twice: {[s for s, n in Counter(steps).items() if n > 1]}"
    assert steps[0] == 0 and steps[-1] == MAX_STEPS - 1
    assert store.trial(trial.id).retries == 1  # the restart counts
    rows = store.search_reports(sid)
    twice = [key for key, n in Counter((r.trial_id, r.step, r.attempt) for r in rows).items() if n > 1]
    assert not twice, f"reports stored twice: {twice}"
    by_step = Counter(r.step for r in rows)
    rerun = sorted(step for step, n in by_step.items() if n == 2)
    assert rerun and rerun[0] == 0 and rerun[-1] >= before - 5, (before, rerun)  # run again from the start
    assert {r.attempt for r in rows if r.step == 0} == {0, 1} and max(by_step.values()) == 2
