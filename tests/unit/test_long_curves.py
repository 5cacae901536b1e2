"""bench/long_curves.py on hand-made tables (nothing trains): what the screen keeps of the capable
configurations, and the replay of random search + ASHA."""

from __future__ import annotations

import math

import pytest

from bench.long_curves import analyse, replay_once

STEPS = (0, 250, 500, 750, 999)  # reports of a 1,000-step budget


def run(number: int, values: tuple[float, ...], seconds: float = 10.0) -> dict:
    return {
        "number": number,
        "config": {},
        "curve": [[s, v] for s, v in zip(STEPS, values, strict=True)],
        "seconds": seconds,
    }


def test_shares_ranks_and_what_the_best_third_keeps() -> None:
    runs = [
        run(0, (0.1, 0.5, 0.6, 0.7, 0.8)),  # best early, mediocre in the end
        run(1, (0.1, 0.3, 0.5, 0.8, 0.95)),  # a late bloomer: the only one to reach 0.9
        run(2, (0.1, 0.4, 0.5, 0.6, 0.6)),
        run(3, (0.1, 0.2, 0.3, 0.4, 0.5)),
        run(4, (0.1, 0.1, 0.1, 0.1, 0.1)),
        run(5, (0.1, 0.35, 0.4, 0.5, 0.55)),
    ]
    out = analyse(runs, {"easy": 0.75, "medium": 0.85, "hard": 0.9}, eta=3, rung_steps=[250, 750])
    assert out["targets"]["hard"] == {"target": 0.9, "reach": 1, "share": pytest.approx(1 / 6)}
    assert out["targets"]["easy"]["reach"] == 2
    early, late = out["rungs"]["250"], out["rungs"]["750"]
    assert early["hard_ranks"] == [4] and early["hard_kept"] == 0  # 4th of 6 at step 250: cut at the best 2
    assert late["hard_ranks"] == [1] and late["hard_kept"] == 1
    assert late["spearman_vs_best"] > early["spearman_vs_best"]


def test_replay_hits_when_the_curve_does_and_not_before() -> None:
    targets = {"hard": 0.9}
    late = [run(0, (0.1, 0.2, 0.3, 0.4, 0.95), seconds=10.0)]  # 0.01 s a step; 0.95 only at the last report
    hit = replay_once(late, (1 / 4, 3 / 4), 3, targets, seed=0, max_steps=1000, devices=1, max_trials=10)["hard"]
    assert math.isfinite(hit) and hit >= 999 * 0.01 - 1e-9  # at least one configuration trained in full
    early = [run(0, (0.1, 0.95, 0.95, 0.95, 0.95), seconds=10.0)]
    hit = replay_once(early, (1 / 4, 3 / 4), 3, targets, seed=0, max_steps=1000, devices=1, max_trials=10)["hard"]
    assert hit == pytest.approx(250 * 0.01)  # the first trial's first report
    never = [run(0, (0.1, 0.2, 0.3, 0.4, 0.5))]
    hit = replay_once(never, (1 / 4, 3 / 4), 3, targets, seed=0, max_steps=1000, devices=2, max_trials=10)["hard"]
    assert math.isinf(hit)
