"""Restarts lose nothing: kill -9 `quanta serve` in the middle of a search, check that its trial
processes exit by themselves, start it again, and check that the search completes with every trial
number once, the reports stored before the kill still there, and interrupted trials resumed from
their checkpoints (their report steps continue instead of starting again from 0).

And a restart stores nothing twice: a trial that has no checkpoint yet when its server is killed runs its
steps again from the start, as a new attempt: its retries count the restart, no report is stored twice
for one (trial, step, attempt), the steps it ran twice are stored once per attempt, and `/curves` shows
every step once, by the run the trial finished."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from quanta.db.store import Store
from tests.integration.live_server import alive, cmdline, descendants, parent, start_server

TEMPLATE = "quanta.executor.runtime.template"
MAX_STEPS = 120
SPEC = {
    "name": "restart",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"loguniform": [0.001, 0.05]}},
    "metric": {"name": "accuracy", "goal": "maximize", "target": 2.0},  # never reached: runs its budget
    "budget": {"max_trials": 4, "max_steps": MAX_STEPS},
    "parallelism": 2,
    "scheduler": {"policy": "timeslice", "quantum_s": 1.0, "checkpoint_every_s": 0.5, "checkpoint_every_quanta": 1},
    "config": {"sleep_s": 0.03, "report_every": 5},  # 3.6 s a trial: two are killed mid-run, with checkpoints
}
NO_CHECKPOINT_STEPS = 80
NO_CHECKPOINT = {
    **SPEC,
    "name": "no-checkpoint",
    "budget": {"max_trials": 1, "max_steps": NO_CHECKPOINT_STEPS},
    "parallelism": 1,
    "search": {"algorithm": "random"},
    # fifo never parks a trial, and a checkpoint is due only after an hour: the trial has none when killed
    "scheduler": {"policy": "fifo", "checkpoint_every_s": 3600.0},
    "config": {"sleep_s": 0.04, "report_every": 5},
}


@pytest.mark.slow
def test_kill_9_and_restart_continue_the_search(tmp_path):
    db_url = f"sqlite:///{tmp_path / 'quanta.db'}"
    server = start_server(tmp_path, db_url=db_url, name="first")
    try:
        server.wait_ready()
        r = server.post("/api/v1/searches", json=SPEC)
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        store = Store(db_url)

        # Wait until two trials are running with reports and a checkpoint past step 10.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            running = [t for t in store.trials(sid) if t.status == "running" and (t.checkpoint_step or 0) >= 10]
            if len(running) >= 2 and all(store.reports(t.id) for t in running):
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"no checkpointed trials in time:\n{server.log()}")
        procs = descendants(server.proc.pid)
        template = [p for p in procs if parent(p) == server.proc.pid and TEMPLATE in cmdline(p)]
        assert len(template) == 1, [cmdline(p) for p in procs]
        trial_procs = [p for p in procs if parent(p) == template[0]]  # forked from the template
        assert len(trial_procs) >= 2, [cmdline(p) for p in procs]

        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(10)
        killed_at = time.monotonic()
        before = {t.id: t for t in store.trials(sid)}
        reports_before = {r.id: (r.trial_id, r.step) for r in store.search_reports(sid)}
        interrupted = {t.id: t.checkpoint_step for t in before.values() if t.status == "running"}
        assert len(interrupted) >= 2 and all(c and c >= 10 for c in interrupted.values())

        # Nothing keeps burning a device: the template and the trials notice and exit on their own.
        while any(alive(p) for p in procs) and time.monotonic() - killed_at < 10:
            time.sleep(0.1)
        orphans = [(p, cmdline(p)) for p in procs if alive(p)]
        assert not orphans, f"still running {time.monotonic() - killed_at:.1f} s after kill -9: {orphans}"
        exit_s = time.monotonic() - killed_at
    finally:
        server.stop()

    server = start_server(tmp_path, db_url=db_url, name="second")
    try:
        server.wait_ready()
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            s = server.get(f"/api/v1/searches/{sid}").json()
            if s["status"] not in ("queued", "running"):
                break
            time.sleep(0.5)
        assert s["status"] == "completed", (s, server.log())
    finally:
        server.stop()

    trials = store.trials(sid)
    numbers = [t.number for t in trials]
    assert sorted(numbers) == list(range(SPEC["budget"]["max_trials"])), numbers  # none lost, none twice
    assert s["progress"]["trials_created"] == SPEC["budget"]["max_trials"]
    assert all(t.status == "completed" for t in trials), [(t.number, t.status, t.error) for t in trials]
    reports_after = {r.id: (r.trial_id, r.step) for r in store.search_reports(sid)}
    assert reports_before.items() <= reports_after.items()  # reports stored before the kill remain
    for tid, checkpoint in interrupted.items():
        new_steps = [step for rid, (t, step) in sorted(reports_after.items()) if t == tid and rid not in reports_before]
        assert new_steps, f"trial {tid} reported nothing after the restart"
        assert min(new_steps) >= checkpoint > 0, (tid, checkpoint, new_steps[:5])  # resumed, not from 0
        assert max(new_steps) == MAX_STEPS - 1
        assert store.trial(tid).steps >= MAX_STEPS - 1
    print(f"trial processes exited {exit_s:.1f} s after kill -9")


@pytest.mark.slow
def test_a_trial_run_again_after_a_kill_9_stores_each_report_once_and_curves_show_each_step_once(tmp_path):
    db_url = f"sqlite:///{tmp_path / 'quanta.db'}"
    server = start_server(tmp_path, db_url=db_url, name="first", devices="cpu:1")
    try:
        server.wait_ready()
        r = server.post("/api/v1/searches", json=NO_CHECKPOINT)
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
    assert steps[0] == 0 and steps[-1] == NO_CHECKPOINT_STEPS - 1
    assert store.trial(trial.id).retries == 1  # the restart counts
    rows = store.search_reports(sid)
    twice = [key for key, n in Counter((r.trial_id, r.step, r.attempt) for r in rows).items() if n > 1]
    assert not twice, f"reports stored twice: {twice}"
    by_step = Counter(r.step for r in rows)
    rerun = sorted(step for step, n in by_step.items() if n == 2)
    assert rerun and rerun[0] == 0 and rerun[-1] >= before - 5, (before, rerun)  # run again from the start
    assert {r.attempt for r in rows if r.step == 0} == {0, 1} and max(by_step.values()) == 2
