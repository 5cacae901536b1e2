"""GP-bandit exploration for population-based training (PB2; Parker-Holder et al., NeurIPS 2020).

PBT explores by perturbing the values of the member it copies; PB2 instead chooses the new values where a
Gaussian process of the population's progress says the next interval should gain most. The data are the
population's intervals: one row per member and interval, holding the interval `j`, the member's value at
the start of that interval (`base`), the mutable values it trained with, and its `gain` over the interval
(its value at the end less `base`, sign-flipped for a metric to minimise, so that larger is better). The
GP is fitted on (j, base, values) -> gain, standardised; the new values maximise an upper confidence
bound at the next interval and the copied member's value: the first GP's mean plus `kappa` times the
variance of a second GP that also holds the other members' current values (at the same interval and base,
as zero-gain pseudo-observations), so that a member is not sent where another already is.

As the authors' code (Ray Tune's `pb2_utils`) does: `kappa = sqrt(0.2 log(0.4 n))` for n rows, the gains
standardised and clipped to [-2, 2], the newest 200 rows kept. Where this differs from it, and why:
- the kernel is scikit-learn's (a constant times an anisotropic RBF over every feature, plus white
  noise), not the time-varying `TV_SquaredExp` on GPy: GPy is not kept up any more, and an RBF length
  scale of its own on the interval lets old intervals count less in the same way;
- a value of a log-scaled dimension (`loguniform`, `qloguniform`) is scaled to [0, 1] on its logarithm,
  not linearly: on lr in [0.001, 0.5], a linear scale leaves the rates below 0.05 a tenth of the range;
- the bound is maximised over random candidates, not by L-BFGS-B restarts: there are few dimensions, and
  one batch prediction over 512 points costs less than ten gradient-free restarts.

Pure: numpy and scikit-learn, seeded by the caller's generator; the same rows plan the same values.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from quanta.executor.policy.types import MutableDim

__all__ = ["KEEP_ROWS", "MIN_ROWS", "Row", "from_unit", "select", "to_unit", "warm"]

KEEP_ROWS = 200  # newest rows the GP is fitted on (the authors' code's shortest window)
MIN_ROWS = 2  # fewer rows than this: nothing to fit, the caller explores by perturbation
CANDIDATES = 512
# (interval, base value, mutable values in the search's order, gain): one member over one interval.
Row = tuple[int, float, tuple[float, ...], float]


def warm() -> None:
    """Import scikit-learn's GP now (about a second): a policy that will explore by PB2 calls this when it
    is made, so that the first exploit does not hold the controller's round for it."""
    import sklearn.gaussian_process  # noqa: F401


def _range(dim: MutableDim) -> tuple[float, float, bool]:
    """(low, high, on a log scale) of the unit interval `dim` is mapped onto; a normal spans mu +- 3 sigma."""
    a = dim.args
    if dim.kind == "normal":
        return a[0] - 3 * a[1], a[0] + 3 * a[1], False
    log = dim.kind in ("loguniform", "qloguniform")
    return (math.log(a[0]), math.log(a[1]), True) if log else (a[0], a[1], False)


def to_unit(dim: MutableDim, value: float) -> float:
    """`value` of `dim` on [0, 1] (clipped): linear in the value, or in its logarithm for a log dimension."""
    lo, hi, log = _range(dim)
    x = math.log(max(value, 1e-300)) if log else value
    return min(max((x - lo) / (hi - lo), 0.0), 1.0) if hi > lo else 0.0


def from_unit(dim: MutableDim, u: float) -> float:
    """The value of `dim` at `u` on [0, 1]; rounded for `randint`."""
    lo, hi, log = _range(dim)
    x = lo + min(max(u, 0.0), 1.0) * (hi - lo)
    v = math.exp(x) if log else x
    return float(round(v)) if dim.kind == "randint" else v


def _scaled(col: NDArray[np.float64], extra: float) -> tuple[NDArray[np.float64], float]:
    """`col` and `extra` on [0, 1] by their joint range (all 0 when they are all equal)."""
    lo, hi = min(float(col.min()), extra), max(float(col.max()), extra)
    span = hi - lo
    if span <= 0:
        return np.zeros_like(col), 0.0
    return (col - lo) / span, (extra - lo) / span


def select(
    dims: Sequence[MutableDim],
    rows: Sequence[Row],
    now: int,
    base: float,
    current: Sequence[Mapping[str, float]],
    rng: random.Random,
) -> dict[str, float] | None:
    """New values for `dims`, for a member that goes on from interval `now` at value `base` (the copied
    member's), by the upper confidence bound of a GP fitted on `rows`; `current` are the other members'
    values (the variance near them is lowered). None when `rows` has fewer than `MIN_ROWS` rows or no
    finite gain: the caller explores another way."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    kept = [r for r in rows[-KEEP_ROWS:] if math.isfinite(r[1]) and math.isfinite(r[3]) and len(r[2]) == len(dims)]
    if len(kept) < MIN_ROWS or not dims:
        return None
    d = len(dims)
    t, t_now = _scaled(np.array([float(r[0]) for r in kept]), float(now))
    b, b_now = _scaled(np.array([r[1] for r in kept]), base if math.isfinite(base) else kept[-1][1])
    u = np.array([[to_unit(dim, v) for dim, v in zip(dims, r[2], strict=True)] for r in kept]).reshape(-1, d)
    x = np.column_stack([t, b, u])
    g = np.array([r[3] for r in kept])
    y = np.clip((g - g.mean()) / (g.std() + 1e-8), -2.0, 2.0)
    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * RBF(np.ones(2 + d), (1e-2, 1e2)) + WhiteKernel(1e-2, (1e-6, 1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a bound hit on a few rows is no error here
        gp = GaussianProcessRegressor(kernel, random_state=0).fit(x, y)
        fixed = np.array([t_now, b_now])
        others = np.array(
            [[to_unit(dim, float(c.get(dim.name, from_unit(dim, 0.5)))) for dim in dims] for c in current]
        ).reshape(-1, d)
        if len(others):
            pad = np.column_stack([np.tile(fixed, (len(others), 1)), others])
            pen = GaussianProcessRegressor(gp.kernel_, optimizer=None).fit(
                np.vstack([x, pad]), np.concatenate([y, np.zeros(len(others))])
            )
        else:
            pen = gp
        cand = np.array([[rng.random() for _ in range(d)] for _ in range(CANDIDATES)])
        at = np.column_stack([np.tile(fixed, (CANDIDATES, 1)), cand])
        mean = gp.predict(at)
        _, std = pen.predict(at, return_std=True)
    kappa = math.sqrt(max(0.2 * math.log(0.4 * len(kept)), 0.0))
    best = cand[int(np.argmax(mean + kappa * std**2))]
    return {dim.name: from_unit(dim, float(ui)) for dim, ui in zip(dims, best, strict=True)}
