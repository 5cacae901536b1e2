"""`bench/lcbench_rungs.rung_stats` and `bench/lcbench_anatomy.capable` on hand-made curves: a rung
that ranks configurations as they end up and one that ranks them backwards."""

from __future__ import annotations

import numpy as np
import pytest

from bench.lcbench_rungs import rung_stats


def _curves() -> np.ndarray:
    # 30 configurations, 9 epochs. Final quality q rises with the index; epoch 1 ranks them backwards
    # (slow bloomers), epochs 3 on rank them as they end.
    q = np.linspace(0.5, 0.95, 30)
    acc = np.empty((30, 9))
    acc[:, 0] = 0.3 - 0.2 * (q - 0.5)  # backwards (and below every later value)
    acc[:, 1] = 0.2  # ties: no information
    for e in range(2, 9):
        acc[:, e] = q * (0.9 + 0.1 * e / 8)
    return acc


def test_a_backward_first_epoch_has_negative_rho_and_recalls_no_capable_configuration() -> None:
    stats = rung_stats(_curves(), target=0.9, epochs=[1, 3])
    assert stats[1]["capable"] == stats[3]["capable"] > 0
    assert stats[1]["rho_best"] == pytest.approx(-1.0)
    assert stats[1]["recall"] == 0.0  # the capable ones are the last at epoch 1
    assert stats[3]["rho_best"] == pytest.approx(1.0)
    assert stats[3]["recall"] == 1.0
    # Among epoch 1's top third, epoch 3 ranks them backwards too; epoch 3 -> 9 keeps its order.
    assert stats[1]["rho_next"] == pytest.approx(-1.0)
    assert stats[3]["rho_next"] == pytest.approx(1.0)


def test_ties_give_no_correlation_and_no_target_gives_no_recall() -> None:
    stats = rung_stats(_curves(), target=2.0, epochs=[2, 9])
    assert stats[2]["rho_best"] is None and stats[2]["recall"] is None and stats[2]["capable"] == 0
    assert stats[9]["rho_next"] is None  # epoch 27 is past the curves


def test_bad_input_names_the_argument() -> None:
    with pytest.raises(ValueError, match="epochs"):
        rung_stats(_curves(), 0.9, [10])
    with pytest.raises(ValueError, match="acc"):
        rung_stats(np.zeros((2, 5)), 0.9, [1])


def test_anatomy_lists_the_configurations_that_reach_the_target_and_their_early_ranks() -> None:
    from bench.lcbench_anatomy import capable

    found = capable(_curves(), target=0.9, epochs=[1, 3])
    q = np.linspace(0.5, 0.95, 30)
    reach = [i for i in range(30) if (_curves()[i].max() >= 0.9)]
    assert [f["index"] for f in found] == reach and reach and q[reach[0]] > 0.85
    for f in found:
        i = f["index"]
        assert f["above"][1] == pytest.approx(i / 30)  # backwards at epoch 1: every worse configuration is above
        assert f["above"][3] == pytest.approx((29 - i) / 30)  # in order from epoch 3
        assert 3 <= f["reaches_at_epoch"] <= 9 and f["best"] >= 0.9
