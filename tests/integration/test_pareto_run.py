"""Searches with several objectives or constraints through the real `quanta run` (a subprocess, real
training of a tiny model): a point target reached exits 0 with a feasible best; a trial that never reports
an objective ends failed naming it while the search goes on; and after a restart the controller rebuilds
each trial's points, the front and the searcher's lessons from the stored reports alone."""

from __future__ import annotations

import json
import math

from quanta.controller import Controller
from quanta.db.reports import latest_per_step
from quanta.db.store import Store
from quanta.search.pareto import front, trial_points
from quanta.sim.runtime import SimRuntime
from quanta.spec import spec_from_stored
from tests.integration.test_quanta_run import TINY, quanta_run

MO = {
    **TINY,
    "name": "pareto",
    "metric": None,
    "metrics": [{"name": "accuracy", "goal": "maximize"}, {"name": "loss", "goal": "minimize"}],
    "constraints": [{"name": "accuracy", "min": 0.55}],
    "target": {"accuracy": 0.93, "loss": 0.3},
    "budget": {"max_trials": 8, "max_steps": 300, "max_seconds": 120},
    "scheduler": {"policy": "asha", "min_steps": 25},
    "search": {"algorithm": "bohb", "n_startup": 4},
}
del MO["metric"]


def test_a_point_target_is_reached_by_a_feasible_report_and_exits_0(tmp_path):
    code, output, out = quanta_run(tmp_path, MO)
    assert code == 0, output
    result = json.loads(out.read_text())
    assert result["reached"] and result["status"] == "completed"
    assert result["target"] == "accuracy >= 0.93, loss <= 0.3, feasible"
    assert "accuracy >= 0.93, loss <= 0.3, feasible: reached after" in output
    assert result["best_metric"] >= 0.55  # the best is a feasible report's
    # the report that reached it is at least that good in both objectives
    store = Store(f"sqlite:///{tmp_path}/q.db")
    reports = store.search_reports(result["search_id"])
    assert any(r.metrics["accuracy"] >= 0.93 and r.metrics["loss"] <= 0.3 for r in reports)


def test_a_trial_that_never_reports_an_objective_fails_naming_it_and_the_search_stops_as_failed(tmp_path):
    spec = {
        **MO,
        "name": "missing",
        "metrics": [{"name": "accuracy"}, {"name": "latency_ms", "goal": "minimize"}],
        "target": {"accuracy": 0.93, "latency_ms": 5},
        "budget": {"max_trials": 4, "max_steps": 50, "max_seconds": 120, "max_consecutive_failures": 0},
    }
    code, output, out = quanta_run(tmp_path, spec)
    result = json.loads(out.read_text())
    failed = [t for t in result["trials"] if t["status"] == "failed"]
    assert failed, output
    assert all(t["error"] == "never reported the objective(s) 'latency_ms'" for t in failed)
    assert code in (3, 4)  # not reached (or failed: every trial failed)


def test_a_restarted_controller_rebuilds_points_front_and_searcher_from_the_reports(tmp_path):
    spec = {**MO, "name": "rebuild", "target": {"accuracy": 2.0, "loss": 0.0}}  # never reached: runs its budget
    spec["budget"] = {"max_trials": 5, "max_steps": 150, "max_seconds": 120}
    code, output, out = quanta_run(tmp_path, spec)
    assert code == 3, output
    sid = json.loads(out.read_text())["search_id"]
    store = Store(f"sqlite:///{tmp_path}/q.db")
    store.update_search(sid, status="running", finished_at=None)  # as if the controller died mid-search
    row = store.search(sid)
    stored = spec_from_stored(row.spec)
    want_points = {}
    for t in store.trials(sid):
        by_step = latest_per_step((r.step, r.attempt, r.metrics) for r in store.reports(t.id))
        want_points[t.id] = trial_points(by_step, stored.objectives, stored.bounds)
    everything = [p for pts in want_points.values() for p in pts]
    want_front = sorted({everything[i][1] for i in front([p[1] for p in everything], [p[2] for p in everything])})

    ctl = Controller(store, SimRuntime(1, 1))
    ctl.book.load()
    s = ctl.book.searches[sid]
    assert {tid: t.points for tid, t in s.trials.items()} == want_points
    assert sorted(s.front) == want_front and want_front
    assert all(math.isfinite(v) for f in s.front for v in f)
    history = {h.number: h.points for h in s.searcher.history()}  # type: ignore[attr-defined]
    assert {t.number: tuple(want_points[t.id]) for t in store.trials(sid)} == history
