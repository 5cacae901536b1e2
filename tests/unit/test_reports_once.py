"""A report is stored once per (trial, step, attempt), by both stores: written again it merges into its
row (a replay, a batch delivered again, a second report at one step), a step run again by a later attempt
is a row of its own, and readers and the controller's curves show each step once, by its latest attempt.
A restart that loses a trial's process counts a retry; each process of a trial claims an attempt of its own,
higher than every earlier one's."""

from __future__ import annotations

import pytest

from quanta.controller import Controller, ControllerOptions
from quanta.db.memory import MemoryStore
from quanta.db.models import ReportRow
from quanta.db.reports import latest_per_step, merge_report
from quanta.db.store import Store
from quanta.executor.actions import reported
from quanta.executor.policy import make_policy
from quanta.sim.runtime import SimRuntime
from quanta.spec import parse_spec
from quanta.status import TrialStatus

SPEC = {
    "name": "s",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"uniform": [0.001, 0.1]}},
    "metric": {"name": "acc", "goal": "maximize"},
    "budget": {"max_trials": 1, "max_steps": 100},
    "parallelism": 1,
}


@pytest.fixture(params=["sql", "memory"])
def store(request, tmp_path):
    if request.param == "sql":
        return Store(f"sqlite:///{tmp_path / 'reports.db'}")
    return MemoryStore()


def _row(tid: int, sid: int, step: int, at: float, attempt: int = 0, **metrics: float) -> ReportRow:
    return ReportRow(
        trial_id=tid, search_id=sid, step=step, attempt=attempt, at=at, metrics=metrics, objective=metrics.get("acc")
    )


def test_a_report_written_again_merges_into_its_row_and_a_later_attempt_is_a_row_of_its_own(store):
    s = store.create_search("s", {}, 0.0)
    t = store.add_trial(s.id, 0, {}, {}, 0.0)
    store.add_rows([_row(t.id, s.id, 10, 1.0, acc=0.5), _row(t.id, s.id, 20, 2.0, acc=0.6)])
    store.add_rows([_row(t.id, s.id, 10, 1.0, acc=0.5)])  # delivered again
    store.add_rows([_row(t.id, s.id, 20, 2.5, loss=0.1), _row(t.id, s.id, 20, 2.6, acc=0.65)])  # a 2nd and 3rd at 20
    store.add_rows([_row(t.id, s.id, 10, 3.0, attempt=1, acc=0.55)])  # step 10 run again after a restart
    rows = sorted(store.reports(t.id), key=lambda r: (r.step, r.attempt))
    assert [(r.step, r.attempt, r.at, r.metrics, r.objective) for r in rows] == [
        (10, 0, 1.0, {"acc": 0.5}, 0.5),
        (10, 1, 3.0, {"acc": 0.55}, 0.55),
        (20, 0, 2.0, {"acc": 0.65, "loss": 0.1}, 0.65),  # first time kept, later values win
    ]
    assert len({r.id for r in rows}) == 3
    if isinstance(store, Store):  # the API's curves: each step once, by its latest attempt
        assert store.curves(s.id, 100).trials[str(t.id)] == [(10, 0.55), (20, 0.65)]


def test_merging_keeps_the_first_time_and_clears_a_flag_a_finite_value_replaces():
    row = ReportRow(trial_id=1, search_id=1, step=3, at=1.0, metrics={"loss": None}, non_finite={"loss": "nan"})
    merge_report(row, ReportRow(trial_id=1, search_id=1, step=3, at=2.0, metrics={"loss": 0.5, "acc": 0.9}))
    assert (row.at, row.metrics, row.non_finite, row.objective) == (1.0, {"loss": 0.5, "acc": 0.9}, None, None)


def test_each_step_is_shown_by_its_latest_attempt_in_step_order():
    points = [(0, 0, "a"), (5, 0, "b"), (10, 0, "c"), (0, 1, "A"), (5, 1, "B"), (5, 0, "late replay of b")]
    assert latest_per_step(points) == [(0, "A"), (5, "B"), (10, "c")]


def _controller(store: MemoryStore | Store) -> tuple[Controller, int]:
    ctl = Controller(store, SimRuntime(1, 1, max_per_device=1), ControllerOptions(policy=make_policy("fifo")))
    sid = ctl.submit(parse_spec(SPEC))
    ctl.book.sync(0.0)
    (trial,) = ctl.trials_of(sid)
    return ctl, trial.id


def test_a_step_run_again_replaces_its_point_in_the_trial_s_curve_and_is_stored_per_attempt():
    store = MemoryStore()
    ctl, tid = _controller(store)
    ctl.recorder.handle([reported(tid, s, {"acc": 0.1 * s}, float(s)) for s in (0, 1, 2, 3)])
    ctl.recorder.handle([reported(tid, s, {"acc": 0.2 * s}, 10.0 + s, attempt=1) for s in (0, 1)])
    assert ctl.trial(tid).curve == [(0, 0.0), (1, 0.2), (2, 0.2), (3, pytest.approx(0.3))]
    assert sorted((r.step, r.attempt) for r in store.reports(tid)) == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (3, 0)]


def test_a_batch_handled_again_by_a_restarted_controller_stores_nothing_twice(tmp_path):
    """A runtime that delivers events from outside the process (node events) may hand a restarted
    controller a batch it had stored before it died, not marked as replays: the database keeps one row."""
    store = Store(f"sqlite:///{tmp_path / 'q.db'}")
    ctl, tid = _controller(store)
    batch = [reported(tid, s, {"acc": 0.1 * s}, float(s)) for s in (0, 5)]
    ctl.recorder.handle(batch)
    again = Controller(store, SimRuntime(1, 1, max_per_device=1), ControllerOptions(policy=make_policy("fifo")))
    again.load()
    again.recorder.handle(batch)
    assert sorted((r.step, r.attempt) for r in store.reports(tid)) == [(0, 0), (5, 0)]


def test_a_trial_whose_process_was_lost_with_its_controller_counts_a_retry():
    store = MemoryStore()
    ctl, tid = _controller(store)
    store.update_trial(tid, status=TrialStatus.RUNNING)
    ctl.recorder.handle([reported(tid, s, {"acc": 0.1 * s}, float(s)) for s in (0, 5)])
    store.add_rows([_row(tid, ctl.trial(tid).search_id, 0, 9.0, attempt=1, acc=0.3)])  # re-run, then lost again
    again = Controller(store, SimRuntime(1, 1, max_per_device=1), ControllerOptions(policy=make_policy("fifo")))
    again.load()  # the simulated runtime holds no process of it: it was lost
    trial = again.trial(tid)
    assert (trial.status, trial.retries, store.trial(tid).retries) == (TrialStatus.QUEUED, 1, 1)
    assert trial.curve == [(0, 0.3), (5, 0.5)]  # each step once, by its latest attempt


def test_each_process_of_a_trial_claims_an_attempt_of_its_own_and_a_first_process_starts_again_at_0(tmp_path):
    from quanta.executor.runtime.child import claim_attempt

    ckpt = str(tmp_path / "search-1" / "checkpoints" / "trial-3.pt")
    assert [claim_attempt(ckpt, first=i == 0) for i in range(4)] == [0, 1, 2, 3]
    assert claim_attempt(ckpt, first=True) == 0  # another search's trial at the same paths: its own count
    (tmp_path / "search-1" / "checkpoints" / "trial-3.pt.attempt").write_text("torn")
    assert claim_attempt(ckpt, first=False) > 10**12  # unreadable: the time in ms, above any count
    assert claim_attempt(None, first=False) > 10**12
