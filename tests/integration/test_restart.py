"""Restarts lose nothing: kill -9 `quanta serve` in the middle of a search, check that its trial
processes exit by themselves, start it again, and check that the search completes with every trial
number once, the reports stored before the kill still there, and interrupted trials resumed from
their checkpoints (their report steps continue instead of starting again from 0)."""

from __future__ import annotations

import signal
import time

import pytest

from app.db.store import Store
from tests.integration.live_server import alive, cmdline, descendants, parent, start_server

TEMPLATE = "app.executor.runtime.template"
MAX_STEPS = 120
SPEC = {
    "name": "restart",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"loguniform": [0.001, 0.05]}},
    "metric": {"name": "accuracy", "goal": "maximize", "target": 2.0},  # never reached: runs its budget
    "budget": {"max_trials": 4, "max_steps": MAX_STEPS},
    "parallelism": 2,
    "scheduler": {"policy": "timeslice", "quantum_s": 1.0, "checkpoint_every_s": 0.5, "checkpoint_every_quanta": 1},
    "config": {"sleep_s": 0.06, "report_every": 5},
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
