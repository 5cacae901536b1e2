"""The learning-curve model on hand-made curves (no training)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from quanta.search.curve_model import CurveModel, infer_unit, levels_for, score, used_pairs


def curve(values: list[float], every: int = 1) -> list[tuple[int, float]]:
    return [((i + 1) * every, v) for i, v in enumerate(values)]


def test_levels_grow_by_the_factor_and_end_at_max_steps():
    assert levels_for(52) == (2, 3, 4, 6, 8, 11, 16, 23, 32, 52)
    assert levels_for(52, first=1)[:3] == (1, 2, 3)
    grid = levels_for(8000)
    assert grid[0] == 250 and grid[-1] == 8000
    assert all(b > a for a, b in zip(grid, grid[1:], strict=False))


def test_scores_are_logits_of_fractions_and_oriented_larger_is_better():
    assert score(0.5, "maximize", True) == pytest.approx(0.0)
    assert score(0.9, "maximize", True) == pytest.approx(math.log(9))
    assert score(0.1, "minimize", True) == pytest.approx(math.log(9))  # an error rate of 0.1 is good
    assert score(2.5, "minimize", False) == -2.5
    assert infer_unit([0.2, 0.9], 0.95) and not infer_unit([0.2, 1.4], None) and not infer_unit([], 3.0)


def test_a_level_records_the_best_value_up_to_the_first_report_past_it():
    m = CurveModel("maximize", True, (2, 4, 8))
    # Reports every 3 steps: level 2 is read at step 3, level 4 at step 6 (best so far 0.6, not 0.55).
    assert m.record(1, [(3, 0.6), (6, 0.55)]) == 2
    assert m.scores[1] == pytest.approx([score(0.6, "maximize", True)] * 2)
    # Recorded once: a later call with a longer curve only adds the new levels.
    assert m.record(1, [(3, 0.6), (6, 0.55), (9, 0.8)]) == 3
    assert m.scores[1][2] == pytest.approx(score(0.8, "maximize", True))


def test_without_pairs_the_prior_says_a_trial_keeps_its_score_and_gains_a_little():
    m = CurveModel("maximize", True, levels_for(52))
    mean, var = m.forecast(0, np.array([0.0, 1.0]))
    assert mean.shape == (2, 9)
    assert np.all(np.diff(mean, axis=1) >= 0)  # the prior's gains are positive and shrink
    assert mean[1, 0] - mean[0, 0] == pytest.approx(1.0)  # slope 1: persistence
    assert np.all(np.diff(var, axis=1) > 0)


def test_a_search_whose_early_values_rank_like_late_ones_is_predicted_confidently():
    rng = np.random.default_rng(0)
    m = CurveModel("maximize", True, (1, 2, 4))
    for tid in range(60):
        quality = rng.uniform(0.5, 0.95)
        m.record(tid, curve([quality - 0.1, quality - 0.05, quality]))
    good, bad = score(0.8, "maximize", True), score(0.45, "maximize", True)  # finals 0.9 and 0.55
    bar = score(0.85, "maximize", True)
    p = m.p_reach(0, np.array([good, bad]), bar)[:, -1]
    assert p[0] > 0.5 > 0.01 > p[1]


def test_a_search_of_late_bloomers_keeps_a_chance_for_every_trial():
    rng = np.random.default_rng(1)
    m = CurveModel("maximize", True, (1, 2, 4))
    for tid in range(60):
        early = rng.uniform(0.5, 0.7)
        final = rng.uniform(0.5, 0.95)  # unrelated to how it started
        m.record(tid, curve([early, max(early, final - 0.05), max(early, final)]))
    bar = score(0.9, "maximize", True)
    p = m.p_reach(0, np.array([score(0.52, "maximize", True), score(0.68, "maximize", True)]), bar)[:, -1]
    assert p[0] > 0.02 and p[1] > 0.02
    assert p[1] / p[0] < 3  # its early rank hardly matters


def test_a_model_rebuilt_from_its_log_forecasts_exactly_what_the_running_one_did():
    rng = np.random.default_rng(2)
    m = CurveModel("minimize", False, (1, 2, 4, 8))
    curves = [list(np.sort(rng.uniform(0.1, 3.0, size=8))[::-1]) for _ in range(200)]
    for tid, c in enumerate(curves):
        m.record(tid, curve(c[:4]))  # each trial first to level 4, then (later) to the end
        if tid % 7 == 0:
            m.fit()  # fits at arbitrary moments must not matter
    for tid, c in enumerate(curves[:150]):
        m.record(tid, curve(c))
    again = CurveModel("minimize", False, (1, 2, 4, 8))
    again.load(json.loads(json.dumps(m.log())))  # through JSON, as the state is stored
    z = np.array([-1.0, -0.5])
    for level in range(3):
        assert np.array_equal(m.forecast(level, z)[0], again.forecast(level, z)[0])
        assert np.array_equal(m.forecast(level, z)[1], again.forecast(level, z)[1])
        assert m.versions(level) == again.versions(level)
    assert np.array_equal(m.newcomers(), again.newcomers())


def test_a_transition_is_refitted_on_every_pair_at_first_then_at_growing_counts():
    assert [used_pairs(n) for n in (0, 1, 63, 64)] == [0, 1, 63, 64]
    counts = sorted({used_pairs(n) for n in range(64, 10_000)})
    assert counts[:3] == [64, 71, 78] and len(counts) < 60  # 1.1x apart
    assert all(used_pairs(n) <= n for n in range(10_000))


def test_newcomers_are_the_latest_first_level_scores():
    m = CurveModel("maximize", True, (1, 2))
    assert m.newcomers().size == 0 and m.best() is None
    for tid in range(5):
        m.record(tid, [(1, 0.1 * (tid + 1))])
    assert m.newcomers(3) == pytest.approx([score(v, "maximize", True) for v in (0.3, 0.4, 0.5)])
    assert m.best() == pytest.approx(score(0.5, "maximize", True))
