"""Multivariate TPE: one Parzen estimator over all the dimensions at once, beside HyperOpt's univariate one.

Why: HyperOpt's TPE models each parameter on its own and picks each one's value separately, so it
keeps no combination: when the good configurations are a narrow joint region (a learning rate that
works only with high dropout, say), it proposes good marginals in a bad mix. The joint estimator
(Falkner et al.'s BOHB uses one; Optuna's `TPESampler(multivariate=True)`) draws each candidate around
one good observation in every dimension at once, and scores it by the joint densities.

The model, given every trial's encoded configuration (`encode`) and a loss (inf: pending, or no value
at the rung the model is fitted on): the ceil(gamma sqrt(n)) lowest losses (at most 25, as HyperOpt
splits them) shape the "good" density l, all the other trials the "bad" density g (so, as HyperOpt's
pessimistic liar, proposals keep away from trials still running). Each density is an equal-weight
mixture of a prior component and one product kernel per trial: for a number, a Gaussian in a unit
encoding (log scale for log dimensions, z-score for `normal`), truncated to the range, with Optuna's
multivariate bandwidth 0.2 n^(-1/(D+4)) clipped below at 1 / min(100, n) (n components, D dimensions);
for a choice, Optuna's categorical kernel. A dimension inactive in a trial (a nested parameter of a
choice's other option) takes the prior's kernel in that trial's component; a candidate's density counts
only the dimensions active in it. `N_CANDIDATES` candidates are drawn from l and the one with the
largest log l - log g is proposed.

Pure: no I/O, no clock; the same rows, losses and seed give the same proposal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from hyperopt.tpe import DEFAULT_LF
from scipy.special import logsumexp, ndtr, ndtri

from app.search.space import Dim

__all__ = ["N_CANDIDATES", "decode", "encode", "encode_vals", "propose", "split"]

N_CANDIDATES = 24  # HyperOpt's and Optuna's number of EI candidates
PRIOR_WEIGHT = 1.0  # Optuna's default: the prior counts as one observation in the categorical kernel
SIGMA0 = 0.2  # Optuna's multivariate bandwidth factor (SIGMA0_MAGNITUDE)
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def encode(dim: Dim, value: Any) -> float:
    """`value` of `dim` (as a searcher's `vals` hold it; a choice by its option's index) in the model's
    coordinates: [0, 1] for bounded numbers, a z-score for `normal`, the index for a choice."""
    kind, a = dim.kind, dim.args
    v = float(value)
    if kind == "choice":
        return v
    if kind in ("uniform", "quniform"):
        return (v - a[0]) / (a[1] - a[0])
    if kind in ("loguniform", "qloguniform"):  # a rounded qloguniform value may fall under `low`
        return (math.log(max(v, a[0])) - math.log(a[0])) / (math.log(a[1]) - math.log(a[0]))
    if kind == "randint":
        return (v - a[0] + 0.5) / (a[1] - a[0])
    if kind == "normal":
        return (v - a[0]) / a[1]
    raise ValueError(f"{dim.label}: unknown kind {kind!r}")


def decode(dim: Dim, u: float) -> float | int:
    """The value of `dim` at model coordinate `u` (the inverse of `encode`, rounded as HyperOpt rounds
    quantised dimensions: to a multiple of q)."""
    kind, a = dim.kind, dim.args
    if kind == "choice":
        return int(min(max(round(u), 0), int(a[0]) - 1))
    if kind == "normal":
        return a[0] + u * a[1]
    u = min(max(u, 0.0), 1.0)
    if kind == "randint":
        span = int(a[1] - a[0])
        return int(a[0]) + min(int(math.floor(u * span)), span - 1)
    if kind in ("loguniform", "qloguniform"):
        v = math.exp(math.log(a[0]) + u * (math.log(a[1]) - math.log(a[0])))
    else:
        v = a[0] + u * (a[1] - a[0])
    if kind in ("quniform", "qloguniform"):
        v = float(np.round(v / a[2]) * a[2])
    return v


def encode_vals(dims: Sequence[Dim], vals: Mapping[str, Sequence[Any]]) -> np.ndarray:
    """One trial's row: each dimension's coordinate, NaN where `vals` has none (inactive)."""
    row = np.full(len(dims), np.nan)
    for i, dim in enumerate(dims):
        v = vals.get(dim.label)
        if v:
            row[i] = encode(dim, v[0])
    return row


class _Mixture:
    """An equal-weight mixture of a prior component and one product kernel per row of `rows`."""

    def __init__(self, dims: Sequence[Dim], rows: np.ndarray):
        self.dims = dims
        self._column = {dim.label: i for i, dim in enumerate(dims)}
        n = len(rows) + 1  # the prior is the last component
        self.n = n
        bandwidth = max(SIGMA0 * n ** (-1.0 / (len(dims) + 4)), 1.0 / min(100.0, n))
        self.mu: list[np.ndarray] = []
        self.sigma: list[np.ndarray] = []
        self.probs: list[np.ndarray] = []
        for i, dim in enumerate(dims):
            col = rows[:, i] if len(rows) else np.zeros(0)
            seen = ~np.isnan(col)
            if dim.kind == "choice":
                k = int(dim.args[0])
                p = np.full((n, k), PRIOR_WEIGHT / n)
                p[np.flatnonzero(seen), col[seen].astype(int)] += 1.0
                p[np.flatnonzero(~seen)] = 1.0  # inactive in that trial, and the prior: uniform
                p[-1] = 1.0
                self.probs.append(p / p.sum(axis=1, keepdims=True))
                self.mu.append(np.zeros(0))
                self.sigma.append(np.zeros(0))
                continue
            centre, wide = (0.0, 1.0) if dim.kind == "normal" else (0.5, 1.0)  # Optuna's prior: mid-range, range wide
            mu = np.append(np.where(seen, col, centre), centre)
            sigma = np.append(np.where(seen, bandwidth, wide), wide)
            self.mu.append(mu)
            self.sigma.append(sigma)
            self.probs.append(np.zeros((0, 0)))

    def _bounded(self, i: int) -> bool:
        return self.dims[i].kind != "normal" and self.dims[i].kind != "choice"

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """`count` rows drawn from the mixture; NaN where a dimension is inactive given the draw's choices."""
        comp = rng.integers(self.n, size=count)
        out = np.full((count, len(self.dims)), np.nan)
        for i, dim in enumerate(self.dims):
            active = np.ones(count, dtype=bool)
            for label, option in dim.parents:
                active &= out[:, self._column[label]] == option
            u = rng.random(count)  # drawn for every row, so one dimension's draws do not shift the others'
            if dim.kind == "choice":
                cdf = np.cumsum(self.probs[i][comp], axis=1)
                x = np.minimum((cdf < u[:, None]).sum(axis=1), cdf.shape[1] - 1).astype(float)
            else:
                mu, sigma = self.mu[i][comp], self.sigma[i][comp]
                if self._bounded(i):  # inverse-CDF draw from the Gaussian truncated to [0, 1]
                    lo, hi = ndtr((0.0 - mu) / sigma), ndtr((1.0 - mu) / sigma)
                    p = np.clip(lo + u * (hi - lo), 1e-12, 1 - 1e-12)
                    x = np.clip(mu + sigma * ndtri(p), 0.0, 1.0)
                else:
                    x = mu + sigma * ndtri(np.clip(u, 1e-12, 1 - 1e-12))
            out[:, i] = np.where(active, x, np.nan)
        return out

    def log_pdf(self, x: np.ndarray) -> np.ndarray:
        """Each row's log density under the mixture, over the dimensions active in it."""
        total = np.zeros((len(x), self.n))
        for i, dim in enumerate(self.dims):
            col = x[:, i]
            active = ~np.isnan(col)
            if not active.any():
                continue
            if dim.kind == "choice":
                idx = np.where(active, col, 0).astype(int)
                term = np.log(self.probs[i][:, idx].T)
            else:
                mu, sigma = self.mu[i][None, :], self.sigma[i][None, :]
                z = (np.where(active, col, 0.0)[:, None] - mu) / sigma
                term = -0.5 * z * z - _LOG_SQRT_2PI - np.log(sigma)
                if self._bounded(i):  # the truncated Gaussian's mass in [0, 1]
                    mass = ndtr((1.0 - mu) / sigma) - ndtr((0.0 - mu) / sigma)
                    term = term - np.log(np.maximum(mass, 1e-300))
            total += np.where(active[:, None], term, 0.0)
        out: np.ndarray = logsumexp(total, axis=1) - math.log(self.n)
        return out


def split(losses: np.ndarray, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the good trials (the ceil(gamma sqrt(n)) lowest finite losses, at most 25) and of the
    rest, as HyperOpt splits them (ties by position: the older trial first)."""
    n = len(losses)
    n_below = min(int(math.ceil(gamma * math.sqrt(n))), DEFAULT_LF)  # HyperOpt's count, capped at 25 as it caps it
    order = np.argsort(losses, kind="stable")
    below = order[:n_below]
    below = below[np.isfinite(losses[below])]
    above = np.setdiff1d(np.arange(n), below)
    return below, above


def propose(
    dims: Sequence[Dim], rows: np.ndarray, losses: np.ndarray, gamma: float, seed: int, n_candidates: int = N_CANDIDATES
) -> dict[str, list[Any]]:
    """The next configuration as a searcher's `vals` record ({label: [value]} for the active dimensions):
    the best of `n_candidates` drawn from the good density by the ratio of good to bad. `rows` are the
    trials' `encode_vals`, `losses` theirs (inf: none), aligned; `seed` fixes every draw."""
    if rows.shape != (len(losses), len(dims)):
        raise ValueError(f"rows are {rows.shape}, expected ({len(losses)}, {len(dims)})")
    below, above = split(losses, gamma)
    good, bad = _Mixture(dims, rows[below]), _Mixture(dims, rows[above])
    rng = np.random.default_rng(seed)
    candidates = good.sample(rng, n_candidates)
    score = good.log_pdf(candidates) - bad.log_pdf(candidates)
    best = candidates[int(np.argmax(score))]
    return {dim.label: [decode(dim, float(best[i]))] for i, dim in enumerate(dims) if not np.isnan(best[i])}
