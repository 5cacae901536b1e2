"""`SearchHealth`: what a search's trials have shown about whether it can succeed at all, and the verdicts
that end it early as `failed` instead of letting it spend its whole budget on a broken trainable.

Two ways a search cannot succeed, each counted as trials end:
- its trainable fails: `budget.max_consecutive_failures` trials in a row ended `failed` (a trial that
  completes or is judged and killed breaks the row; one stopped because its search ended does not
  count either way);
- its metric never arrives: the same number of trials ended, or parked themselves at a rung (a step
  limit of a policy with rungs: the policy judges them there), having reported other metrics but never
  `metric.name` (a typo: `acc` against a trainable that reports `accuracy`). Once any trial reports the
  metric this rule is off for good. The first such trial raises a warning, once, naming the reported
  metrics (withdrawn if the metric comes after all).
And when the budget is spent: a search all of whose trials failed, or whose trials reported other metrics
but never its own, failed.

Pure: plain values in, sentences out; the controller (`SearchBook`) feeds it and acts on its verdicts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from quanta.status import TrialStatus


@dataclass
class SearchHealth:
    """Counts kept as a search's trials report and end (see the module's docstring)."""

    failed: int = 0  # trials ended failed
    failed_in_row: int = 0  # trials ended failed since the last that completed or was killed
    first_failure: int | None = None  # the id of the first trial that failed
    metric_seen: bool = False  # some trial reported the search's metric
    names: set[str] = field(default_factory=set)  # the metrics reported, while the search's was not
    without_metric: int = 0  # trials that ended or reached a rung having reported only other metrics
    _reporters: set[int] = field(default_factory=set)  # trials that reported, while the metric was not
    _counted: set[int] = field(default_factory=set)  # of those, the ones counted in `without_metric`
    _warned: bool = False
    _retract: bool = False

    @classmethod
    def restored(cls, *, metric_seen: bool, warned: bool, ended: Iterable[tuple[int, TrialStatus]]) -> SearchHealth:
        """The health of a search loaded after a restart: whether its metric was reported, whether it was
        warned about, and its final trials (id, status) in the order they ended. Which metrics trials
        reported is not kept: trials judged without the metric are counted again from here."""
        health = cls(metric_seen=metric_seen, _warned=warned)
        for trial_id, status in ended:
            health.ended(trial_id, status)
        return health

    def reported(self, trial_id: int, names: Iterable[str], metric: str) -> None:
        """Trial `trial_id` reported metrics `names`; the search optimises `metric`."""
        if self.metric_seen:
            return
        names = set(names)
        if metric in names:
            self.metric_seen = True
            self._reporters.clear()
            self._counted.clear()
            self._retract = self._warned  # the warning said it had not come: it has now
            return
        self.names |= names
        if names:
            self._reporters.add(trial_id)

    def ended(self, trial_id: int, status: TrialStatus) -> None:
        """Trial `trial_id` became final with `status`."""
        if status == TrialStatus.FAILED:
            self.failed += 1
            self.failed_in_row += 1
            if self.first_failure is None:
                self.first_failure = trial_id
            return
        if status in (TrialStatus.COMPLETED, TrialStatus.KILLED):  # it ran as it should, or was judged
            self.failed_in_row = 0
            self.judged(trial_id)

    def judged(self, trial_id: int) -> None:
        """Trial `trial_id` reached a point where its metric is read: its end, or a rung it parked at."""
        if not self.metric_seen and trial_id in self._reporters and trial_id not in self._counted:
            self._counted.add(trial_id)
            self.without_metric += 1

    def warning(self, metric: str) -> str | None:
        """The warning that `metric` has not arrived while trials report others: returned once, the first
        time it is called after a trial was judged without it; None otherwise."""
        if self._warned or self.metric_seen or not self.without_metric:
            return None
        self._warned = True
        return (
            f"metric '{metric}' has not been reported: trials report {_names(self.names)}"
            f" (metric.name must be a name the trainable passes to trial.report)"
        )

    def retracted(self) -> bool:
        """True once (then False) when the metric arrived after `warning` had said it had not: the warning
        no longer holds."""
        retract, self._retract = self._retract, False
        return retract

    def verdict(self, metric: str, limit: int, trials: int | None = None) -> str | None:
        """Why the search must end failed now, or None. `limit`: `budget.max_consecutive_failures` (0: the
        search is never ended early). `trials`: given when the search's budget is spent, how many trials it
        made; it failed then if every one of them failed or its metric never arrived."""
        if limit and self.failed_in_row >= limit:
            return f"{self.failed_in_row} trials in a row failed (budget.max_consecutive_failures is {limit})"
        if limit and not self.metric_seen and self.without_metric >= limit:
            return (
                f"metric '{metric}' was never reported: {self.without_metric} trials reported only"
                f" {_names(self.names)} (metric.name must be a name the trainable passes to trial.report)"
            )
        if trials is None or trials == 0:
            return None
        if self.failed == trials:
            return f"all {trials} trials failed"
        if not self.metric_seen and self.names:  # (a search whose trials reported nothing at all is left be)
            return (
                f"metric '{metric}' was never reported: trials reported only {_names(self.names)}"
                f" (metric.name must be a name the trainable passes to trial.report)"
            )
        return None


def _names(names: set[str]) -> str:
    listed = sorted(names)
    shown = ", ".join(f"'{n}'" for n in listed[:10])
    return shown + (f" and {len(listed) - 10} more" if len(listed) > 10 else "")
