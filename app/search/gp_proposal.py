"""Proposals by a Gaussian process's expected improvement over one rung's losses (BO in BOHB's place).

`GPProposer(domain)` reads a HyperOpt domain's labels, their distributions and the conditions under which
each is active (a label inside a `choice` option is active only when that option is chosen). `propose`
takes the configurations that have a loss at the searcher's rung (flat `vals` records) and the ones still
pending, and returns the candidate with the largest expected improvement over the best loss:

- every label is mapped to [0, 1] (log-scaled where the distribution is; an integer or a choice's index at
  the centre of its cell; a normal through its CDF); a label a configuration does not have sits at 0.5;
- the losses are replaced by their normal scores (the quantiles of their ranks), so that one diverged run
  does not set the scale of all the others;
- the GP has a Matern-5/2 kernel with one length scale per label, an amplitude and a noise, fitted by
  maximum marginal likelihood (L-BFGS-B from one fixed start) on the first `fitted_size(n)` of the n
  observations (in trial-number order; a size that grows by `REFIT_GROWTH`), so it is refitted as the data
  grows and is a function of the data alone: a searcher rebuilt from its history fits what the original
  fitted for the same ask;
- at most `MAX_OBSERVATIONS` observations are used: the `KEEP_BEST` best and the most recent others;
- pending configurations (the most recent `PENDING` asks without a loss) are added at the GP's own mean
  (the kriging believer), which narrows the uncertainty where a parallel ask already went;
- candidates: `RANDOM_CANDIDATES` uniform points and `LOCAL_CANDIDATES` Gaussian steps around each of the
  best `LOCAL_CENTRES` observations.

Why not gpytorch or scikit-learn: the controller process never imports torch (two seconds and 400 MB),
and scikit-learn's GP module costs 1.9 s of one core to import on these machines, paid by the trials
sharing the controller's cores. The model here is some eighty lines of numpy and one scipy optimiser.

Pure: numpy and scipy, seeded from the ask, no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.special import ndtr, ndtri

__all__ = ["GPProposer"]

MAX_OBSERVATIONS = 256  # the best 64 and the most recent others: the GP's cost grows as n^3
KEEP_BEST = 64
PENDING = 8
RANDOM_CANDIDATES = 384
LOCAL_CANDIDATES = 32
LOCAL_CENTRES = 4
LOCAL_STEPS = (0.05, 0.15)  # standard deviations of the local steps, in the unit cube
REFIT_GROWTH = 1.15
FIRST_FIT = 4  # observations before the first fit of the kernel's parameters
_SQRT5 = math.sqrt(5.0)


@dataclass(frozen=True)
class _Label:
    name: str
    kind: str  # uniform, loguniform, quniform, qloguniform, normal, randint
    low: float
    high: float
    q: float | None
    conditions: tuple[tuple[tuple[str, Any], ...], ...]  # any conjunction of (label, value) holding: active


def _labels(domain: Any) -> list[_Label]:
    from hyperopt.pyll_utils import expr_to_config

    hps: dict[str, Any] = {}
    expr_to_config(domain.expr, (True,), hps)
    out = []
    for name in sorted(hps):
        node = hps[name]["node"]
        args = [a.eval() for a in node.pos_args]
        named = {k: v.eval() for k, v in node.named_args}
        kind = node.name
        q = None
        if kind == "randint":
            low, high = (0.0, float(args[0])) if len(args) == 1 else (float(args[0]), float(args[1]))
            if "upper" in named:
                low, high = float(named.get("low", low)), float(named["upper"])
        elif kind in ("uniform", "loguniform"):
            low, high = float(args[0]), float(args[1])
        elif kind in ("quniform", "qloguniform"):
            low, high, q = float(args[0]), float(args[1]), float(args[2])
        elif kind == "normal":
            low, high = float(args[0]), float(args[1])  # mu, sigma
        else:
            raise ValueError(f"label {name!r}: distribution {kind!r} is not supported by the GP proposal")
        conds = []
        for conj in hps[name]["conditions"]:
            conds.append(tuple((c.name, c.val) for c in conj if c is not True))
        out.append(_Label(name, kind, low, high, q, tuple(conds)))
    return out


def _encode(label: _Label, value: Any) -> float:
    v = float(value)
    if label.kind == "randint":
        return (v - label.low + 0.5) / (label.high - label.low)
    if label.kind == "normal":
        return float(ndtr((v - label.low) / label.high))
    if label.kind in ("loguniform", "qloguniform"):  # bounds are already logs
        v = math.log(max(v, 1e-300))
    return (v - label.low) / (label.high - label.low)


def _decode(label: _Label, u: float) -> float | int:
    u = min(max(u, 0.0), 1.0)
    if label.kind == "randint":
        return int(min(label.low + math.floor(u * (label.high - label.low)), label.high - 1))
    if label.kind == "normal":
        return float(label.low + label.high * ndtri(min(max(u, 1e-6), 1 - 1e-6)))
    v = label.low + u * (label.high - label.low)
    if label.kind in ("loguniform", "qloguniform"):
        v = math.exp(v)
    if label.q is not None:
        v = round(v / label.q) * label.q
    return float(v)


def _matern(a: NDArray[np.float64], b: NDArray[np.float64], scales: NDArray[np.float64]) -> NDArray[np.float64]:
    sa, sb = a / scales, b / scales
    d2 = (sa * sa).sum(1)[:, None] + (sb * sb).sum(1)[None, :] - 2.0 * sa @ sb.T
    r = np.sqrt(np.maximum(d2, 0.0))
    out: NDArray[np.float64] = (1.0 + _SQRT5 * r + 5.0 / 3.0 * r * r) * np.exp(-_SQRT5 * r)
    return out


def _nll(
    theta: NDArray[np.float64], x: NDArray[np.float64], y: NDArray[np.float64]
) -> tuple[float, NDArray[np.float64]]:
    """Negative log marginal likelihood and its gradient in theta = (log scales..., log amplitude, log noise)."""
    dim = x.shape[1]
    scales, amp, noise = np.exp(theta[:dim]), math.exp(theta[dim]), math.exp(theta[dim + 1])
    diff2 = ((x[:, None, :] - x[None, :, :]) / scales) ** 2
    r = np.sqrt(diff2.sum(-1))
    e = np.exp(-_SQRT5 * r)
    m = (1.0 + _SQRT5 * r + 5.0 / 3.0 * r * r) * e
    k = amp * m + noise * np.eye(len(y))
    try:
        chol = np.linalg.cholesky(k)
    except np.linalg.LinAlgError:
        return 1e10, np.zeros_like(theta)
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
    nll = 0.5 * float(y @ alpha) + float(np.log(np.diag(chol)).sum()) + 0.5 * len(y) * math.log(2 * math.pi)
    kinv = np.linalg.solve(chol.T, np.linalg.solve(chol, np.eye(len(y))))
    w = np.outer(alpha, alpha) - kinv  # d nll / d theta_j = -0.5 tr(w dK_j)
    grad = np.empty_like(theta)
    common = amp * 5.0 / 3.0 * (1.0 + _SQRT5 * r) * e
    for j in range(dim):
        grad[j] = -0.5 * float((w * (common * diff2[:, :, j])).sum())
    grad[dim] = -0.5 * float((w * (amp * m)).sum())
    grad[dim + 1] = -0.5 * noise * float(np.trace(w))
    return nll, grad


def _fit(x: NDArray[np.float64], y: NDArray[np.float64]) -> NDArray[np.float64]:
    from scipy.optimize import minimize  # at the first fit only: not on a search's start

    dim = x.shape[1]
    theta0 = np.array([math.log(0.5)] * dim + [0.0, math.log(1e-2)])
    bounds = [(math.log(0.03), math.log(20.0))] * dim + [
        (math.log(0.05), math.log(20.0)),
        (math.log(1e-6), math.log(0.5)),
    ]
    res = minimize(_nll, theta0, args=(x, y), jac=True, method="L-BFGS-B", bounds=bounds, options={"maxiter": 60})
    theta: NDArray[np.float64] = np.asarray(res.x, dtype=float)
    return theta


def fitted_size(n: int) -> int:
    """The number of observations the kernel's parameters are fitted on when `n` are known: the largest
    of FIRST_FIT * REFIT_GROWTH**i (rounded up) not above n (n itself below FIRST_FIT)."""
    if n <= FIRST_FIT:
        return n
    i = math.floor(math.log(n / FIRST_FIT) / math.log(REFIT_GROWTH))
    size = math.ceil(FIRST_FIT * REFIT_GROWTH**i)
    while size > n:
        i -= 1
        size = math.ceil(FIRST_FIT * REFIT_GROWTH**i)
    return size


def _capped(
    observed: Sequence[tuple[int, Mapping[str, Sequence[Any]], float]],
) -> Sequence[tuple[int, Mapping[str, Sequence[Any]], float]]:
    """At most MAX_OBSERVATIONS of `observed`, in their order: the KEEP_BEST of lowest loss and the most
    recent others."""
    if len(observed) <= MAX_OBSERVATIONS:
        return observed
    by_loss = sorted(range(len(observed)), key=lambda i: observed[i][2])
    best = set(by_loss[:KEEP_BEST])
    rest = [i for i in range(len(observed)) if i not in best][-(MAX_OBSERVATIONS - KEEP_BEST) :]
    return [observed[i] for i in sorted(best | set(rest))]


def _normal_scores(losses: NDArray[np.float64]) -> NDArray[np.float64]:
    ranks = np.argsort(np.argsort(losses, kind="stable"), kind="stable")
    out: NDArray[np.float64] = ndtri((ranks + 0.5) / len(losses))
    return out


class GPProposer:
    """Expected improvement of a GP over one rung's losses, for one HyperOpt domain (see the module)."""

    def __init__(self, domain: Any):
        self.labels = _labels(domain)
        self._fit_key: tuple[int, tuple[int, ...]] | None = None  # (level, the numbers of the prefix fitted from)
        self._theta = np.zeros(len(self.labels) + 2)

    def _active(self, values: Mapping[str, Any]) -> list[_Label]:
        out = []
        for label in self.labels:
            if not label.conditions or any(all(values.get(n) == v for n, v in conj) for conj in label.conditions):
                out.append(label)
        return out

    def encode(self, vals: Mapping[str, Sequence[Any]]) -> NDArray[np.float64]:
        """A flat `vals` record as a point of the unit cube (0.5 where a label is absent)."""
        return np.array([_encode(lb, vals[lb.name][0]) if vals.get(lb.name) else 0.5 for lb in self.labels])

    def decode(self, u: NDArray[np.float64]) -> dict[str, list[Any]]:
        """A point of the unit cube as a flat `vals` record of the labels its choices make active."""
        values: dict[str, Any] = {}
        for lb, ui in zip(self.labels, u, strict=True):
            values[lb.name] = _decode(lb, float(ui))
        # Choices first decide which labels are there; conditions name choice labels, which are randint.
        active = {lb.name for lb in self._active(values)}
        return {name: [v] for name, v in values.items() if name in active}

    def propose(
        self,
        level: int,
        observed: Sequence[tuple[int, Mapping[str, Sequence[Any]], float]],
        pending: Sequence[Mapping[str, Sequence[Any]]],
        seed: int,
        fit_losses: Callable[[Sequence[int]], Sequence[float]] | None = None,
    ) -> dict[str, list[Any]]:
        """The candidate of largest expected improvement. `observed`: (trial number, vals, loss at the
        rung `level`) in trial-number order; `pending`: configurations asked and not yet at the rung.
        `fit_losses`: where the losses are a function of the ask (ParEGO's weights), the losses the
        kernel's parameters are fitted on, given the fitted trials' numbers; it must depend on those trials
        alone, so that the parameters stay a function of the trials they are named by (None: the
        observed losses)."""
        from threadpoolctl import threadpool_limits

        # One BLAS thread: these matrices are small, and a second thread spinning beside the trials on the
        # same cores cost 3-25x the CPU of one (a fit on 120 points: 1.7 s against 65 ms on a busy machine).
        with threadpool_limits(limits=1, user_api="blas"):
            rng = np.random.default_rng([seed, 0x6B])
            dim = len(self.labels)
            # The kernel's parameters are a function of the observations they are fitted on, named by their
            # trial numbers: a searcher rebuilt from its history fits exactly what the original used for the
            # same ask, whatever it had fitted before.
            # Named by the prefix fitted from: the capped set and its losses are a function of it (a trial's
            # loss at a rung, or `fit_losses`, depends on the trials alone), so an ask whose prefix is the
            # last one's neither re-ranks it (`fit_losses`) nor refits.
            prefix = observed[: fitted_size(len(observed))]
            key = (level, tuple(number for number, _, _ in prefix))
            if key != self._fit_key:
                fitted = prefix
                if fit_losses is not None:
                    ys = fit_losses([n for n, _, _ in prefix])
                    fitted = [(n, v, float(y)) for (n, v, _), y in zip(prefix, ys, strict=True)]
                fitted = _capped(fitted)
                xf = np.array([self.encode(v) for _, v, _ in fitted]).reshape(-1, dim)
                self._theta = _fit(xf, _normal_scores(np.array([loss for _, _, loss in fitted], dtype=float)))
                self._fit_key = key
            theta = self._theta
            observed = _capped(observed)
            x = np.array([self.encode(v) for _, v, _ in observed]).reshape(-1, dim)
            losses = np.array([loss for _, _, loss in observed], dtype=float)
            y = _normal_scores(losses)
            scales, amp, noise = np.exp(theta[:dim]), math.exp(theta[dim]), math.exp(theta[dim + 1])

            def posterior(
                xs: NDArray[np.float64], ys: NDArray[np.float64], q: NDArray[np.float64]
            ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
                k = amp * _matern(xs, xs, scales) + (noise + 1e-9) * np.eye(len(xs))
                chol = np.linalg.cholesky(k)
                ks = amp * _matern(q, xs, scales)
                v = np.linalg.solve(chol, ks.T)
                mean = ks @ np.linalg.solve(chol.T, np.linalg.solve(chol, ys))
                var = np.maximum(amp - (v * v).sum(0), 1e-12)
                return mean, var

            if pending:
                xp = np.array([self.encode(v) for v in pending[-PENDING:]]).reshape(-1, dim)
                believed, _ = posterior(x, y, xp)
                x, y = np.vstack([x, xp]), np.concatenate([y, believed])
            centres = x[: len(observed)][np.argsort(losses, kind="stable")[:LOCAL_CENTRES]]
            steps = [
                c + rng.normal(0.0, s, size=(LOCAL_CANDIDATES // len(LOCAL_STEPS), dim))
                for c in centres
                for s in LOCAL_STEPS
            ]
            cands = np.clip(np.vstack([rng.random((RANDOM_CANDIDATES, dim)), *steps]), 0.0, 1.0)
            cands = self._snap(cands)  # what decoding gives: integers, choices, quantised values, absent labels
            mean, var = posterior(x, y, cands)
            sd = np.sqrt(var)
            gap = float(y[: len(observed)].min()) - mean
            u = gap / sd
            ei = gap * ndtr(u) + sd * np.exp(-0.5 * u * u) / math.sqrt(2 * math.pi)
            return self.decode(cands[int(np.argmax(ei))])

    def _snap(self, u: NDArray[np.float64]) -> NDArray[np.float64]:
        """Each row of `u` as `encode(decode(row))`, for all rows at once."""
        out = u.copy()
        index: dict[str, NDArray[np.float64]] = {}
        for j, lb in enumerate(self.labels):
            if lb.kind == "randint":
                width = lb.high - lb.low
                cell = np.minimum(np.floor(u[:, j] * width), width - 1)
                out[:, j] = (cell + 0.5) / width
                index[lb.name] = lb.low + cell
            elif lb.q is not None:
                for row in range(len(u)):
                    out[row, j] = _encode(lb, _decode(lb, float(u[row, j])))
        for j, lb in enumerate(self.labels):
            if lb.conditions:
                active = np.zeros(len(u), dtype=bool)
                for conj in lb.conditions:
                    holds = np.ones(len(u), dtype=bool)
                    for name, value in conj:
                        holds &= index[name] == value if name in index else False
                    active |= holds
                out[~active, j] = 0.5
        return out
