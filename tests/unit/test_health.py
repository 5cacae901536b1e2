"""`SearchHealth` (when a search cannot succeed) and `TrialCounts` (how its trials stand): pure rules."""

from __future__ import annotations

from quanta.controller.health import SearchHealth
from quanta.status import TrialCounts, TrialStatus, count_trials

F, C, K, S = TrialStatus.FAILED, TrialStatus.COMPLETED, TrialStatus.KILLED, TrialStatus.STOPPED


def test_failures_in_a_row_end_the_search_and_a_success_breaks_the_row():
    h = SearchHealth()
    for tid in (1, 2):
        h.ended(tid, F)
    h.ended(3, C)  # breaks the row
    h.ended(4, S)  # a trial stopped with its search counts neither way
    for tid in (5, 6):
        h.ended(tid, F)
    assert h.verdict("acc", 3) is None and h.failed_in_row == 2 and h.first_failure == 1
    h.ended(7, F)
    assert h.verdict("acc", 3) == "3 trials in a row failed (budget.max_consecutive_failures is 3)"
    assert h.verdict("acc", 0) is None  # 0: never ended early
    assert h.verdict("acc", 0, trials=7) is None  # some trials did not fail
    every = SearchHealth()
    every.ended(1, F)
    assert every.verdict("acc", 0, trials=1) == "all 1 trials failed"


def test_a_metric_never_reported_is_warned_once_then_ends_the_search():
    h = SearchHealth()
    h.reported(1, ["loss", "accuracy"], "acc")
    assert h.warning("acc") is None  # nothing judged yet: the metric may come later
    h.judged(1)  # parked at a rung
    h.judged(1)  # ... and at the next: counted once
    h.ended(1, K)
    assert h.without_metric == 1
    warning = h.warning("acc")
    assert warning is not None and "'acc'" in warning and "'accuracy', 'loss'" in warning
    assert h.warning("acc") is None  # once
    h.reported(2, ["accuracy"], "acc")
    h.ended(2, C)
    assert h.verdict("acc", 2) is not None and "2 trials reported only 'accuracy', 'loss'" in h.verdict("acc", 2)
    h.ended(3, C)  # reported nothing: not counted
    assert h.without_metric == 2
    assert not h.retracted()
    h.reported(4, ["acc"], "acc")  # it comes after all: the warning is withdrawn, once
    assert h.retracted() and not h.retracted() and h.verdict("acc", 2) is None


def test_once_the_metric_arrives_the_metric_rules_are_off():
    h = SearchHealth()
    h.reported(1, ["loss"], "acc")
    h.reported(2, ["acc"], "acc")
    h.ended(1, C)
    assert h.warning("acc") is None and h.verdict("acc", 1, trials=2) is None
    nothing = SearchHealth()  # trials that report nothing at all: the budget-end rule leaves them be
    nothing.ended(1, C)
    assert nothing.verdict("acc", 1, trials=1) is None


def test_health_restored_after_a_restart():
    h = SearchHealth.restored(metric_seen=False, warned=True, ended=[(1, F), (2, F)])
    assert h.failed_in_row == 2 and h.first_failure == 1 and h.verdict("acc", 2) is not None
    h.reported(3, ["loss"], "acc")
    h.ended(3, C)
    assert h.warning("acc") is None  # warned before the restart


def test_trial_counts_put_each_trial_in_one_bucket():
    counts = count_trials(
        [
            ("queued", False, False, False),
            ("queued", True, False, True),  # released from a rung to its checkpoint: parked, judged
            ("running", True, True, False),
            ("running", True, False, True),  # held at a rung
            ("completed", True, False, False),
            ("stopped", True, False, False),
            ("killed", True, False, True),
            ("failed", True, False, False),
        ]
    )
    assert counts == TrialCounts(queued=1, running=1, parked=2, completed=1, stopped=1, killed=1, failed=1, evaluated=6)
    assert counts.total == 8 and counts.done == 4
    assert counts.text() == "1 queued, 1 running, 2 parked, 1 completed, 1 stopped, 1 killed, 1 failed"
    assert TrialCounts.from_dict(counts.as_dict()) == counts
    assert TrialCounts().text() == "none"
