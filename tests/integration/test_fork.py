"""Forks and config changes through a real controller, LocalRuntime and trial processes: a fork with the
same values continues bit for bit from its parent's state; a fork's new values reach the optimizer it
restores; a running trial takes new values at a boundary; a trial with no process is forked from its
last checkpoint, also one its process wrote as it read its stop; a fork whose write fails fails alone,
the parent going on untouched; and after a restart the lineage is rebuilt from the store and an open
request is carried out."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quanta.controller import Controller, ControllerOptions
from quanta.db.launch import checkpoint_path
from quanta.db.store import Store
from quanta.devices import parse_devices
from quanta.executor.runtime.local import LocalRuntime
from quanta.spec import parse_spec

STEPS = 60


def spec(**over) -> dict:
    base = {
        "name": "fork",
        "trainable": "tests.trainables:linear",
        "space": {"lr": {"loguniform": [0.005, 0.05], "mutable": True}},
        "metric": {"name": "accuracy", "target": 2.0},  # never reached: trials run their budget
        "budget": {"max_trials": 1, "max_steps": STEPS},
        "parallelism": 1,
        "search": {"algorithm": "random"},
        "scheduler": {"policy": "fifo"},
        "config": {"report_every": 1, "sleep_s": 0.01},
    }
    return {**base, **over}


def start(tmp_path: Path, devices: str = "cpu:2") -> tuple[Store, LocalRuntime, Controller]:
    store = Store(f"sqlite:///{tmp_path}/q.db")
    rt = LocalRuntime(parse_devices(devices), warm_modules=["tests.trainables"])
    return store, rt, Controller(store, rt, ControllerOptions(workdir=tmp_path))


def step_until(ctl: Controller, cond, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not met in time"
        ctl.step(max_wait=0.05)


def first_trial(ctl: Controller, store: Store, sid: int) -> int:
    step_until(ctl, lambda: store.trials(sid) != [])
    return store.trials(sid)[0].id


def reports(store: Store, trial_id: int) -> dict[int, dict]:
    return {r.step: r.metrics for r in store.reports(trial_id)}


def reported_past(store: Store, trial_id: int, step: int) -> bool:
    return any(r.step >= step for r in store.reports(trial_id))


def test_a_fork_with_the_same_values_continues_bit_for_bit_from_its_parents_state(tmp_path):
    store, rt, ctl = start(tmp_path)
    try:
        sid = ctl.submit(parse_spec(spec()))
        parent = first_trial(ctl, store, sid)
        step_until(ctl, lambda: reported_past(store, parent, 15))
        fork_id = ctl.fork(parent)  # taken at the parent's next boundary, while it runs
        step_until(ctl, lambda: store.search(sid).status == "completed")
        ctl.settle()
    finally:
        ctl.close()
    (fork,) = store.fork_requests(("done",))
    assert fork.id == fork_id and fork.parent_id == parent
    child = store.trial(fork.child_id)
    k = child.fork_step
    assert child.parent_id == parent and 15 <= k < STEPS and child.status == "completed"
    mine, theirs = reports(store, child.id), reports(store, parent)
    assert sorted(mine) == list(range(k, STEPS)) and sorted(theirs) == list(range(STEPS))
    assert all(mine[s] == theirs[s] for s in mine)  # bit for bit: floats compared exactly
    assert store.trial(parent).status == "completed" and store.trial(parent).retries == 0
    lineage = store.lineage(sid)
    by_id = {t.id: t for t in lineage.trials}
    assert (by_id[child.id].parent_id, by_id[child.id].fork_step, by_id[parent].parent_id) == (parent, k, None)
    assert by_id[child.id].changes == [] and lineage.mutable == ["lr"]


def test_a_forks_values_reach_the_optimizer_it_restores_and_a_running_trial_takes_new_values(tmp_path):
    store, rt, ctl = start(tmp_path)
    sgd = spec(
        trainable="tests.trainables:mutable_sgd",
        space={"lr": {"loguniform": [0.01, 0.1], "mutable": True}, "momentum": {"uniform": [0.5, 0.9]}},
        mutable=["momentum"],
        metric={"name": "loss", "goal": "minimize", "target": -1.0},  # never reached
        config={"sleep_s": 0.01, "weight_decay": 0.001, "scale_lr": 0.5},
    )
    try:
        sid = ctl.submit(parse_spec(sgd))
        parent = first_trial(ctl, store, sid)
        step_until(ctl, lambda: reported_past(store, parent, 10))
        ctl.fork(parent, {"lr": 0.4, "momentum": 0.25}, steps=20)
        step_until(ctl, lambda: any(t.parent_id == parent and t.fork_step is not None for t in store.trials(sid)))
        ctl.reconfigure(parent, {"lr": 0.2})
        step_until(ctl, lambda: store.search(sid).status == "completed")
        ctl.settle()
    finally:
        ctl.close()
    child = next(t for t in store.trials(sid) if t.parent_id == parent)
    k = child.fork_step
    assert child.params == {"lr": 0.4, "momentum": 0.25} and child.steps == k + 20 and child.status == "completed"
    mine = reports(store, child.id)
    assert sorted(mine) == list(range(k, k + 20))
    # The optimizer restored from the parent's state computes with the fork's values: its rate as the
    # trainable derives it (scaled by 0.5), its momentum; the weight decay, not mutable, stays.
    for m in mine.values():
        assert (m["lr"], m["momentum"], m["weight_decay"], m["config_lr"]) == (pytest.approx(0.2), 0.25, 0.001, 0.4)
    assert {m["hook_calls"] for m in mine.values()} == {1}  # told once, at the restore
    (change,) = store.config_changes(child.id)
    assert (change.step, change.values, change.cause) == (k, {"lr": 0.4, "momentum": 0.25}, "fork")
    assert change.source_id == parent
    # The parent took lr 0.2 at a boundary while it ran: from that step on its optimizer uses 0.1 (scaled).
    (set_,) = store.config_changes(parent)
    assert set_.cause == "set" and set_.values == {"lr": 0.2} and store.trial(parent).params["lr"] == 0.2
    theirs = reports(store, parent)
    lr0 = theirs[0]["config_lr"]
    assert all(m["config_lr"] == lr0 and m["hook_calls"] == 0 for s, m in theirs.items() if s < set_.step)
    after = [(m["config_lr"], m["lr"], m["hook_calls"]) for s, m in theirs.items() if s >= set_.step]
    assert after and all(a == (0.2, pytest.approx(0.1), 1) for a in after)


def test_a_trial_without_a_process_is_forked_from_its_last_checkpoint(tmp_path):
    store, rt, ctl = start(tmp_path)
    two = spec(
        budget={"max_trials": 2, "max_steps": 40},
        parallelism=2,
        # A checkpoint at every boundary: the process writes one more at the boundary where it reads its
        # stop, after the controller has marked it stopped.
        scheduler={"policy": "fifo", "checkpoint_every_s": 0.001},
        config={"report_every": 1, "sleep_s": 0.01},
    )
    try:
        sid = ctl.submit(parse_spec(two))
        first = first_trial(ctl, store, sid)
        step_until(ctl, lambda: (store.trial(first).checkpoint_step or 0) >= 5)
        store.update_trial(first, command="stop")  # a user stops it: its process ends, its checkpoint stays
        ctl.tick()  # it takes the command: the trial is stopped, its process told so
        assert store.trial(first).status == "stopped"
        # Its process ends while the controller handles nothing: the fork is asked for with that last
        # checkpoint's event still unhandled, and must not take the file for the state the row names.
        end = time.monotonic() + 30
        while first in rt.residency():
            assert time.monotonic() < end, "the stopped trial's process did not end"
            time.sleep(0.01)
        ctl.fork(first)
        step_until(ctl, lambda: store.fork_requests(("done",)) != [])
        stopped = store.trial(first)
        step_until(ctl, lambda: [t.status for t in store.trials(sid) if t.parent_id == first] == ["completed"])
        store.update_search(sid, command="stop")
        step_until(ctl, lambda: store.search(sid).status == "stopped")
        ctl.settle()
    finally:
        ctl.close()
    child = next(t for t in store.trials(sid) if t.parent_id == first)
    assert child.fork_step == stopped.checkpoint_step <= stopped.steps  # its last checkpoint
    mine, theirs = reports(store, child.id), reports(store, first)
    # The parent checkpointed at its last boundary: the fork goes on from exactly there, nothing lost or
    # repeated (that a restored state continues bit for bit is the first test's and the runtime's).
    assert sorted(theirs) == list(range(stopped.checkpoint_step)) and sorted(mine) == list(range(child.fork_step, 40))


def test_a_fork_whose_write_fails_fails_alone_and_the_parent_goes_on_untouched(tmp_path):
    store, rt, ctl = start(tmp_path)
    try:
        sid = ctl.submit(parse_spec(spec()))
        parent = first_trial(ctl, store, sid)
        step_until(ctl, lambda: reported_past(store, parent, 10))
        # The new trial will be the next id: a folder in the way of its checkpoint makes the write fail.
        checkpoint_path(tmp_path, sid, parent + 1).mkdir(parents=True)
        ctl.fork(parent)
        step_until(ctl, lambda: store.search(sid).status == "completed")
        ctl.settle()
    finally:
        ctl.close()
    (fork,) = store.fork_requests(("failed",))
    assert fork.child_id == parent + 1 and f"trial-{parent + 1}.pt" in fork.error
    child = store.trial(fork.child_id)
    assert child.status == "failed" and child.fork_step is None and not store.reports(child.id)
    p = store.trial(parent)
    assert (p.status, p.retries, p.steps) == ("completed", 0, STEPS)
    assert sorted(reports(store, parent)) == list(range(STEPS))
    assert {r.attempt for r in store.reports(parent)} == {0}  # one process, never restarted


def test_after_a_restart_the_lineage_is_rebuilt_and_an_open_request_is_carried_out(tmp_path):
    store, rt, ctl = start(tmp_path)
    slow = spec(
        budget={"max_trials": 1, "max_steps": 40},
        config={"report_every": 1, "sleep_s": 0.02},
        scheduler={"policy": "fifo", "checkpoint_every_s": 0.1},
    )
    try:
        sid = ctl.submit(parse_spec(slow))
        parent = first_trial(ctl, store, sid)
        step_until(ctl, lambda: reported_past(store, parent, 5))
        ctl.fork(parent, {"lr": 0.02})
        step_until(ctl, lambda: store.fork_requests(("done",)) != [])
        child = store.fork_requests(("done",))[0].child_id
        step_until(ctl, lambda: (store.trial(child).checkpoint_step or 0) > store.trial(child).fork_step)
        pending = store.add_fork_request(child, {"lr": 0.03}, 5, time.time())  # a fork of the fork, not yet taken up
    finally:
        ctl.close()  # the controller ends: its trials' processes with it
    k = store.trial(child).fork_step
    store2 = Store(store.url)
    rt2 = LocalRuntime(parse_devices("cpu:2"), warm_modules=["tests.trainables"])
    ctl2 = Controller(store2, rt2, ControllerOptions(workdir=tmp_path))
    try:
        ctl2.load()
        held = ctl2.trial(child)
        assert (held.parent_id, held.fork_step, held.params) == (parent, k, {"lr": 0.02})
        assert [p[0] for p in held.curve][:k] == list(range(k))  # its parent's curve before the fork is its own
        step_until(ctl2, lambda: store2.search(sid).status == "completed")
        ctl2.settle()
    finally:
        ctl2.close()
    done = {f.id: f for f in store2.fork_requests(("done",))}
    grandchild = store2.trial(done[pending.id].child_id)
    assert grandchild.parent_id == child and grandchild.steps == grandchild.fork_step + 5
    assert grandchild.fork_step >= store2.trial(child).fork_step
    lineage = {t.id: t for t in store2.lineage(sid).trials}
    assert (lineage[child].parent_id, lineage[child].fork_step) == (parent, k)
    assert lineage[grandchild.id].parent_id == child
    assert [c.values for c in lineage[grandchild.id].changes] == [{"lr": 0.03}]
    assert {t.status for t in lineage.values()} == {"completed"}
