"""Which trials importance and the landscape learn from (`quanta.db.analysis.observed`/`observations`), on
trial rows built by hand: completed ones; stopped ones (their search ended, or a user stopped them) at
their last value with their progress; killed ones only when they had run all their steps; nothing else."""

from __future__ import annotations

import pytest

from quanta.db.analysis import importance_out, observations, observed
from quanta.db.memory import MemoryStore
from quanta.db.models import TrialRow
from quanta.spec import parse_spec
from quanta.status import TrialStatus

MAX_STEPS = 200


def row(status: str, metric: float | None, steps: int, reason: str | None = None) -> TrialRow:
    return TrialRow(
        id=1, search_id=1, number=0, params={"lr": 0.01}, vals={}, status=status, metric=metric, steps=steps,
        reason=reason, created_at=0.0,
    )  # fmt: skip


def test_completed_counts_at_full_progress():
    o = observed(row(TrialStatus.COMPLETED, 0.9, MAX_STEPS), MAX_STEPS)
    assert o is not None and (o.value, o.progress, dict(o.params)) == (0.9, 1.0, {"lr": 0.01})
    # A trainable whose own loop ended before max_steps completed all the same: its value is final.
    o = observed(row(TrialStatus.COMPLETED, 0.8, 50), MAX_STEPS)
    assert o is not None and o.progress == 1.0


@pytest.mark.parametrize("reason", ["target reached", "time budget spent", "stopped by user"])
def test_stopped_counts_at_its_last_value_and_progress(reason):
    o = observed(row(TrialStatus.STOPPED, 0.7, 50, reason), MAX_STEPS)
    assert o is not None and (o.value, o.progress) == (0.7, 0.25)
    full = observed(row(TrialStatus.STOPPED, 0.7, MAX_STEPS + 3, reason), MAX_STEPS)
    assert full is not None and full.progress == 1.0  # never past 1


def test_killed_counts_only_after_its_full_steps():
    verdict = "P(reach target) 0.01 < 0.05"
    assert observed(row(TrialStatus.KILLED, 0.3, 40, verdict), MAX_STEPS) is None  # early and selected as bad
    o = observed(row(TrialStatus.KILLED, 0.6, MAX_STEPS, verdict), MAX_STEPS)
    assert o is not None and (o.value, o.progress) == (0.6, 1.0)


@pytest.mark.parametrize("status", [TrialStatus.FAILED, TrialStatus.QUEUED, TrialStatus.RUNNING])
def test_failed_and_unfinished_trials_do_not_count(status):
    assert observed(row(status, 0.9, 100), MAX_STEPS) is None


def test_a_trial_without_a_report_does_not_count():
    for status in (TrialStatus.COMPLETED, TrialStatus.STOPPED, TrialStatus.KILLED):
        assert observed(row(status, None, MAX_STEPS), MAX_STEPS) is None


def test_a_search_whose_search_ended_counts_its_stopped_trials():
    """Eight completed trials, three stopped when the target was reached, two killed early, one killed at
    its full steps, one failed: importance is fitted on the 12 that carry information."""
    store = MemoryStore()
    spec = parse_spec(
        {
            "name": "x",
            "trainable": "tests.trainables:linear",
            "space": {"lr": {"loguniform": [1e-3, 1e-1]}, "hidden": {"choice": [8, 16]}},
            "metric": {"name": "accuracy"},
            "budget": {"max_steps": MAX_STEPS},
        }
    )
    sid = store.create_search("x", spec.model_dump(mode="json"), 0.0).id
    kinds = (
        [(TrialStatus.COMPLETED, MAX_STEPS, None)] * 8
        + [(TrialStatus.STOPPED, 60, "target reached")] * 3
        + [(TrialStatus.KILLED, 20, "P(reach target) 0.01 < 0.05")] * 2
        + [(TrialStatus.KILLED, MAX_STEPS, "P(reach target) 0.01 < 0.05")]
        + [(TrialStatus.FAILED, 30, None)]
    )
    for n, (status, steps, reason) in enumerate(kinds):
        lr = 0.001 * 100 ** (n / (len(kinds) - 1))
        t = store.add_trial(sid, n, {"lr": lr, "hidden": (8, 16)[n % 2]}, {}, float(n))
        store.update_trial(t.id, status=status, steps=steps, reason=reason, metric=1.0 - abs(lr - 0.03) * 10)
    found = observations(store, sid)
    assert found is not None
    got_spec, trials = found
    assert got_spec == spec and len(trials) == 12
    assert sorted(t.progress for t in trials) == [0.3] * 3 + [1.0] * 9
    out = importance_out(store, sid)
    assert out is not None and out.trials_used == 12 and out.trials_partial == 3
    assert observations(store, 999) is None


def test_a_multi_objective_search_has_an_importance_per_objective():
    """Accuracy depends on lr only, latency on the width only: each objective's importance says so, the
    second read from the trials' reports."""
    from quanta.db.models import ReportRow

    store = MemoryStore()
    spec = parse_spec(
        {
            "name": "mo",
            "trainable": "tests.trainables:linear",
            "space": {"lr": {"loguniform": [1e-3, 1e-1]}, "width": {"choice": [8, 16, 32]}},
            "metrics": [{"name": "acc"}, {"name": "lat", "goal": "minimize"}],
            "budget": {"max_steps": MAX_STEPS},
        }
    )
    sid = store.create_search("mo", spec.model_dump(mode="json"), 0.0).id
    rows = []
    for n in range(24):
        lr, width = 0.001 * 100 ** ((n * 7 % 24) / 23), (8, 16, 32)[n % 3]
        acc, lat = 1.0 - abs(lr - 0.03) * 10, float(width)
        t = store.add_trial(sid, n, {"lr": lr, "width": width}, {}, float(n))
        store.update_trial(t.id, status=TrialStatus.COMPLETED, steps=MAX_STEPS, metric=acc)
        rows.append(
            ReportRow(trial_id=t.id, search_id=sid, step=MAX_STEPS, at=float(n), metrics={"acc": acc, "lat": lat})
        )
    store.add_rows(rows)
    first = importance_out(store, sid)
    by_acc = importance_out(store, sid, objective="acc")
    by_lat = importance_out(store, sid, objective="lat")
    assert first is not None and by_acc is not None and by_lat is not None
    assert first == by_acc and first.objectives == ["acc", "lat"]
    assert (by_acc.metric, by_acc.goal, by_acc.params[0].name) == ("acc", "maximize", "lr")
    assert (by_lat.metric, by_lat.goal, by_lat.params[0].name) == ("lat", "minimize", "width")
    assert by_lat.trials_used == 24
    with pytest.raises(KeyError):
        importance_out(store, sid, objective="loss")
