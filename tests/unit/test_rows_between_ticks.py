"""Between ticks, a controller on a runtime whose events live in its own process holds the rows of
several batches and stores them in one write: at most `FLUSH_EVERY_S` after the oldest came, at once
when a trial exits (its trackers hear of its end after its last reports), and at the end of the step.
A search's best and its target go in that write too. A runtime whose poll acknowledges the batch before
it (`acks_by_polling`, the Celery runtime's event cursor) has each batch stored before the next poll."""

from __future__ import annotations

import pytest

from quanta.controller import Controller, ControllerOptions
from quanta.controller import core as controller_core
from quanta.db.store import Store
from quanta.executor.actions import Exited, reported
from quanta.executor.policy import make_policy
from quanta.sim.runtime import JobSpec, SimRuntime
from quanta.spec import parse_spec

SPEC = {
    "name": "s",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"uniform": [0.001, 0.1]}},
    "metric": {"name": "acc", "goal": "maximize", "target": 0.9},
    "budget": {"max_trials": 1, "max_steps": 100},
    "parallelism": 1,
}


class _Acking(SimRuntime):
    acks_by_polling = True


def _controller(tmp_path, runtime: SimRuntime | None = None) -> tuple[Controller, Store, int, int]:
    store = Store(f"sqlite:///{tmp_path / 'q.db'}")
    runtime = runtime or SimRuntime(1, 1, max_per_device=1)
    ctl = Controller(store, runtime, ControllerOptions(policy=make_policy("fifo")))
    sid = ctl.submit(parse_spec(SPEC))
    ctl.book.sync(0.0)
    (trial,) = ctl.trials_of(sid)
    return ctl, store, sid, trial.id


def test_batches_between_ticks_are_stored_together_with_the_search_s_best(tmp_path):
    ctl, store, sid, tid = _controller(tmp_path)
    ctl._handle_between_ticks([reported(tid, 10, {"acc": 0.5}, 1.0)])
    ctl._handle_between_ticks([reported(tid, 20, {"acc": 0.95}, 2.0)])
    assert store.reports(tid) == [] and store.search(sid).best_metric is None  # held, not lost:
    assert ctl.search(sid).best == 0.95 and ctl.recorder.pending == 2 and ctl.recorder.buffered_for() is not None
    ctl.flush()  # as the end of the step does
    assert [r.step for r in store.reports(tid)] == [10, 20]
    row = store.search(sid)
    assert (row.best_metric, row.best_trial_id, row.reached) == (0.95, tid, True)
    assert store.trial(tid).best_metric == 0.95 and ctl.recorder.buffered_for() is None


def test_rows_held_longer_than_the_window_and_a_trial_s_exit_are_stored_at_once(tmp_path, monkeypatch):
    ctl, store, _sid, tid = _controller(tmp_path)
    ctl._handle_between_ticks([reported(tid, 10, {"acc": 0.5}, 1.0)])
    ctl._handle_between_ticks([Exited(tid, "completed", 10, None, 1.5)])
    assert [r.step for r in store.reports(tid)] == [10]
    monkeypatch.setattr(controller_core, "FLUSH_EVERY_S", 0.0)
    ctl._handle_between_ticks([reported(tid, 20, {"acc": 0.6}, 2.0)])
    assert [r.step for r in store.reports(tid)] == [10, 20]
    assert ctl._flush_due() == pytest.approx(float("inf"))  # nothing held


def test_a_runtime_whose_poll_acknowledges_has_each_batch_stored_first(tmp_path):
    ctl, store, _sid, tid = _controller(tmp_path, _Acking(1, 1, max_per_device=1))
    ctl._handle_between_ticks([reported(tid, 10, {"acc": 0.5}, 1.0)])
    assert [r.step for r in store.reports(tid)] == [10] and ctl.recorder.pending == 0


def test_users_requests_are_read_at_most_every_read_store_every_s_while_trials_run(tmp_path):
    """`read_store_every_s`: a stop written while a trial is alive is taken up at the first tick after
    the interval, not at every tick; an idle controller reads at every tick."""
    store = Store(f"sqlite:///{tmp_path / 'q.db'}")
    runtime = SimRuntime(1, 1, max_per_device=1, workload=lambda launch: JobSpec("toy", launch.max_steps, 1, rate=1.0))
    options = ControllerOptions(policy=make_policy("fifo"), read_store_every_s=1.0)
    ctl = Controller(store, runtime, options)
    sid = store.create_search("s", parse_spec(SPEC).model_dump(mode="json"), 0.0).id  # as the API does
    ctl.tick()  # idle: it reads, takes the search up and starts its trial
    assert ctl.search(sid) is not None and ctl.has_alive()
    store.update_search(sid, command="stop")
    runtime._now = 0.5
    ctl.tick()
    assert ctl.search(sid).status == "running"  # not read yet
    runtime._now = 1.0
    ctl.tick()
    assert ctl.search(sid).status == "stopped"
