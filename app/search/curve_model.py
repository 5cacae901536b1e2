"""One learning-curve model per search: from every curve seen so far, the chance that a trial (or a
configuration not started yet) reaches a value by a later step, and what finding out costs.

The model looks at every trial on one grid of steps, `levels` (geometric, `factor` apart, ending at the
search's `max_steps`, as `quanta.search.fidelity.rungs` makes them), and at each level records the trial's
best value so far (`fidelity.value_at`: the best report up to its first report at or past the level),
transformed to a *score* `z` where larger is better: a metric bounded in [0, 1] (accuracy, error rate) is
mapped through the logit, so that equal steps of `z` mean equal odds near 0.99 and near 0.6.

A trial's future is a chain of linear-Gaussian steps from level to level: `z[k+1] = a[k] + b[k] * z[k] +
N(0, s[k]^2)`. Each step's `(a, b, s)` is a least-squares fit on every pair of consecutive levels any
trial of the search has shown (finished ones included), shrunk towards persistence (`b = 1`, a gain that
shrinks level by level) with the weight of `PRIOR_PAIRS` pseudo-pairs, so that a search with few pairs
leans on the prior and one with many on its data. Selection on `z[k]` (the policy continues the trials
that look best) leaves a regression on `z[k]` unbiased. Where early values rank trials as later ones do,
the fit says so (a slope near 1, a small spread); where they do not (late bloomers), the slope is low and
the spread large, and every trial at that level keeps a real chance.

`forecast(level, z)` gives the mean and variance of `z` at every later level; `p_reach` the probability of
being at or above a target by each of them. A configuration not started yet is represented by the scores
recent trials showed at the first level (`newcomers`): what the searcher's proposals have been giving.

Pure: numpy and scipy's normal CDF, no devices, no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.special import ndtr

from quanta.search.fidelity import rungs, value_at

__all__ = ["CurveModel", "Transition", "levels_for", "score"]

FACTOR = math.sqrt(2.0)  # steps between levels grow by this factor
FIRST_FRACTION = 1 / 32  # the first level, as a fraction of max_steps (at least one step, at least the first report)
PRIOR_PAIRS = 3.0  # weight of the persistence prior, in pairs
PRIOR_GAIN = 0.35  # the prior's mean gain of z from the first level to the second (logit units)
GAIN_DECAY = 0.7  # ... and its shrinking factor from one level to the next (the steps grow, the gains shrink)
PRIOR_SPREAD = 0.6  # the prior's standard deviation of the first step's residual (logit units)
SPREAD_DECAY = 0.8  # ... and its shrinking factor from one level to the next
LOCAL_PAIRS = 8  # pairs a transition needs before it is fitted locally
BANDWIDTH = 0.4  # the local fit's kernel width, in standard deviations of the scores at the level
LOCAL_GRID = 32  # points the local fit is evaluated at (and interpolated between)
MIN_SPREAD = 0.02  # a fitted step never claims more certainty than this
NEWCOMERS = 48  # recent first-level scores that stand for a configuration not started yet
EXACT_PAIRS = 64  # a transition is refitted on every new pair up to this many
REFIT_GROWTH = 1.1  # ... then whenever its pairs have grown by this factor
_EPS = 1e-4  # a fraction's logit is taken within [_EPS, 1 - _EPS]


def levels_for(max_steps: int, factor: float = FACTOR, first: int | None = None) -> tuple[int, ...]:
    """The grid of a search whose trials run `max_steps` steps: from `first` (default max_steps / 64, at
    least 1) up by `factor`, ending at `max_steps`."""
    start = first if first is not None else max(1, round(max_steps * FIRST_FRACTION))
    return rungs(max_steps, start, factor)


def used_pairs(n: int) -> int:
    """How many of a transition's `n` pairs (in recording order) its fit uses: all up to `EXACT_PAIRS`,
    then the largest count of the sequence EXACT_PAIRS * REFIT_GROWTH**i (rounded up) not above `n`."""
    if n <= EXACT_PAIRS:
        return n
    i = math.floor(math.log(n / EXACT_PAIRS) / math.log(REFIT_GROWTH))
    used = math.ceil(EXACT_PAIRS * REFIT_GROWTH**i)
    while used > n:  # guard against rounding at the boundary
        i -= 1
        used = math.ceil(EXACT_PAIRS * REFIT_GROWTH**i)
    return used


def score(value: float, goal: str, unit: bool) -> float:
    """A metric value as the model's score (larger is better): the logit of a fraction when `unit`,
    else the value itself, negated for `minimize`."""
    sign = 1.0 if goal == "maximize" else -1.0
    if unit:
        p = min(max(value, _EPS), 1.0 - _EPS)
        return sign * math.log(p / (1.0 - p))
    return sign * value


@dataclass(frozen=True)
class Transition:
    """One step of the chain, level k to k+1: `z[k+1] ~ N(a + b * z[k], s**2)`, fitted on `pairs` pairs."""

    a: float
    b: float
    s: float
    pairs: int


@dataclass(frozen=True)
class _Local:
    """A transition fitted locally: at each point `g` of a grid over the scores its pairs start from
    (widened by two kernel widths), a kernel-weighted linear fit of the next score, blended with the
    prior (persistence plus `gain`, spread `spread`) by weight: `sw` pairs' worth of data against
    `PRIOR_PAIRS` of prior. Between grid points it is interpolated; beyond the grid the data's weight
    fades with the distance (a Gaussian kernel's), so a score unlike any seen falls back on the prior
    rather than on a line extrapolated from elsewhere."""

    g: NDArray[np.float64]
    mu: NDArray[np.float64]  # the data's mean of the next score at g (before blending)
    b: NDArray[np.float64]  # the data's local slope
    r: NDArray[np.float64]  # the data's residual variance
    sw: NDArray[np.float64]  # the data's weight at g
    h: float
    gain: float
    spread: float

    @staticmethod
    def fit(x: NDArray[np.float64], y: NDArray[np.float64], gain: float, spread: float) -> _Local:
        h = max(BANDWIDTH * float(x.std()), 1e-3)
        lo, hi = float(x.min()) - 2 * h, float(x.max()) + 2 * h
        g = np.linspace(lo, hi, LOCAL_GRID)
        w = np.exp(-0.5 * ((x[None, :] - g[:, None]) / h) ** 2)  # (grid, pairs)
        sw = w.sum(axis=1)
        safe = np.maximum(sw, 1e-12)
        mx = (w * x).sum(axis=1) / safe
        my = (w * y).sum(axis=1) / safe
        dx, dy = x[None, :] - mx[:, None], y[None, :] - my[:, None]
        vx = (w * dx * dx).sum(axis=1) / safe
        vy = (w * dy * dy).sum(axis=1) / safe
        cxy = (w * dx * dy).sum(axis=1) / safe
        b_ols = np.clip(np.where(vx > 1e-12, cxy / np.maximum(vx, 1e-12), 1.0), 0.0, 1.5)
        b = (sw * b_ols + PRIOR_PAIRS) / (sw + PRIOR_PAIRS)
        mu = my + b * (g - mx)
        r = np.maximum(vy - 2 * b * cxy + b * b * vx, 0.0)
        return _Local(g, mu, b, r, sw, h, gain, spread)

    def at(self, m: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """(mean, slope, spread) of the next score for current scores `m`."""
        g = self.g
        mu = np.interp(m, g, self.mu)
        b = np.interp(m, g, self.b)
        r = np.interp(m, g, self.r)
        sw = np.interp(m, g, self.sw)
        # Beyond the grid: the edge's line, with the edge's weight fading as a kernel would.
        for edge, beyond in ((-1, m > g[-1]), (0, m < g[0])):
            if beyond.any():
                d = (m - g[edge]) / self.h
                mu = np.where(beyond, self.mu[edge] + self.b[edge] * (m - g[edge]), mu)
                sw = np.where(beyond, self.sw[edge] * np.exp(-0.5 * d * d), sw)
        w0 = PRIOR_PAIRS
        mean = (sw * mu + w0 * (m + self.gain)) / (sw + w0)
        var = (sw * r + w0 * self.spread**2) / (sw + w0)
        slope = (sw * b + w0) / (sw + w0)
        return mean, slope, np.maximum(np.sqrt(var), MIN_SPREAD)


class CurveModel:
    """The model of one search's curves (see the module docstring). `goal`: "maximize" or "minimize";
    `unit`: the metric lies in [0, 1] (its scores are logits); `levels`: the grid (`levels_for`).

    Feed it with `record(trial, curve)` (each trial whose curve grew: a trial's values are recorded once
    per level and kept after it ends), or restore it with `load(log)` from what `log` returned.

    Fits are a function of the recorded data alone, whenever `fit()` is called: a transition is fitted
    on its first `used(n)` pairs in recording order (every pair up to `EXACT_PAIRS`, then a count that
    grows by `REFIT_GROWTH` at a time), so a rebuilt model, fed the same log, forecasts exactly what the
    running one did, and a long search refits a transition a logarithmic number of times.
    """

    def __init__(self, goal: str, unit: bool, levels: Sequence[int]):
        if len(levels) < 1:
            raise ValueError("levels: need at least one level")
        self.goal = goal
        self.unit = unit
        self.levels = tuple(int(v) for v in levels)
        self.scores: dict[int, list[float]] = {}  # trial -> its score at levels 0, 1, ... it has passed
        self.order: list[int] = []  # trials in the order their first level was recorded
        self._log: list[list[float]] = []  # [trial, score] in recording order (the state to persist)
        n = len(self.levels)
        # Per transition k -> k+1, the pairs (score at k, score at k+1) trials have shown, in order.
        self._pairs: list[list[tuple[float, float]]] = [[] for _ in range(max(n - 1, 0))]
        self._fit: list[Transition] = []
        self._local: list[_Local | None] = []
        self._used: list[int] = [-1] * max(n - 1, 0)  # pairs each transition's fit used (-1: never fitted)

    # ---- feeding ---------------------------------------------------------------------------------

    def record(self, trial_id: int, curve: Sequence[tuple[int, float]]) -> int:
        """Record the trial's scores at the levels it has reported past; returns how many it has passed."""
        have = self.scores.get(trial_id)
        done = len(have) if have is not None else 0
        if done == len(self.levels):
            return done
        sign = -1.0 if self.goal == "maximize" else 1.0
        losses = [(step, sign * v) for step, v in curve if math.isfinite(v)]
        if not losses:
            return done
        new: list[float] = []
        for level in self.levels[done:]:
            loss = value_at(losses, level)
            if loss is None:
                break
            new.append(score(sign * loss, self.goal, self.unit))
        for z in new:
            self._add(trial_id, z)
        return done + len(new)

    def load(self, log: Sequence[Sequence[float]]) -> None:
        """Replay a log (`log()` of another model of the same search): the same data in the same order."""
        for tid, z in log:
            have = self.scores.get(int(tid))
            if have is None or len(have) < len(self.levels):
                self._add(int(tid), float(z))

    def log(self) -> list[list[float]]:
        """Every recorded score as [trial, score], in recording order (JSON-shaped; shared, do not change)."""
        return self._log

    def _add(self, trial_id: int, z: float) -> None:
        have = self.scores.get(trial_id)
        if have is None:
            have = self.scores[trial_id] = []
            self.order.append(trial_id)
        k = len(have) - 1  # the transition this value ends (k -> k+1)
        if k >= 0:
            self._pairs[k].append((have[-1], z))
        have.append(z)
        self._log.append([trial_id, z])

    # ---- fitting ---------------------------------------------------------------------------------

    def fit(self) -> list[Transition]:
        """Each transition's global fit, shrunk towards the persistence prior (see the module docstring);
        with `LOCAL_PAIRS` pairs or more a transition is also fitted locally (`_Local`), which `forecast`
        prefers."""
        if len(self.levels) < 2:
            return self._fit
        wanted = [used_pairs(len(p)) for p in self._pairs]
        if wanted == self._used:
            return self._fit
        out: list[Transition] = []
        local: list[_Local | None] = []
        for k in range(len(self.levels) - 1):
            n = wanted[k]
            if n == self._used[k] and k < len(self._fit):  # its data unchanged: so is its fit
                out.append(self._fit[k])
                local.append(self._local[k])
                continue
            # The prior of step k: persistence with a gain and a spread that shrink level by level.
            gain, spread = PRIOR_GAIN * GAIN_DECAY**k, PRIOR_SPREAD * SPREAD_DECAY**k
            pairs = self._pairs[k][:n]
            w = PRIOR_PAIRS
            if n >= 2:
                xy = np.asarray(pairs)
                x, y = xy[:, 0], xy[:, 1]
                mx, my = float(x.mean()), float(y.mean())
                vx, vy = float(x.var()), float(y.var())
                cxy = float(((x - mx) * (y - my)).mean())
                b_ols = min(max(cxy / vx, 0.0), 1.5) if vx > 1e-12 else 1.0
                b = (n * b_ols + w) / (n + w)
                a = my - b * mx
                resid = max(vy - 2 * b * cxy + b * b * vx, 0.0)
                s2 = (n * resid + w * spread**2) / (n + w)
                local.append(_Local.fit(x, y, gain, spread) if n >= LOCAL_PAIRS else None)
            elif n == 1:
                ((x0, y0),) = pairs
                b, a, s2 = 1.0, (y0 - x0 + w * gain) / (1 + w), spread**2
                local.append(None)
            else:
                b, a, s2 = 1.0, gain, spread**2
                local.append(None)
            out.append(Transition(a, b, max(math.sqrt(s2), MIN_SPREAD), n))
        self._fit, self._local, self._used = out, local, wanted
        return out

    def pairs(self, level: int) -> int:
        """How many trials have shown both `level` and the next (0 for the last level)."""
        return len(self._pairs[level]) if level < len(self._pairs) else 0

    def versions(self, level: int) -> tuple[int, ...]:
        """The pair counts the fits of the transitions from `level` on use: forecasts from `level` change
        only when this does (after `fit()`)."""
        return tuple(self._used[level:])

    # ---- reading ---------------------------------------------------------------------------------

    def forecast(self, level: int, z: NDArray[np.float64] | float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Mean and variance of the score at levels level+1 .. last, for trials whose score at `level` is
        `z` (a scalar or a vector): arrays shaped (len(z), levels after `level`). Each step maps the mean
        through the transition's fit at that mean (local where there is one) and adds its spread."""
        fit = self.fit()
        zs = np.atleast_1d(np.asarray(z, dtype=float))
        h = len(self.levels) - 1 - level
        mean = np.empty((zs.size, max(h, 0)))
        var = np.empty_like(mean)
        m, v = zs.copy(), np.zeros_like(zs)
        for j in range(max(h, 0)):
            loc = self._local[level + j]
            if loc is not None:
                mu, b, s = loc.at(m)
                v = b * b * v + s * s
                m = mu
            else:
                t = fit[level + j]
                m = t.a + t.b * m
                v = t.b * t.b * v + t.s * t.s
            mean[:, j], var[:, j] = m, v
        return mean, var

    def p_reach(self, level: int, z: NDArray[np.float64] | float, bar: float) -> NDArray[np.float64]:
        """P(score >= `bar`) at each level after `level`, from score `z` at `level`: shape (len(z), levels
        after). The score is a best-so-far, so being at or above the bar at a level means having reached it
        by then."""
        mean, var = self.forecast(level, z)
        return np.asarray(ndtr((mean - bar) / np.sqrt(np.maximum(var, 1e-18))))

    def newcomers(self, n: int = NEWCOMERS) -> NDArray[np.float64]:
        """The first-level scores of the last `n` trials that got there: what a configuration not started
        yet may show (empty before any trial has)."""
        recent = [self.scores[t][0] for t in self.order[-n:]]
        return np.asarray(recent, dtype=float)

    def best(self) -> float | None:
        """The best score any trial has shown at any level (None: none yet)."""
        tops = [max(v) for v in self.scores.values() if v]
        return max(tops) if tops else None


def infer_unit(values: Iterable[float], target: float | None) -> bool:
    """True when the metric looks like a fraction: the target (if any) and every value lie in [0, 1]."""
    if target is not None and not 0.0 <= target <= 1.0:
        return False
    seen = False
    for v in values:
        if not 0.0 <= v <= 1.0:
            return False
        seen = True
    return seen or target is not None
