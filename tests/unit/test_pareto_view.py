"""A search's trade-offs read from its stored reports (`quanta.db.pareto_view`), on a MemoryStore: the
front, each point's kind, the counts, the reference (given or derived), the hypervolume over time, a
restarted step read by its latest attempt, bounded values carried forward, and a single-objective search."""

from __future__ import annotations

import math

import pytest

from quanta.db.memory import MemoryStore
from quanta.db.models import ReportRow
from quanta.db.pareto_view import pareto_out, trial_outcomes
from quanta.spec import parse_spec

SPACE = {"lr": {"loguniform": [1e-4, 1e-1]}}
T0 = 100.0


def _spec(**extra):
    return parse_spec({"name": "mo", "trainable": "tests.trainables:linear", "space": SPACE, **extra})


MO = dict(
    metrics=[{"name": "acc", "goal": "maximize"}, {"name": "lat", "goal": "minimize"}],
    constraints=[{"name": "params_m", "max": 5.0}],
)


def _report(tid, sid, step, at, attempt=0, **metrics):
    flags = {k: "nan" for k, v in metrics.items() if v is not None and math.isnan(v)}
    values = {k: (None if v is not None and math.isnan(v) else v) for k, v in metrics.items()}
    return ReportRow(
        trial_id=tid, search_id=sid, step=step, at=at, attempt=attempt, metrics=values, non_finite=flags or None
    )


def _search(spec):
    """Six trials: a feasible one improving (0: dominated then on the front), an infeasible one that would
    dominate (1), a feasible one on the front (2), a non-finite one (3), one without reports (4), and one
    whose step 10 was run again after a restart (5: its first attempt's point is replaced by the second)."""
    store = MemoryStore()
    sid = store.create_search("mo", spec.model_dump(mode="json"), T0 - 50).id
    store.update_search(sid, status="running", started_at=T0)
    ids = [store.add_trial(sid, n, {"lr": 0.01 * (n + 1)}, {}, T0).id for n in range(6)]
    a, b, c, d, _, f = ids
    store.add_rows(
        [
            _report(a, sid, 0, T0 + 1, params_m=3.0),  # no objective: no point, but its bound carries forward
            _report(a, sid, 10, T0 + 10, acc=0.8, lat=4.0),
            _report(f, sid, 10, T0 + 11, acc=0.99, lat=0.5, params_m=1.0),  # replaced by attempt 1
            _report(b, sid, 10, T0 + 11.5, acc=0.95, lat=2.0, params_m=8.0),
            _report(c, sid, 10, T0 + 12, acc=0.7, lat=1.0, params_m=1.0),
            _report(a, sid, 20, T0 + 20, acc=0.9, lat=4.0),
            _report(f, sid, 10, T0 + 21, attempt=1, acc=0.5, lat=5.0, params_m=1.0),
            _report(d, sid, 10, T0 + 22, acc=float("nan"), lat=3.0, params_m=2.0),
        ]
    )
    return store, sid, ids


def test_front_kinds_counts_and_hypervolume_over_time():
    store, sid, (a, b, c, d, e, f) = _search(_spec(**MO, reference={"acc": 0.0, "lat": 10.0}))
    out = pareto_out(store, sid)
    assert out is not None and out.pareto and out.note is None
    assert [(o.name, o.goal) for o in out.objectives] == [("acc", "maximize"), ("lat", "minimize")]
    assert [(c_.name, c_.min, c_.max) for c_ in out.constraints] == [("params_m", None, 5.0)]
    assert out.reference == {"acc": 0.0, "lat": 10.0} and not out.reference_derived

    # The front in the user's units, by the first objective (best accuracy first), with trial and config.
    assert [(p.trial_id, p.number, p.step, p.values) for p in out.front] == [
        (a, 0, 20, {"acc": 0.9, "lat": 4.0}),
        (c, 2, 10, {"acc": 0.7, "lat": 1.0}),
    ]
    assert out.front[0].params == {"lr": 0.01} and out.front[0].seconds == 20.0
    assert out.front[0].bounded == {"params_m": 3.0}  # reported at step 0, carried forward

    kinds = {(p.trial_id, p.step): p.kind for p in out.points}
    assert kinds == {
        (a, 10): "dominated",
        (a, 20): "front",
        (b, 10): "infeasible",
        (c, 10): "front",
        (d, 10): "non_finite",
        (f, 10): "dominated",  # attempt 1's (0.5, 5), not attempt 0's (0.99, 0.5)
    }
    nan_point = next(p for p in out.points if p.trial_id == d)
    assert nan_point.values == [None, 3.0] and nan_point.violation == 0.0
    assert next(p for p in out.points if p.trial_id == b).violation == pytest.approx(3.0 / 5.0)
    assert out.points_total == 6
    assert out.counts.model_dump() == {"front": 2, "dominated": 2, "infeasible": 1, "non_finite": 1, "no_points": 0}
    assert out.trials.model_dump() == {"front": 2, "dominated": 1, "infeasible": 1, "non_finite": 1, "no_points": 1}

    # Volume up to (acc 0, lat 10): boxes 0.9 x 6 and 0.7 x 9, overlapping in 0.7 x 6.
    assert out.hypervolume == pytest.approx(7.5)
    assert [t for t, _ in out.hypervolume_curve] == [10.0, 12.0, 20.0]
    assert [v for _, v in out.hypervolume_curve] == pytest.approx([4.8, 6.9, 7.5])


def test_a_derived_reference_is_flagged_and_points_are_thinned_keeping_the_front():
    store, sid, (a, b, c, d, e, f) = _search(_spec(**MO))
    out = pareto_out(store, sid, max_points=4)
    assert out is not None and out.reference_derived
    # The worst finite value of each objective, pushed out by a tenth of its range.
    assert out.reference == pytest.approx({"acc": 0.5 - 0.045, "lat": 5.4})
    assert out.hypervolume is not None and out.hypervolume > 0
    assert out.points_total == 6 and len(out.points) == 5  # 2 front + each trial's last point (a's is on the front)
    assert {(p.trial_id, p.kind) for p in out.points} >= {(a, "front"), (c, "front")}
    assert len(out.front) == 2  # the front is over every point, whatever is sent
    none = pareto_out(store, sid, max_points=0)
    assert none is not None and none.points == [] and none.points_total == 6


def test_a_single_objective_search_answers_with_its_best_point():
    spec = _spec(metric={"name": "acc", "goal": "maximize"})
    store, sid, (a, b, c, d, e, f) = _search(spec)
    out = pareto_out(store, sid)
    assert out is not None and not out.pareto and out.constraints == []
    assert [(p.trial_id, p.values) for p in out.front] == [(b, {"acc": 0.95})]  # no constraint here
    assert out.counts.non_finite == 1 and out.counts.infeasible == 0
    assert out.reference_derived and out.hypervolume_curve[-1][1] == pytest.approx(out.hypervolume)


def test_no_points_yet_and_no_such_search():
    store = MemoryStore()
    sid = store.create_search("mo", _spec(**MO).model_dump(mode="json"), T0).id
    out = pareto_out(store, sid)
    assert out is not None and out.front == [] and out.reference is None and out.hypervolume is None
    assert out.note == "no trial has reported every objective yet"
    assert pareto_out(store, sid + 1) is None


def test_trial_outcomes_are_each_trials_last_point():
    spec = _spec(**MO)
    store, sid, (a, b, c, d, e, f) = _search(spec)
    got = trial_outcomes(spec, store.search_reports(sid))
    assert set(got) == {a, b, c, d, f}  # e never reported
    assert got[a].values == {"acc": 0.9, "lat": 4.0} and got[a].violation == 0.0 and got[a].on_front
    assert got[b].violation == pytest.approx(0.6) and not got[b].on_front
    assert got[d].values == {"acc": None, "lat": 3.0} and not got[d].on_front
    assert got[f].values == {"acc": 0.5, "lat": 5.0}


def test_objectives_reported_apart_make_a_point_once_each_is_known():
    """As the controller reads reports: values are carried forward, so accuracy at step 10 and latency at
    step 12 make a point at step 12 (and at every later report of either)."""
    spec = _spec(**MO)
    store = MemoryStore()
    sid = store.create_search("mo", spec.model_dump(mode="json"), T0).id
    tid = store.add_trial(sid, 0, {"lr": 0.01}, {}, T0).id
    store.add_rows(
        [
            _report(tid, sid, 0, T0 + 1, params_m=1.0),
            _report(tid, sid, 10, T0 + 10, acc=0.8),
            _report(tid, sid, 12, T0 + 12, lat=3.0),
            _report(tid, sid, 20, T0 + 20, acc=0.85),
        ]
    )
    out = pareto_out(store, sid)
    assert out is not None
    assert [(p.step, p.values) for p in out.points] == [(12, [0.8, 3.0]), (20, [0.85, 3.0])]
    assert [(p.step, p.bounded) for p in out.front] == [(20, {"params_m": 1.0})]
