"""Pause-don't-kill successive halving end to end: `quanta run` with `asha` on real trial processes.

Trials park themselves at their first report past each rung; the best of each rung are promoted and
resume in the same process where they stopped (no restart, no lost work); the rest stay parked (held)
while new trials keep coming. Multi-fidelity TPE (`bohb`) proposes them."""

from __future__ import annotations

import json

from quanta.db.store import Store
from tests.integration.test_quanta_run import TINY, quanta_run

ASHA = {
    **TINY,
    "name": "asha",
    "metric": {**TINY["metric"], "target": 2.0},  # unreachable: the search runs its whole trial budget
    "budget": {"max_trials": 12, "max_steps": 270, "max_seconds": 180},
    "parallelism": 2,
    "search": {"algorithm": "bohb", "n_startup": 4, "min_points": 3},
    "scheduler": {"policy": "asha", "min_steps": 10, "eta": 3, "quantum_s": 5.0},
    "config": {"report_every": 10, "sleep_s": 0.002},
}


def test_asha_parks_trials_at_rungs_and_promotes_them_without_restarts(tmp_path):
    code, out, result = quanta_run(tmp_path, ASHA)
    assert code == 3, out  # the budget ran out (the target is unreachable)
    trials = json.loads(result.read_text())["trials"]
    assert len(trials) == 12
    store = Store(f"sqlite:///{tmp_path}/q.db")
    starts = [r.trial_id for r in store.latencies("start")]
    assert sorted(starts) == sorted(set(starts)), "a trial process was started twice (a restart)"
    assert store.latencies("resume") + store.latencies("migrate"), "no held trial was ever resumed"
    reports = {t["id"]: [r for r in store.reports(t["id"])] for t in trials}
    for tid, rs in reports.items():  # no step computed twice: a resumed trial goes on where it stopped
        steps = [r.step for r in rs]
        assert steps == sorted(set(steps)), (tid, steps)
    # Held at the first rung (10 steps, judged at the report at step 10): a trial whose report at step 20
    # came after another trial had started (its first report) after its own step-10 report was paused
    # there while new configurations ran. Once the trial budget is spent, held trials run on rather than
    # leave devices idle, so every trial here ends at 270 steps.
    first_at = {tid: rs[0].at for tid, rs in reports.items() if rs}
    held = 0
    for tid, rs in reports.items():
        at = {r.step: r.at for r in rs}
        if 10 in at and 20 in at and any(at[10] < t0 < at[20] for other, t0 in first_at.items() if other != tid):
            held += 1
    assert held >= 3, held
