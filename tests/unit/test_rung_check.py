"""`rungs_passed` (ASHA's rung_check) on hand-built rung records: which lowest rungs are passed over."""

from __future__ import annotations

from quanta.executor.policy.asha.rung_check import rungs_passed
from quanta.search.fidelity import RungRecords

LEVELS = (1, 3, 9, 27)


def records(*rungs: dict[int, float], search: int = 1, group: int = 0) -> RungRecords:
    keyed = {RungRecords.key(search, i, group): {str(t): v for t, v in r.items()} for i, r in enumerate(rungs)}
    return RungRecords(keyed)


def test_a_rung_that_ranks_as_the_next_judges_and_the_check_is_decided():
    same = {t: float(t) for t in range(10)}
    book = records(same, same)
    assert rungs_passed({(1, 0): LEVELS}, book, {}, threshold=0.5, pairs=10) == {"1/0": (0, True)}


def test_a_rung_that_ranks_against_the_next_is_passed_over_and_the_next_is_checked_in_turn():
    first = {t: float(t) for t in range(10)}
    reversed_ = {t: float(-t) for t in range(10)}  # the next rung ranks them the other way round
    book = records(first, reversed_, reversed_)
    assert rungs_passed({(1, 0): LEVELS}, book, {}, threshold=0.5, pairs=10) == {"1/0": (1, True)}
    # The next rung has no next one recorded with enough pairs: passed over, undecided, waits there.
    book = records(first, reversed_)
    assert rungs_passed({(1, 0): LEVELS}, book, {}, threshold=0.5, pairs=10) == {"1/0": (1, False)}


def test_too_few_pairs_wait_and_a_decided_check_is_carried_without_reading_the_records():
    few = {t: float(t) for t in range(9)}
    assert rungs_passed({(1, 0): LEVELS}, records(few, few), {}, threshold=0.5, pairs=10) == {"1/0": (0, False)}
    reversed_ = {t: float(-t) for t in range(10)}
    carried = rungs_passed({(1, 0): LEVELS}, records(few, reversed_), {"1/0": (0, True)}, threshold=0.5, pairs=10)
    assert carried == {"1/0": (0, True)}


def test_the_last_rung_before_the_full_budget_always_judges_and_groups_are_apart():
    first = {t: float(t) for t in range(10)}
    reversed_ = {t: float(-t) for t in range(10)}
    book = records(first, reversed_, first, reversed_)  # every rung disagrees with the next
    assert rungs_passed({(1, 0): LEVELS}, book, {}, threshold=0.5, pairs=10) == {"1/0": (2, False)}
    other = records(first, first, group=1)  # bracket 1 of the same search agrees: judged on its own
    both = RungRecords({**book.records, **other.records})
    out = rungs_passed({(1, 0): LEVELS, (1, 1): LEVELS}, both, {}, threshold=0.5, pairs=10)
    assert out == {"1/0": (2, False), "1/1": (0, True)}


def test_spearman_gives_scipys_value_with_ties_infinities_and_constant_or_nan_input():
    import math
    import warnings

    import numpy as np
    from scipy.stats import spearmanr

    from quanta.executor.policy.asha.rung_check import spearman

    rng = np.random.default_rng(0)
    for n in (2, 3, 10, 57):
        for _ in range(40):
            x = rng.integers(0, 5, n).astype(float)  # many ties
            y = np.round(x + rng.normal(0, 2, n), 1)
            if n > 3:
                x[rng.integers(0, n)] = math.inf
                y[rng.integers(0, n)] = -math.inf
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # scipy warns of constant input, and returns NaN
                want = spearmanr(x, y).statistic
            got = spearman(list(x), list(y))
            assert (math.isnan(want) and math.isnan(got)) or abs(got - want) < 1e-12, (x, y, got, want)
    assert math.isnan(spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))  # constant: no ranking to agree with
    assert math.isnan(spearman([1.0, math.nan, 3.0], [1.0, 2.0, 3.0]))
    assert spearman([1.0, 2.0, 3.0], [30.0, 20.0, 10.0]) == -1.0
