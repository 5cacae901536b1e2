"""Hyperparameter importance and the metric's landscape, from a random forest fitted on finished trials.

`importance(space, trials)` fits scikit-learn's `RandomForestRegressor` on the trials' parameters (one
feature per flattened parameter that varies; a choice coded by its option, a parameter a trial's choice
does not have left missing, which the forest handles) and the objective, then measures each parameter's
*permutation importance* (`sklearn.inspection.permutation_importance`: how much the forest's R^2 drops
when that parameter's column is shuffled), clipped at 0 and normalised to sum 1. `landscape(space,
trials, x, y)` is the forest's partial dependence on two parameters (or one, `y=None`) over a grid: the
prediction averaged over the trials' other parameters, which the dashboard draws as a contour plot.

Trials need not all have run their full steps: a trial stopped because its search ended comes in at its
last value with its `progress` (steps run / the trial's step budget). When progress varies between the
trials it is one more feature of the forest, so that a value that is low because training was cut short
is explained by the progress and not blamed on the parameters (a slow configuration gets fewer steps
before the search ends, and would otherwise look bad for it). Progress is never ranked (`params` holds
the space's parameters only; their shares sum to 1), and the landscape is predicted at full progress.

Deterministic: the forest and the shuffles are seeded. Pure: no I/O, no clock; the trials come in as
values (`Observed`). Fewer than `MIN_TRIALS` observations give no numbers (`ImportanceResult.note` says why).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quanta.search.space import is_dimension

MIN_TRIALS = 4
_SEED = 0


@dataclass(frozen=True)
class Observed:
    """One finished trial: its nested parameters, the objective's value (its last report) and its
    `progress`, the share of its step budget it ran before that value (1.0: it ran them all)."""

    params: Mapping[str, Any]
    value: float
    progress: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.progress <= 1.0:
            raise ValueError(f"progress must be in [0, 1], got {self.progress}")


@dataclass(frozen=True)
class Dimension:
    """A flattened parameter: `kind` numeric or categorical; numeric ones have bounds (`low`, `high`,
    `log` for loguniform kinds), categorical ones their `options` (codes are their positions)."""

    name: str
    kind: str  # "numeric" | "categorical"
    low: float | None = None
    high: float | None = None
    log: bool = False
    options: tuple[Any, ...] = ()


@dataclass(frozen=True)
class ParamImportance:
    name: str
    importance: float  # share of the total, in [0, 1]
    std: float  # standard deviation over the shuffles, same scale


@dataclass(frozen=True)
class ImportanceResult:
    method: str
    trials_used: int
    params: tuple[ParamImportance, ...] = ()  # most important first
    r2: float | None = None  # the forest's fit on the trials (1 = it explains them)
    note: str | None = None
    partial: int = 0  # of trials_used, those whose value is from short of their full steps (progress < 1)


@dataclass(frozen=True)
class Axis:
    name: str
    kind: str
    values: tuple[float, ...]  # grid positions (numeric values, or option codes)
    labels: tuple[str, ...] = ()  # option labels of a categorical axis
    log: bool = False


@dataclass(frozen=True)
class Landscape:
    x: Axis
    y: Axis | None
    z: tuple[tuple[float, ...], ...]  # z[j][i]: predicted value at (x.values[i], y.values[j]); one row for 1-D
    points: tuple[tuple[float | None, float | None, float], ...] = field(default=())  # trials: (x, y, value)


def _flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def dimensions(space: Mapping[str, Any], prefix: str = "") -> dict[str, Dimension]:
    """Every flattened parameter of `space` (the columns `quanta.db.export` writes), with what the grid of a
    landscape needs to know about it. Constants are categorical with one option."""
    out: dict[str, Dimension] = {}
    for key, node in space.items():
        name = f"{prefix}{key}"
        if is_dimension(node):
            kind, args = next(iter(node.items()))
            if kind == "choice":
                plain = tuple(o for o in args if not isinstance(o, Mapping))
                nested = [o for o in args if isinstance(o, Mapping) and not is_dimension(o)]
                if plain or not nested:
                    out[name] = Dimension(name, "categorical", options=plain)
                for option in nested:
                    for sub, dim in dimensions(option, f"{name}.").items():
                        out[sub] = _merge(out.get(sub), dim)
            elif kind == "normal":
                mu, sigma = float(args[0]), float(args[1])
                out[name] = Dimension(name, "numeric", mu - 3 * sigma, mu + 3 * sigma)
            else:
                out[name] = Dimension(name, "numeric", float(args[0]), float(args[1]), log="log" in kind)
        elif isinstance(node, Mapping):
            out.update(dimensions(node, f"{name}."))
        else:
            out[name] = Dimension(name, "categorical", options=(node,))
    return out


def _merge(a: Dimension | None, b: Dimension) -> Dimension:
    """The same flattened name in two options of a choice (`optimizer.name`): one dimension for both."""
    if a is None:
        return b
    if a.kind == b.kind == "categorical":
        return Dimension(a.name, "categorical", options=a.options + tuple(o for o in b.options if o not in a.options))
    if a.kind == b.kind == "numeric":
        lows = [v for v in (a.low, b.low) if v is not None]
        highs = [v for v in (a.high, b.high) if v is not None]
        low = min(lows) if lows else None
        high = max(highs) if highs else None
        return Dimension(a.name, "numeric", low, high, a.log and b.log)
    return Dimension(a.name, "categorical", options=())


class _Encoded:
    """The trials as a feature matrix: one column per parameter that varies."""

    def __init__(self, space: Mapping[str, Any], trials: Sequence[Observed]):
        dims = dimensions(space)
        rows = [_flatten(t.params) for t in trials]
        names = list(dims) + sorted({k for r in rows for k in r} - set(dims))
        self.dims: dict[str, Dimension] = {}
        columns = []
        for name in names:
            values = [r.get(name) for r in rows]
            present = [v for v in values if v is not None]
            if len({repr(v) for v in present}) < 2:
                continue  # a constant (or a parameter no trial has) explains nothing
            dim = dims.get(name)
            if all(_is_number(v) for v in present) and (dim is None or dim.kind == "numeric"):
                lo, hi = min(present), max(present)
                dim = dim or Dimension(name, "numeric", float(lo), float(hi))
                columns.append([float(v) if v is not None else math.nan for v in values])
            else:
                known = list(dim.options) if dim is not None and dim.kind == "categorical" else []
                for v in present:
                    if not any(_same(v, k) for k in known):
                        known.append(v)
                dim = Dimension(name, "categorical", options=tuple(known))
                columns.append([_code(v, known) for v in values])
            self.dims[name] = dim
        self.names = list(self.dims)  # the parameters' columns come first, in this order
        # Progress, when it varies, is the last column: a covariate the forest may use, never a parameter.
        self.progress_col: int | None = None
        progress = [t.progress for t in trials]
        if len(set(progress)) > 1:
            self.progress_col = len(columns)
            columns.append(progress)
        self.X = np.array(columns, dtype=float).T if columns else np.zeros((len(trials), 0))
        self.y = np.array([t.value for t in trials], dtype=float)


def _same(a: Any, b: Any) -> bool:
    """Equal, with True never equal to 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def _code(v: Any, known: list[Any]) -> float:
    if v is None:
        return math.nan
    return float(next(i for i, k in enumerate(known) if _same(v, k)))


def _forest(enc: _Encoded) -> Any:
    from sklearn.ensemble import RandomForestRegressor

    model = RandomForestRegressor(n_estimators=64, min_samples_leaf=1, random_state=_SEED, n_jobs=1)
    model.fit(enc.X, enc.y)
    return model


def _usable(trials: Sequence[Observed]) -> list[Observed]:
    return [t for t in trials if math.isfinite(t.value)]


def importance(space: Mapping[str, Any], trials: Sequence[Observed], *, repeats: int = 8) -> ImportanceResult:
    """Permutation importance of each varying parameter (see the module's docstring), most important
    first; no numbers (with a `note`) for fewer than `MIN_TRIALS` trials or when nothing varies."""
    from sklearn.inspection import permutation_importance

    method = "permutation importance (random forest)"
    trials = _usable(trials)
    partial = sum(1 for t in trials if t.progress < 1.0)
    if len(trials) < MIN_TRIALS:
        note = f"needs at least {MIN_TRIALS} finished trials with a value"
        return ImportanceResult(method, len(trials), note=note, partial=partial)
    enc = _Encoded(space, trials)
    if not enc.names:
        return ImportanceResult(method, len(trials), note="no parameter varies between the trials", partial=partial)
    if float(np.ptp(enc.y)) == 0.0:
        zeros = tuple(ParamImportance(n, 0.0, 0.0) for n in enc.names)
        return ImportanceResult(method, len(trials), zeros, note="every trial has the same value", partial=partial)
    model = _forest(enc)
    result = permutation_importance(model, enc.X, enc.y, n_repeats=repeats, random_state=_SEED, n_jobs=1)
    # Only the parameters' columns are ranked; the progress column (if any) is left out of the shares.
    mean = np.clip(result.importances_mean[: len(enc.names)], 0.0, None)
    total = float(mean.sum())
    scale = 1.0 / total if total > 0 else 0.0
    params = [
        ParamImportance(name, float(mean[i] * scale), float(result.importances_std[i] * scale))
        for i, name in enumerate(enc.names)
    ]
    params.sort(key=lambda p: (-p.importance, p.name))
    return ImportanceResult(method, len(trials), tuple(params), r2=float(model.score(enc.X, enc.y)), partial=partial)


def _grid(dim: Dimension, column: np.ndarray[Any, Any], n: int) -> Axis:
    if dim.kind == "categorical":
        k = len(dim.options)
        return Axis(dim.name, "categorical", tuple(float(i) for i in range(k)), tuple(str(o) for o in dim.options))
    seen = column[np.isfinite(column)]
    lo = dim.low if dim.low is not None else float(seen.min())
    hi = dim.high if dim.high is not None else float(seen.max())
    values = np.geomspace(lo, hi, n) if dim.log and lo > 0 else np.linspace(lo, hi, n)
    return Axis(dim.name, "numeric", tuple(float(v) for v in values), log=dim.log and lo > 0)


def landscape(
    space: Mapping[str, Any], trials: Sequence[Observed], x: str, y: str | None = None, *, n: int = 20
) -> Landscape | None:
    """The forest's partial dependence on `x` (and `y`) over an `n`-point grid per numeric axis (each
    option of a categorical one), predicted at full progress, with the trials as points (at their values
    as reported). None when there are too few trials, or `x` (`y`) is not a parameter that varies.
    Raises `KeyError` naming a parameter the space does not have."""
    known = dimensions(space)
    for name in (x, y):
        if name is not None and name not in known:
            raise KeyError(name)
    trials = _usable(trials)
    if len(trials) < MIN_TRIALS:
        return None
    enc = _Encoded(space, trials)
    if x not in enc.dims or (y is not None and y not in enc.dims) or x == y:
        return None
    model = _forest(enc)
    ix = enc.names.index(x)
    ax = _grid(enc.dims[x], enc.X[:, ix], n)
    iy = enc.names.index(y) if y is not None else None
    ay = _grid(enc.dims[y], enc.X[:, iy], n) if y is not None and iy is not None else None
    base = enc.X[:: max(1, len(enc.X) // 200)]  # at most ~200 trials to average over
    ys = ay.values if ay is not None else (0.0,)
    cells = [(gx, gy) for gy in ys for gx in ax.values]
    batch = np.repeat(base[None, :, :], len(cells), axis=0)
    for c, (gx, gy) in enumerate(cells):
        batch[c, :, ix] = gx
        if iy is not None:
            batch[c, :, iy] = gy
    if enc.progress_col is not None:
        batch[:, :, enc.progress_col] = 1.0  # what the parameters give when training runs its full steps
    pred = model.predict(batch.reshape(-1, base.shape[1])).reshape(len(cells), len(base)).mean(axis=1)
    width = len(ax.values)
    z = tuple(tuple(float(v) for v in pred[j * width : (j + 1) * width]) for j in range(len(ys)))
    points = tuple(
        (
            _finite_or_none(enc.X[k, ix]),
            _finite_or_none(enc.X[k, iy]) if iy is not None else None,
            float(enc.y[k]),
        )
        for k in range(len(enc.y))
    )
    return Landscape(ax, ay, z, points)


def _finite_or_none(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None
