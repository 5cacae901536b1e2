"""Gandiva's early feedback reaches a target with fewer total steps than FIFO (real trial processes).

Workload: logistic regression (tests/trainables_feedback.py:logreg) where only the learning rate 0.3 of
{0.003, 0.01, 0.03, 0.3} reaches accuracy 0.9 within 400 steps. Random search with seed 7 proposes
0.3 first as trial number 6, so both policies see the same configurations in the same order: FIFO runs
the six hopeless ones to their full budget before it gets there; gandiva judges each after 10 % of its
steps, kills it and moves on (all but the search's best trial of the moment, which a fit never kills).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quanta.controller import Controller, ControllerOptions
from quanta.db.store import Store
from quanta.devices import parse_devices
from quanta.executor.runtime.local import LocalRuntime
from quanta.spec import parse_spec

MAX_STEPS = 400
GOOD_LR = 0.3


def _spec(policy: str):
    return parse_spec(
        {
            "name": f"feedback-{policy}",
            "trainable": "tests.trainables_feedback:logreg",
            "space": {"lr": {"choice": [0.003, 0.01, 0.03, GOOD_LR]}},
            "metric": {"name": "accuracy", "goal": "maximize", "target": 0.9},
            "budget": {"max_trials": 12, "max_steps": MAX_STEPS, "max_seconds": 60},
            "parallelism": 4,
            "search": {"algorithm": "random"},
            "scheduler": {"policy": policy, "quantum_s": 0.2},
            "config": {"stall_s": 0.002, "report_every": 10},
            "seed": 7,
        }
    )


def _run_both(tmp: Path) -> dict[str, tuple[object, list]]:
    """Both searches, one after the other, on one runtime (its template process starts once) and one
    store (so trial ids never repeat); each search gets its own controller, which binds itself to the
    runtime as its launcher."""
    store = Store(f"sqlite:///{tmp}/quanta.db")
    runtime = LocalRuntime(parse_devices("cpu:2"), workdir=str(tmp))
    out = {}
    try:
        for policy in ("fifo", "gandiva"):
            ctl = Controller(store, runtime, ControllerOptions(workdir=tmp / policy))
            sid = ctl.submit(_spec(policy))
            state = ctl.run(sid)
            out[policy] = (state, store.trials(sid))
    finally:
        runtime.close()
    return out


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_gandiva_reaches_the_target_with_fewer_total_steps_than_fifo(tmp_path):
    runs = _run_both(tmp_path)
    steps = {}
    for policy, (state, rows) in runs.items():
        assert state.reached_at is not None, f"{policy} never reached the target"
        # Same configurations in the same order for both (random search, same seed).
        by_number = sorted(rows, key=lambda r: r.number)
        assert [r.params["lr"] for r in by_number][:7] == [0.01, 0.01, 0.01, 0.003, 0.01, 0.01, GOOD_LR]
        steps[policy] = sum(r.steps for r in rows)
    fifo_rows, gandiva_rows = runs["fifo"][1], runs["gandiva"][1]
    # FIFO ran the hopeless configurations ahead of the good one to their full budget (trials 4 and 5 run
    # side by side on the two devices: the one that ends second may still share them with trial 6 and be
    # stopped when 6 reaches the target).
    assert all(r.steps >= MAX_STEPS for r in fifo_rows if r.number < 4), [(r.number, r.steps) for r in fifo_rows]
    assert sum(1 for r in fifo_rows if r.number in (4, 5) and r.steps >= MAX_STEPS) >= 1
    # Gandiva judged and killed them early, but for the search's best trial at each moment: a fit never
    # kills the incumbent, so a hopeless trial may run on until a better one appears. Which one leads when
    # depends on how the two devices' quanta fall (on a loaded machine the lead may pass from one hopeless
    # trial to another before the good one leads): at most two of the six ran half their budget.
    hopeless = [r for r in gandiva_rows if r.params["lr"] != GOOD_LR and r.steps > 0]
    assert hopeless and sum(1 for r in hopeless if r.steps >= MAX_STEPS / 2) <= 2
    # Judged hopeless and killed, unless the search reached its target first (the last one judged may
    # still be alive then, and ends `stopped`: the search ended, not the policy), or it was the incumbent
    # a fit never kills, which may run to its budget (`completed`).
    ended_otherwise = [r for r in hopeless if r.status not in ("killed", "stopped")]
    assert len(ended_otherwise) <= 1 and all(r.status == "completed" for r in ended_otherwise), [
        (r.number, r.status, r.steps) for r in hopeless
    ]
    hopeless = [r for r in hopeless if r.status == "killed"]
    assert hopeless
    # ... each with the verdict that killed it.
    assert all(r.reason and r.reason.startswith("P(reach target)") for r in hopeless), [r.reason for r in hopeless]
    assert steps["gandiva"] < 0.6 * steps["fifo"], steps
