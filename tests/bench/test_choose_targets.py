"""bench/choose_targets.py: targets are the k-th best configurations' values, rounded towards reaching
them, with as many decimals as it takes to keep easy, medium and hard apart."""

from __future__ import annotations

import pytest

from bench.choose_targets import targets_from


def test_two_decimals_rounded_towards_reaching_the_target() -> None:
    best = [0.951, 0.949, 0.93, 0.925, 0.9, 0.88, 0.5]
    assert targets_from(best, (6, 4, 2), maximize=True) == {"easy": 0.88, "medium": 0.92, "hard": 0.94}
    losses = [0.101, 0.2, 0.25, 0.31, 0.4, 0.55]
    assert targets_from(losses, (5, 3, 1), maximize=False) == {"easy": 0.4, "medium": 0.25, "hard": 0.11}


def test_close_values_get_more_decimals_so_the_three_targets_stay_apart() -> None:
    best = [0.980, 0.976, 0.974, 0.972, 0.972, 0.966, 0.965]  # mnist1d_long's best of 40, the top 7
    assert targets_from(best, (6, 4, 2), maximize=True) == {"easy": 0.966, "medium": 0.972, "hard": 0.976}


def test_too_few_configurations_is_an_error() -> None:
    with pytest.raises(ValueError, match="need at least 6"):
        targets_from([0.9, 0.8], (6, 4, 2), maximize=True)
