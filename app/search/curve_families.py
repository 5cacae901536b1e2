"""The parametric families of learning curves that `feedback.predict` fits and mixes.

Written for an increasing curve in x = step / max_steps (a `minimize` metric is negated first, so a
falling loss becomes a rising curve):

    pow3       c - a * x**-alpha                  (Domhan's pow3)
    exp3       c - a * exp(-b * x)                 (exp3)
    log_power  base + a / (1 + (x / e**b)**-c)     (log power; `base` is the lower end of the curve's
                                                    range: the metric's lower bound, or 0 for a
                                                    non-negative maximised metric; skipped otherwise)
    janoschek  c - a * exp(-k * x**d)              (Janoschek / Weibull)
    mmf        c - a / (1 + (k * x)**d)            (Morgan-Mercer-Flodin)
    pow4       c - a * (x + b)**-alpha             (pow4, reparametrised)

Every family is increasing by construction (a >= 0, positive rates). Each works in normalised units:
x = step / max_steps, y = (flipped value - mid) / scale, so the observed part of the curve spans about
one unit. A `Family` gives its model, its Jacobian (d model / d params) and `guess`: a starting point
from a small grid search in which the linear parameters (c, a) are solved exactly (a >= 0), or None.
`FAMILIES` are the fixed ones, in the order they are fitted; `log_power_family(base)` is built per
curve, since its lower end depends on the metric (`predict` puts it third).

Pure: numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]  # every array here holds floats


@dataclass(frozen=True)
class Family:
    """One parametric family, in normalised units (see the module's docstring)."""

    name: str
    model: Callable[..., Array]
    jac: Callable[..., Array]  # d model / d params, shape (len(x), n_params)
    guess: Callable[[Array, Array], Array | None]
    positive: tuple[bool, ...]  # parameters fitted on a log scale, which keeps them > 0

    @property
    def n_params(self) -> int:
        return len(self.positive)


def _saturating(phi: Array, y: Array) -> tuple[int, float, float] | None:
    """Best row of y ~ c - a * phi[row] with a >= 0: (row, c, a), or None if nothing is finite."""
    pm = phi.mean(axis=1)
    dp = phi - pm[:, None]
    dy = y - y.mean()
    var = np.einsum("gn,gn->g", dp, dp)
    cov = dp @ dy
    a = np.where(var > 1e-300, -cov / np.maximum(var, 1e-300), 0.0)
    a = np.maximum(a, 0.0)
    c = y.mean() + a * pm
    rss = ((y - c[:, None] + a[:, None] * phi) ** 2).sum(axis=1)
    rss = np.where(np.isfinite(rss), rss, np.inf)
    row = int(np.argmin(rss))
    if not np.isfinite(rss[row]):
        return None
    return row, float(c[row]), float(a[row])


def _columns(n: int, *cols: Array | float) -> Array:
    """The (n, len(cols)) matrix with these columns (a Jacobian): `np.stack(cols, axis=1)` with a
    scalar column broadcast, without np.stack's checks (a fit asks for a Jacobian a dozen times)."""
    out = np.empty((n, len(cols)))
    for i, col in enumerate(cols):
        out[:, i] = col
    return out


def _taus(x: Array, n: int) -> Array:
    """Candidate time scales, from well before the first observation to past max_steps."""
    return np.geomspace(max(x[0] / 4.0, 1e-9), 4.0, n)


def _pow3(x: Array, c: float, a: float, alpha: float) -> Array:
    return c - a * x ** (-alpha)


def _pow3_jac(x: Array, c: float, a: float, alpha: float) -> Array:
    u = x ** (-alpha)
    return _columns(len(x), 1.0, -u, a * u * np.log(x))


def _pow3_guess(x: Array, y: Array) -> Array | None:
    alphas = np.geomspace(0.02, 3.0, 24)
    best = _saturating(x[None, :] ** -alphas[:, None], y)
    return None if best is None else np.array([best[1], best[2], alphas[best[0]]])


def _exp3(x: Array, c: float, a: float, b: float) -> Array:
    y: Array = c - a * np.exp(-b * x)
    return y


def _exp3_jac(x: Array, c: float, a: float, b: float) -> Array:
    e = np.exp(-b * x)
    return _columns(len(x), 1.0, -e, a * x * e)


def _exp3_guess(x: Array, y: Array) -> Array | None:
    rates = np.clip(1.0 / _taus(x, 28), 1e-3, 1e4)
    best = _saturating(np.exp(-rates[:, None] * x[None, :]), y)
    return None if best is None else np.array([best[1], best[2], rates[best[0]]])


def _janoschek(x: Array, c: float, a: float, k: float, d: float) -> Array:
    y: Array = c - a * np.exp(-k * x**d)
    return y


def _janoschek_jac(x: Array, c: float, a: float, k: float, d: float) -> Array:
    xd = x**d
    e = np.exp(-k * xd)
    return _columns(len(x), 1.0, -e, a * xd * e, a * k * xd * np.log(x) * e)


def _janoschek_guess(x: Array, y: Array) -> Array | None:
    tau, d = np.meshgrid(_taus(x, 12), np.array([0.3, 0.5, 0.75, 1.0, 1.5, 2.5]), indexing="ij")
    k, d = np.clip((tau**-d).ravel(), 1e-6, 1e6), d.ravel()
    best = _saturating(np.exp(-k[:, None] * x[None, :] ** d[:, None]), y)
    return None if best is None else np.array([best[1], best[2], k[best[0]], d[best[0]]])


def _mmf(x: Array, c: float, a: float, k: float, d: float) -> Array:
    return c - a / (1.0 + (k * x) ** d)


def _mmf_jac(x: Array, c: float, a: float, k: float, d: float) -> Array:
    u = (k * x) ** d
    g2 = 1.0 / (1.0 + u) ** 2
    return _columns(len(x), 1.0, -1.0 / (1.0 + u), a * g2 * d * u / k, a * g2 * u * np.log(k * x))


def _mmf_guess(x: Array, y: Array) -> Array | None:
    tau, d = np.meshgrid(_taus(x, 12), np.array([0.3, 0.5, 0.75, 1.0, 1.5, 2.5, 4.0]), indexing="ij")
    k, d = np.clip(1.0 / tau.ravel(), 1e-4, 1e6), d.ravel()
    best = _saturating(1.0 / (1.0 + (k[:, None] * x[None, :]) ** d[:, None]), y)
    return None if best is None else np.array([best[1], best[2], k[best[0]], d[best[0]]])


def _pow4(x: Array, c: float, a: float, b: float, alpha: float) -> Array:
    return c - a * (x + b) ** (-alpha)


def _pow4_jac(x: Array, c: float, a: float, b: float, alpha: float) -> Array:
    u = (x + b) ** (-alpha)
    return _columns(len(x), 1.0, -u, a * alpha * u / (x + b), a * u * np.log(x + b))


def _pow4_guess(x: Array, y: Array) -> Array | None:
    offs = np.concatenate([[0.0], np.geomspace(max(x[0] / 4.0, 1e-9), 2.0, 9)])
    b, alpha = np.meshgrid(offs, np.geomspace(0.05, 4.0, 12), indexing="ij")
    b, alpha = b.ravel(), alpha.ravel()
    best = _saturating((x[None, :] + b[:, None]) ** -alpha[:, None], y)
    return None if best is None else np.array([best[1], best[2], b[best[0]], alpha[best[0]]])


def log_power_family(base: float) -> Family:
    """The log-power family whose curves start from `base` (normalised units), the lower end of the
    metric's range: built per curve, unlike the fixed `FAMILIES`."""

    def model(x: Array, a: float, b: float, c: float) -> Array:
        y: Array = base + a / (1.0 + (x / np.exp(b)) ** (-c))
        return y

    def jac(x: Array, a: float, b: float, c: float) -> Array:
        lx = np.log(x) - b
        v = np.exp(-c * lx)
        g = 1.0 / (1.0 + v)
        return _columns(len(x), g, -a * g * g * c * v, a * g * g * lx * v)

    def guess(x: Array, y: Array) -> Array | None:
        tau, c = np.meshgrid(_taus(x, 14), np.array([0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0]), indexing="ij")
        tau, c = tau.ravel(), c.ravel()
        g = 1.0 / (1.0 + (x[None, :] / tau[:, None]) ** -c[:, None])
        gg = np.einsum("gn,gn->g", g, g)
        a = np.maximum(np.where(gg > 1e-300, (g @ (y - base)) / np.maximum(gg, 1e-300), 0.0), 0.0)
        rss = ((y - base - a[:, None] * g) ** 2).sum(axis=1)
        rss = np.where(np.isfinite(rss), rss, np.inf)
        row = int(np.argmin(rss))
        if not np.isfinite(rss[row]):
            return None
        return np.array([a[row], math.log(tau[row]), c[row]])

    return Family("log_power", model, jac, guess, (True, False, True))


FAMILIES: tuple[Family, ...] = (
    Family("pow3", _pow3, _pow3_jac, _pow3_guess, (False, True, True)),
    Family("exp3", _exp3, _exp3_jac, _exp3_guess, (False, True, True)),
    Family("janoschek", _janoschek, _janoschek_jac, _janoschek_guess, (False, True, True, True)),
    Family("mmf", _mmf, _mmf_jac, _mmf_guess, (False, True, True, True)),
    Family("pow4", _pow4, _pow4_jac, _pow4_guess, (False, True, True, True)),
)
