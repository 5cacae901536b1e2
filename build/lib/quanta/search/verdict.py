"""The judge's vocabulary: its knobs (`JudgeKnobs`) and what it says about a trial (`Verdict`).

Beneath the policies (they read verdicts and include these knobs) and beside the judge
(`quanta.search.judge`, which fits curves): pydantic and the standard library only, so the spec and
the policy types import it without numpy/scipy. The judge reads trials and searches through the
structural protocols `CurveTrial` and `CurveSearch`, which the policy layer's `TrialView` and
`SearchView` satisfy: nothing here imports the policy layer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from quanta.search.fidelity import default_first_rung

JOB_GUARD_STEPS = 100  # a trace job's first steps ("time to the first 100 mini-batches", Gandiva)


class CurveTrial(Protocol):
    """What the judge reads of a trial (`quanta.executor.policy.types.TrialView` is one)."""

    @property
    def id(self) -> int: ...
    @property
    def search_id(self) -> int: ...
    @property
    def steps_done(self) -> int: ...
    @property
    def max_steps(self) -> int: ...
    @property
    def curve(self) -> Sequence[tuple[int, float]]: ...


class CurveSearch(Protocol):
    """What the judge reads of a search (`quanta.executor.policy.types.SearchView` is one)."""

    @property
    def id(self) -> int: ...
    @property
    def goal(self) -> str: ...
    @property
    def target(self) -> float | None: ...
    @property
    def max_steps(self) -> int: ...


@dataclass(frozen=True)
class Verdict:
    """What the judge (`quanta.search.judge`) says about one trial's learning curve this round.

    `judged`: the trial has run its minimum steps and its curve has a prediction; then `p_reach` is
    the predicted probability of reaching the search's target, `final` the predicted final value,
    `promise` the ordering score (higher = more promising: P(reach), then the predicted final) and
    `kill` whether the judge would stop it (P(reach) below the kill threshold). Not judged: all None,
    never killed.
    """

    judged: bool = False
    p_reach: float | None = None
    final: float | None = None
    promise: float | None = None
    kill: bool = False


NOT_JUDGED = Verdict()


class JudgeKnobs(BaseModel):
    """Early feedback (`quanta.search.judge`): when a trial's curve is judged and what a verdict kills.
    Frozen, unknown fields refused (a policy's knob model may include these fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_steps_before_judgement: int | None = Field(default=None, ge=1, description="default: 10% of max_steps")
    feedback_every_steps: int | None = Field(default=None, ge=1, description="default: 3% of max_steps")
    kill_threshold: float = Field(default=0.05, ge=0, le=1, description="kill below this P(reach target)")
    bounds: tuple[float, float] | None = Field(default=None, description="the metric's range, e.g. [0, 1]")
    infer_bounds: bool = Field(default=True, description="no bounds: a target and reports in [0, 1] mean bounds (0, 1)")
    rung_eta: float | None = Field(
        default=3.0,
        gt=1,
        description="judge from the first successive-halving rung (max_steps / rung_eta**3) on, by rung ranks "
        "and the curve together; None: by the curve alone, from min_steps_before_judgement",
    )

    def min_steps(self, trial: CurveTrial, search: CurveSearch | None) -> int:
        """Steps a trial runs before it is judged: `min_steps_before_judgement`, else the first rung
        (`first_rung`) when `rung_eta` is set, else 10 % of its max steps. A job outside a search is
        never judged; its guard covers its first mini-batches only (at most `JOB_GUARD_STEPS`). 0 when
        nothing bounds the trial."""
        if self.min_steps_before_judgement is not None:
            return int(self.min_steps_before_judgement)
        if self.rung_eta is not None and search is not None:
            return self.first_rung(trial, search)
        return self.curve_min_steps(trial, search)

    def first_rung(self, trial: CurveTrial, search: CurveSearch | None) -> int:
        """The first rung in steps: `max_steps / rung_eta**3` (textbook ASHA's; the `asha` policy's default
        is one factor of eta lower, `quanta.search.fidelity.default_first_rung`, and was not measured under
        gandiva), at least 1 (0 when nothing bounds the trial, or with `rung_eta` None: no rungs); the rungs
        follow as `quanta.search.fidelity.rungs` makes them."""
        max_steps = max_steps_of(trial, search)
        if not max_steps or self.rung_eta is None:
            return 0
        return default_first_rung(max_steps, self.rung_eta, depth=3)

    def curve_min_steps(self, trial: CurveTrial, search: CurveSearch | None) -> int:
        """Steps before the curve alone may condemn a trial: `min_steps_before_judgement`, else 10 % of
        its max steps (before that, a kill needs the rungs to agree: see `quanta.search.judge`)."""
        if self.min_steps_before_judgement is not None:
            return int(self.min_steps_before_judgement)
        max_steps = max_steps_of(trial, search)
        if not max_steps:
            return 0
        default = max(1, math.ceil(0.1 * max_steps))
        if search is None:
            return min(JOB_GUARD_STEPS, default)
        return default

    def feedback_every(self, trial: CurveTrial, search: CurveSearch | None) -> int:
        """Steps between two predictions of one trial: `feedback_every_steps`, else 3 % of max steps."""
        if self.feedback_every_steps is not None:
            return max(1, int(self.feedback_every_steps))
        return max(1, round(0.03 * max_steps_of(trial, search)))


def max_steps_of(trial: CurveTrial, search: CurveSearch | None) -> int:
    """Steps a trial runs at most: its search's budget, else its own (a trace job's length)."""
    if search is not None and search.max_steps:
        return int(search.max_steps)
    return int(trial.max_steps or 0)
