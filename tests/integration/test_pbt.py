"""Population-based training on real trial processes (a controller, LocalRuntime, `mutable_sgd`): a trial
in the bottom of its interval takes a top trial's state through the fork machinery, its reports go on
from the source's step with the explored learning rate, and the lineage records it."""

from __future__ import annotations

from pathlib import Path

import pytest

from quanta.spec import parse_spec
from tests.integration.test_fork import start, step_until

STEPS, INTERVAL = 40, 10


def test_a_bottom_trial_exploits_a_top_one_and_goes_on_from_its_state_with_new_values(tmp_path: Path):
    spec = {
        "name": "pbt",
        "trainable": "tests.trainables:mutable_sgd",
        "space": {"lr": {"loguniform": [0.001, 1.0], "mutable": True}},
        "metric": {"name": "loss", "goal": "minimize", "target": -1.0},  # never reached: trials run their budget
        "budget": {"max_trials": 4, "max_steps": STEPS},
        "search": {"algorithm": "random"},
        "seed": 3,
        "scheduler": {
            "policy": "pbt",
            "population": 4,
            "interval_steps": INTERVAL,
            "quantile": 0.5,
            "resample_p": 0.0,
            "quantum_s": 0.5,
        },
        "config": {"sleep_s": 0.005},
    }
    store, _rt, ctl = start(tmp_path)
    try:
        sid = ctl.submit(parse_spec(spec))
        step_until(ctl, lambda: store.search(sid).status == "completed", timeout=90)
        ctl.settle()
    finally:
        ctl.close()
    trials = store.trials(sid)
    assert len(trials) == 4 and all(t.status == "completed" for t in trials)  # the population, no more
    exploits = [c for t in trials for c in store.config_changes(t.id) if c.cause == "exploit"]
    assert exploits, "no exploit happened"
    went_on = 0
    for change in exploits:
        target, source, k = change.trial_id, change.source_id, change.step
        assert source is not None and source != target and k >= INTERVAL
        # A rate the source had, perturbed by 0.8 or 1.2 (kept inside the space).
        had = {r.metrics["config_lr"] for r in store.reports(source)}
        new_lr = change.values["lr"]
        assert any(new_lr == pytest.approx(min(1.0, v * f)) for v in had for f in (0.8, 1.2))
        # Its reports until its next change go on from the source's step (as a fork's: the first is at
        # the step it took over), the optimizer at the new rate.
        after = [c.at for c in store.config_changes(target) if c.at > change.at]
        until = min(after, default=float("inf"))
        mine = sorted((r for r in store.reports(target) if change.at < r.at < until), key=lambda r: r.at)
        if mine:
            went_on += 1
            assert mine[0].step == k and [r.step for r in mine] == list(range(k, k + len(mine)))
            assert all(r.metrics["lr"] == pytest.approx(new_lr) for r in mine)
            assert all(r.metrics["config_lr"] == pytest.approx(new_lr) for r in mine)
    assert went_on
    lineage = store.lineage(sid)
    shown = [c for t in lineage.trials for c in t.changes if c.cause == "exploit"]
    assert len(shown) == len(exploits) and {c.source_id for c in shown} == {c.source_id for c in exploits}
