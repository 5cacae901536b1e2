"""What a search's finished trials say about its parameters: importance and landscape (the numbers
behind the dashboard's importance, slice and contour charts), as read models for the API.

`importance_out(store, search_id, objective=...)` and `landscape_out(store, search_id, x, y)` read the search's
finished trials that say something about their parameters (`observed`: completed ones, and those stopped
without a judgement, at their last value) and hand them to `quanta.search.importance` (a random forest:
permutation importance; partial dependence over a grid). None when the search does not exist.

A search with several objectives has an importance per objective, by the same method: `objective` names
one (default: the first, the trial's `metric`); another objective's value of a trial is the one of its last
point (its last report of an objective, values carried forward), read from the stored reports
(`quanta.db.pareto_view.trial_outcomes`).

Fitting the forest takes a good part of a second; the dashboard asks again after every trial event. With
a `FitCache` the result is kept by a hash of what it was fitted on (the space, the metric and every
observation), so it is fitted again only when a trial has finished since (the fit is seeded: a kept
result is the one a new fit would give).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from sqlmodel import Field, SQLModel

from quanta.db.models import TrialRow
from quanta.db.pareto_view import trial_outcomes
from quanta.db.protocol import ControllerStore
from quanta.db.public.readable import parsed_spec
from quanta.search.importance import Axis, Observed, importance, landscape
from quanta.spec import SearchSpec
from quanta.status import TrialStatus


class ParamImportanceOut(SQLModel):
    name: str = Field(description="flattened parameter name, e.g. optimizer.momentum")
    importance: float = Field(description="share of the total importance, in [0, 1]")
    std: float = Field(description="standard deviation over the shuffles, same scale")


class ImportanceOut(SQLModel):
    search_id: int
    metric: str | None = Field(description="the objective the importance is of")
    goal: str | None
    objectives: list[str] = Field(
        default_factory=list, description="every objective of the search (`?objective=` picks one; first: default)"
    )
    method: str
    trials_used: int = Field(
        description="trials the forest was fitted on: completed ones, and those stopped when their search ended"
        " (or by a user) at their last value; killed ones only when they had run their full steps"
    )
    trials_partial: int = Field(
        default=0, description="of trials_used, those stopped short of their full steps (their progress is a feature)"
    )
    params: list[ParamImportanceOut] = Field(description="most important first")
    r2: float | None = Field(description="the forest's R^2 on those trials")
    note: str | None = Field(default=None, description="why there are no numbers (too few trials, ...)")


class AxisOut(SQLModel):
    name: str
    kind: str = Field(description="numeric | categorical")
    values: list[float] = Field(description="grid positions (option codes for a categorical axis)")
    labels: list[str] = Field(default_factory=list, description="option labels of a categorical axis")
    log: bool = False


class LandscapeOut(SQLModel):
    search_id: int
    metric: str | None
    goal: str | None
    x: AxisOut
    y: AxisOut | None
    z: list[list[float]] = Field(description="z[j][i]: predicted metric at (x.values[i], y.values[j])")
    points: list[tuple[float | None, float | None, float]] = Field(description="trials: [x, y, metric]")
    note: str | None = None


_NO_SPEC = "the search's stored spec does not parse (written by another version?)"

T = TypeVar("T")


class FitCache:
    """Results fitted on a search's observations, by a hash of their inputs: at most `size` of them, the
    least recently used dropped first. Thread-safe (the API's routes share one per app); two requests
    that miss at once may both fit, and either result is kept (they are equal)."""

    def __init__(self, size: int = 64):
        self._size = size
        self._items: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...], fit: Callable[[], T]) -> T:
        """The result kept under `key`, else `fit()`, kept."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        result = fit()
        with self._lock:
            self._items[key] = result
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return result


def fit_key(kind: str, search_id: int, spec: SearchSpec, trials: Sequence[Observed], *extra: Any) -> tuple[Any, ...]:
    """What a result of `kind` on these inputs is kept under: the search, `extra` (the axes), and a
    SHA-256 of the space, the metric and every observation (its parameters, value and progress)."""
    content = [spec.space, spec.metric.model_dump(), [[t.params, t.value, t.progress] for t in trials]]
    digest = hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()
    return (kind, search_id, *extra, digest)


def _fitted(cache: FitCache | None, key: tuple[Any, ...], fit: Callable[[], T]) -> T:
    return fit() if cache is None else cache.get(key, fit)


def observed(trial: TrialRow, max_steps: int, value: float | None | Literal["metric"] = "metric") -> Observed | None:
    """What `trial` tells importance about its parameters: its last reported objective (`metric`; or
    `value`, another objective's) with its progress (`steps / max_steps`, at most 1), or None when it says
    nothing or would mislead.

    - `completed`: it ran its steps (or its own loop ended): progress 1.
    - `stopped`: it ended because its search ended (target reached, budget spent) or a user stopped
      it. No policy judged it, so which trials were cut short does not depend on how they were doing:
      its last value is an honest one at its progress, and the forest gets that progress as a feature.
      (A user who stops one trial may have judged it; the row does not say so, and such stops are few.)
    - `killed`: excluded, unless it had run its full `max_steps` (then its value is as final as a
      completed trial's). A policy kills the trials whose curves look worst, early: their values are
      both early and selected for being bad, a bias the progress feature cannot undo (the trials that
      would have caught up are exactly the ones missing). Including them would make the parameters of
      killed trials look worse than they are.
    - `failed`, `queued`, `running`, or no value reported: None.
    """
    v = trial.metric if value == "metric" else value
    if v is None:
        return None
    if trial.status == TrialStatus.COMPLETED:
        return Observed(trial.params, v)
    if trial.status == TrialStatus.STOPPED:
        return Observed(trial.params, v, min(1.0, max(0, trial.steps) / max_steps))
    if trial.status == TrialStatus.KILLED and trial.steps >= max_steps:
        return Observed(trial.params, v)
    return None


def observations(
    store: ControllerStore, search_id: int, objective: str | None = None
) -> tuple[SearchSpec | None, list[Observed]] | None:
    """The search's spec (None when its stored spec does not parse) and what its trials say of `objective`
    (`observed`; None: the first objective; none without a spec, whose step budget progress is measured
    against); None when there is no such search. Raises `KeyError` naming an objective the search lacks."""
    row = store.search(search_id)
    if row is None:
        return None
    spec = parsed_spec(row)
    if spec is None:
        return None, []
    names = [o.name for o in spec.objectives]
    if objective is not None and objective not in names:
        raise KeyError(objective)
    trials = store.trials(search_id)
    if objective is None or objective == names[0]:
        found = [observed(t, spec.budget.max_steps) for t in trials]
    else:
        outcomes = trial_outcomes(spec, store.search_reports(search_id))
        found = [
            observed(t, spec.budget.max_steps, o.values.get(objective) if (o := outcomes.get(t.id or 0)) else None)
            for t in trials
        ]
    return spec, [o for o in found if o is not None]


def importance_out(
    store: ControllerStore, search_id: int, cache: FitCache | None = None, objective: str | None = None
) -> ImportanceOut | None:
    """The importance of the search's parameters for `objective` (None: its first), None when there is no
    such search, from `cache` when it holds a result fitted on the same observations. Raises `KeyError`
    naming an objective the search does not have."""
    found = observations(store, search_id, objective)
    if found is None:
        return None
    spec, trials = found
    if spec is None:
        return ImportanceOut(
            search_id=search_id, metric=None, goal=None, method="", trials_used=0, params=[], r2=None, note=_NO_SPEC
        )
    target = next((o for o in spec.objectives if o.name == objective), spec.objectives[0])
    key = fit_key("importance", search_id, spec, trials, target.name)
    result = _fitted(cache, key, lambda: importance(spec.space, trials))
    return ImportanceOut(
        search_id=search_id,
        metric=target.name,
        goal=target.goal,
        objectives=[o.name for o in spec.objectives],
        method=result.method,
        trials_used=result.trials_used,
        trials_partial=result.partial,
        params=[ParamImportanceOut(name=p.name, importance=p.importance, std=p.std) for p in result.params],
        r2=result.r2,
        note=result.note,
    )


def _axis(a: Axis) -> AxisOut:
    return AxisOut(name=a.name, kind=a.kind, values=list(a.values), labels=list(a.labels), log=a.log)


def landscape_out(
    store: ControllerStore, search_id: int, x: str, y: str | None, cache: FitCache | None = None
) -> LandscapeOut | None:
    """None: no such search. Raises `KeyError` naming a parameter the space does not have. Without
    enough trials (or when `x`/`y` never varies) the grid is empty and `note` says why. From `cache` when
    it holds the landscape of `x` and `y` fitted on the same observations."""
    found = observations(store, search_id)
    if found is None:
        return None
    spec, trials = found
    land = None
    if spec is not None:
        key = fit_key("landscape", search_id, spec, trials, x, y)
        land = _fitted(cache, key, lambda: landscape(spec.space, trials, x, y))
    if spec is None or land is None:
        return LandscapeOut(
            search_id=search_id,
            metric=spec.metric.name if spec else None,
            goal=spec.metric.goal if spec else None,
            x=AxisOut(name=x, kind="numeric", values=[]),
            y=AxisOut(name=y, kind="numeric", values=[]) if y else None,
            z=[],
            points=[],
            note=_NO_SPEC if spec is None else "needs at least 4 finished trials in which the parameters vary",
        )
    return LandscapeOut(
        search_id=search_id,
        metric=spec.metric.name,
        goal=spec.metric.goal,
        x=_axis(land.x),
        y=_axis(land.y) if land.y is not None else None,
        z=[list(row) for row in land.z],
        points=list(land.points),
        note=None,
    )
