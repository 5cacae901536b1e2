"""Budget levels ("rungs") and what a learning curve says at each of them.

Successive halving (ASHA, Hyperband) and multi-fidelity search (BOHB) look at every trial at the
same few budgets: rungs `r_min, r_min * eta, r_min * eta**2, ...` steps, the last one being the
trial's full budget. This module is the one definition of those rungs and of "a trial's value at a
rung", shared by the searcher (which learns from rung values) and the policies (which promote by
them), so that both always agree on what a trial has shown.

Losses here are oriented so that smaller is better (the searcher's convention: `MetricSpec.loss`).
Pure: no devices, no I/O, no clock.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "DEFAULT_ETA",
    "FIRST_RUNG_DEPTH",
    "RungRecords",
    "cutoff_sorted",
    "default_first_rung",
    "in_top",
    "in_top_sorted",
    "passed_values",
    "report_values",
    "rungs",
    "rungs_of",
    "value_at",
]

# The first rung sits this many factors of eta below the full budget when a spec does not set one:
# max_steps / eta**4 (25 of MNIST-1D's 2,000 steps, 123 of the longer workload's 10,000, 1 of LCBench's
# 52 epochs). One factor deeper than textbook ASHA's eta**3 because finding the configuration, not
# training it, dominates the time to target: a cheaper first look screens more configurations. Measured
# against eta**3 live on both MNIST-1D workloads and on LCBench (docs/decisions.md, "The first rung is
# max_steps / eta**4").
FIRST_RUNG_DEPTH = 4
# The reduction factor between rungs when a spec does not set one (successive halving's usual 3).
DEFAULT_ETA = 3.0


def default_first_rung(max_steps: int, eta: float, depth: int = FIRST_RUNG_DEPTH) -> int:
    """The first rung in steps when none is configured: `max_steps / eta**depth`, rounded, at least 1.
    The one rule the ASHA policies and the multi-fidelity searcher share (the judge's rungs use
    depth 3, textbook ASHA's)."""
    return max(1, round(max_steps / eta**depth))


@functools.lru_cache(maxsize=1024)  # pure, and asked for every trial of every round
def rungs(max_steps: int, min_steps: int, eta: float) -> tuple[int, ...]:
    """The rung budgets in steps, increasing, ending at `max_steps`.

    `min_steps` is the first rung (clamped to [1, max_steps]); each next rung is `eta` times the
    previous one (rounded to whole steps); a rung within a factor `sqrt(eta)` of `max_steps` is
    merged into it, so that the last two rungs are never nearly equal.
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    if eta <= 1:
        raise ValueError(f"eta must be > 1, got {eta}")
    r = float(max(1, min(int(min_steps), int(max_steps))))
    out: list[int] = []
    while r * math.sqrt(eta) < max_steps:
        step = round(r)
        if not out or step > out[-1]:
            out.append(step)
        r *= eta
    out.append(int(max_steps))
    return tuple(out)


def rungs_of(max_steps: int, eta: float, min_steps: int | None = None, bracket: int = 0) -> tuple[int, ...]:
    """The rungs of a search's rung settings: the first at `min_steps` (None: `default_first_rung`), times
    `eta**bracket` in Hyperband bracket `bracket`, then `rungs`. What the ASHA policies give their trials
    and the multi-fidelity searcher fits at, computed here once for both."""
    first = min_steps if min_steps is not None else default_first_rung(max_steps, eta)
    return rungs(max_steps, max(1, round(first * eta**bracket)), eta)


def value_at(curve: Sequence[tuple[int, float]], rung: int) -> float | None:
    """A trial's loss at `rung`: the best (smallest) loss among its reports up to and including its
    first report at a step >= `rung`; None until it has reported at or past the rung.

    As in Ray Tune's ASHA, the rung is judged at the first report past it (rungs need not fall on a
    trainable's evaluation steps, and a trial is only known to have got there once it says so); the
    best value rather than that report's alone is taken because a search is won by the best report,
    and a noisy evaluation should not erase what the trial has already shown.
    """
    report = _first_report(curve, rung)
    if report is None:
        return None
    first = report[0]
    best = min((loss for step, loss in curve if step <= first), default=math.inf)
    return best if math.isfinite(best) else None


def report_values(curve: Sequence[tuple[int, float]], levels: Sequence[int]) -> tuple[float, ...]:
    """The loss of the curve's first report at or past each rung of `levels` (all but the last), in order,
    up to the first rung it has not reached: what the trial showed *at* each rung, where `value_at` keeps
    the best so far (a later rung's best-so-far contains an earlier one's, so the two agree more than
    the rungs' own reports do)."""
    out: list[float] = []
    for level in levels[:-1]:
        report = _first_report(curve, level)
        if report is None or not math.isfinite(report[1]):
            break
        out.append(report[1])
    return tuple(out)


def _first_report(curve: Sequence[tuple[int, float]], rung: int) -> tuple[int, float] | None:
    """The curve's first report (step, loss) at a step >= `rung`; None if it has not got there."""
    return min(((step, loss) for step, loss in curve if step >= rung), default=None)


def passed_values(curve: Sequence[tuple[int, float]], levels: Sequence[int]) -> tuple[float, ...]:
    """The curve's loss at each rung of `levels` (all but the last, the full budget) it has reported
    past, in order, up to the first it has not: what `RungRecords.record` records."""
    out: list[float] = []
    for level in levels[:-1]:
        value = value_at(curve, level)
        if value is None:
            break
        out.append(value)
    return tuple(out)


def in_top(value: float, recorded: Iterable[float], eta: float) -> bool:
    """Is the loss `value` among the best `floor(n / eta)` of the `n` losses `recorded` at a rung (the
    trial's own included)? ASHA's promotion test (Li et al. 2020, `get_job`): strictly better losses are
    counted, so ties favour the trial asked about."""
    losses = list(recorded)
    top = math.floor(len(losses) / eta)
    better = sum(1 for v in losses if v < value)
    return better < top


def in_top_sorted(value: float, ranked: Sequence[float], eta: float) -> bool:
    """`in_top` on the recorded losses sorted ascending (`RungRecords.ranked`): the same answer, with
    the strictly better losses counted by bisection."""
    return bisect.bisect_left(ranked, value) < math.floor(len(ranked) / eta)


def cutoff_sorted(ranked: Sequence[float], eta: float) -> float:
    """The `100 / eta` percentile (numpy's linear interpolation) of losses sorted ascending (not
    empty): the cut-off of Ray Tune's stopping rule (a loss at or below it goes on)."""
    q = (len(ranked) - 1) / eta
    lo = math.floor(q)
    hi = min(lo + 1, len(ranked) - 1)
    return ranked[lo] + (ranked[hi] - ranked[lo]) * (q - lo)


class RungRecords:
    """The losses trials have shown at the rungs of their search, `{key: {"<trial>": loss}}` (see
    `key`), each recorded once (the first time the trial has reported past the rung) and kept after the
    trial ends, so that later trials are compared with every trial that got there. JSON-shaped, to be
    carried in a policy's or the judge's state. Losses are oriented smaller-is-better.
    """

    def __init__(
        self,
        state: Mapping[str, Mapping[str, float]] | None = None,
        sorted_memo: dict[str, tuple[int, list[float]]] | None = None,
    ):
        """`sorted_memo` (optional, owned by the caller and passed again each round): per key, how many
        losses were recorded and them sorted, as `ranked` last computed them; since a rung's losses are
        only ever added (in insertion order, never changed), `ranked` then sorts only the new ones in
        rather than the whole rung each round."""
        # Copy on write: the rungs are shared with `state` (never changed through here) until one is first
        # written; copying every rung each round made a round O(every loss ever recorded).
        self.records: dict[str, dict[str, float]] = dict(state or {})  # type: ignore[arg-type]
        self._own: set[str] = set()  # keys whose dict is this object's own copy
        self._ranked: dict[str, list[float]] = {}  # key -> sorted losses (see `ranked`)
        self._memo = sorted_memo

    def _writable(self, key: str) -> dict[str, float]:
        """The rung's dict, copied first if it is still `state`'s."""
        if key in self._own:
            return self.records[key]
        self._own.add(key)
        at = self.records[key] = dict(self.records.get(key, {}))
        return at

    @staticmethod
    def key(search_id: int, rung: int, group: int = 0) -> str:
        """The record's key, `search/group/rung`; `group` separates trials never compared with each
        other (Hyperband's brackets)."""
        return f"{search_id}/{group}/{rung}"

    @staticmethod
    def search_of(key: str) -> int:
        """The search id of a record's key (`key`'s first part)."""
        return int(key.split("/", 1)[0])

    def record(
        self, search_id: int, trial_id: int, curve: Sequence[tuple[int, float]], levels: Sequence[int], group: int = 0
    ) -> int:
        """Record the trial's loss at every rung of `levels` (all but the last, the full budget) it has
        reported past; returns the number of rungs it has passed."""
        passed = 0
        tid = str(trial_id)
        for i, level in enumerate(levels[:-1]):
            at = self.records.get(self.key(search_id, i, group))
            if at is not None and tid in at:
                # Recorded once and kept: curves only grow, so the trial is still past this rung and its
                # value there is not recomputed (a held trial is seen every round; its curve is not).
                passed = i + 1
                continue
            value = value_at(curve, level)
            if value is None:
                break
            self._writable(self.key(search_id, i, group))[tid] = value
            passed = i + 1
        return passed

    def record_values(self, search_id: int, trial_id: int, values: Sequence[float], group: int = 0) -> None:
        """Record the trial's losses at its first `len(values)` rungs, as `record` would from the curve
        `values` were read from (`passed_values`); a rung already recorded keeps its value."""
        tid = str(trial_id)
        for i, value in enumerate(values):
            key = self.key(search_id, i, group)
            at = self.records.get(key)
            if at is None or tid not in at:
                self._writable(key)[tid] = value

    def at(self, search_id: int, rung: int, group: int = 0) -> dict[str, float]:
        """Trial id (string) -> loss recorded at that rung."""
        return self.records.get(self.key(search_id, rung, group), {})

    def ranked(self, search_id: int, rung: int, group: int = 0) -> list[float]:
        """The losses recorded at that rung, sorted (computed once per rung and kept: call it only once
        nothing more will be recorded, e.g. after a round's `record` calls). `in_top_sorted` and
        `cutoff_sorted` answer ASHA's questions on it in O(log n) and O(1) instead of a scan."""
        key = self.key(search_id, rung, group)
        out = self._ranked.get(key)
        if out is None:
            at = self.records.get(key, {})
            last = self._memo.get(key) if self._memo is not None else None
            if last is not None and last[0] <= len(at):
                out = list(last[1])  # a copy: the memo's list may still be someone's this round's
                for value in itertools.islice(at.values(), last[0], None):
                    bisect.insort(out, value)
            else:
                out = sorted(at.values())
            self._ranked[key] = out
            if self._memo is not None:
                self._memo[key] = (len(at), out)
        return out

    def keep(self, search_ids: Iterable[int]) -> dict[str, dict[str, float]]:
        """The state to carry: the records of the given (still running) searches."""
        live = {str(i) for i in search_ids}
        return {k: v for k, v in self.records.items() if k.split("/", 1)[0] in live}
