"""Learning-curve extrapolation (app/search/feedback.py) on synthetic curves with known asymptotes.

Every curve is observed every 10 steps on the first part of a 1000-step run, with seeded Gaussian
noise (sd 0.005 unless said otherwise), and judged against its true value at step 1000.
"""

from __future__ import annotations

import ast
import math
import random
from pathlib import Path

import numpy as np
import pytest

from quanta.search import curve_families, feedback
from quanta.search.feedback import P_MAX, P_MIN, Prediction, predict, priority, should_kill

MAX_STEPS = 1000
SEEDS = range(5)


def pow3(s):  # c = 0.9; 0.850 at step 1000
    return 0.9 - 0.5 * (np.asarray(s, float) / 10.0) ** -0.5


def exp3(s):  # c = 0.7; 0.699 at step 1000
    return 0.7 - 0.6 * np.exp(-np.asarray(s, float) / 150.0)


def log_power(s):  # a = 0.85; 0.810 at step 1000
    return 0.85 / (1.0 + (np.asarray(s, float) / 50.0) ** -1.0)


def loss(s):  # a minimised metric: 0.3 + 2 * (s/10)**-0.7; 0.380 at step 1000
    return 0.3 + 2.0 * (np.asarray(s, float) / 10.0) ** -0.7


def observe(fn, frac, noise=0.005, seed=0, every=10):
    steps = np.arange(every, int(frac * MAX_STEPS) + 1, every)
    rng = np.random.default_rng(seed)
    values = fn(steps) + rng.normal(0.0, noise, len(steps))
    return [(int(s), float(v)) for s, v in zip(steps, values, strict=True)]


def truth(fn):
    return float(fn(MAX_STEPS))


# --- accuracy of `final` -----------------------------------------------------------------------------


# Measured |final - truth| over seeds 0-4 (noise sd 0.005), the same with bounds=(0, 1):
#   pow3      seen on 25 %: max 0.006 (mean 0.003)
#   log-power seen on 25 %: max 0.012 (mean 0.005)
#   exp3      seen on 30 %: max 0.015 (mean 0.007)
#   loss (minimize, pow3-shaped) seen on 25 %: max 0.006 (mean 0.002)
# exp3 seen on only 20-25 % is ambiguous (the four-parameter families fit as well and rise
# further): seed 0 misses by 0.17 at 20 % and 0.053 at 25 %, with spread 0.14 and 0.063 saying so;
# test_spread_covers_the_error covers that case.
@pytest.mark.parametrize(
    ("fn", "frac", "goal", "bounds"),
    [
        (pow3, 0.25, "maximize", None),
        (pow3, 0.25, "maximize", (0.0, 1.0)),
        (log_power, 0.25, "maximize", (0.0, 1.0)),
        (exp3, 0.30, "maximize", None),
        (exp3, 0.30, "maximize", (0.0, 1.0)),
        (loss, 0.25, "minimize", (0.0, math.inf)),
    ],
    ids=["pow3", "pow3-bounded", "log_power", "exp3", "exp3-bounded", "loss-minimize"],
)
def test_final_is_close_to_the_true_value(fn, frac, goal, bounds):
    errors = []
    for seed in SEEDS:
        pred = predict(observe(fn, frac, seed=seed), MAX_STEPS, None, goal, bounds=bounds)
        assert pred is not None
        assert pred.families, "some family should fit a clean synthetic curve"
        errors.append(abs(pred.final - truth(fn)))
    assert max(errors) < 0.03, errors


# Measured max |final - truth| / spread over these 15 cases: 1.22 (exp3 seed 0 at 20 %: 0.167 / 0.137).
@pytest.mark.parametrize("fn", [pow3, exp3, log_power])
def test_spread_covers_the_error(fn):
    for seed in SEEDS:
        pred = predict(observe(fn, 0.20, seed=seed), MAX_STEPS, None, bounds=(0.0, 1.0))
        assert abs(pred.final - truth(fn)) <= 3.0 * pred.spread + 0.01, (seed, pred)


def test_noise_free_curves_are_recovered_almost_exactly():
    for fn in (pow3, exp3, log_power):
        pred = predict(observe(fn, 0.25, noise=0.0), MAX_STEPS, None, bounds=(0.0, 1.0))
        assert pred.final == pytest.approx(truth(fn), abs=0.005)


# --- p_reach -----------------------------------------------------------------------------------------


def slow_pow3(s):  # c = 0.95, alpha = 0.3; 0.645 at step 250, 0.749 at step 1000
    return 0.95 - 0.8 * (np.asarray(s, float) / 10.0) ** -0.3


# Targets between the last observed value and the true final (reachable), and well above the final.
# Measured over seeds 0-4: reachable p_reach >= 0.996; unreachable <= 0.001 (pow3, log-power) and
# <= 0.11 (exp3, whose seed 0 is the ambiguous curve described above; 0.21 for a target of 0.80).
@pytest.mark.parametrize(
    ("fn", "reachable", "unreachable"),
    [(slow_pow3, 0.68, 0.85), (exp3, 0.62, 0.85), (log_power, 0.74, 0.92)],
    ids=["pow3", "exp3", "log_power"],
)
def test_p_reach_separates_reachable_from_unreachable_targets(fn, reachable, unreachable):
    for seed in SEEDS:
        curve = observe(fn, 0.25, seed=seed)
        assert max(v for _, v in curve) < reachable  # not reached yet: the extrapolation decides
        assert predict(curve, MAX_STEPS, reachable, bounds=(0.0, 1.0)).p_reach > 0.8
        assert predict(curve, MAX_STEPS, unreachable, bounds=(0.0, 1.0)).p_reach < 0.2


def test_p_reach_grows_as_the_target_falls():
    curve = observe(pow3, 0.25)
    ps = [predict(curve, MAX_STEPS, t, bounds=(0.0, 1.0)).p_reach for t in (0.95, 0.9, 0.86, 0.84, 0.8, 0.7)]
    assert ps == sorted(ps)
    assert all(P_MIN <= p <= P_MAX for p in ps)


def test_minimize_flips_target_and_keeps_units():
    curve = observe(loss, 0.25)
    pred = predict(curve, MAX_STEPS, 0.5, "minimize", bounds=(0.0, math.inf))
    assert pred.final == pytest.approx(truth(loss), abs=0.02)  # in loss units, not negated
    assert pred.p_reach > 0.8  # a loss of 0.5 or less is expected
    assert predict(curve, MAX_STEPS, 0.2, "minimize").p_reach < 0.2  # below the asymptote 0.3


def test_curve_already_past_the_target():
    curve = observe(pow3, 0.3)
    last = curve[-1][1]
    assert predict(curve, MAX_STEPS, last - 0.01).p_reach == P_MAX
    lowered = [(s, 2.0 - v) for s, v in curve]  # the same curve as a falling loss
    assert predict(lowered, MAX_STEPS, 2.0 - last + 0.01, "minimize").p_reach == P_MAX


def test_no_target_gives_an_uninformative_p_reach():
    pred = predict(observe(pow3, 0.25), MAX_STEPS, None)
    assert pred.p_reach == 0.5
    assert pred.final == pytest.approx(truth(pow3), abs=0.03)


# --- input handling ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "curve",
    [
        [],
        [(10, 0.5)],
        [(10, 0.5), (20, 0.6)],
        [(10, 0.5), (20, 0.6), (20, 0.61), (10, 0.52)],  # duplicates are not distinct points
        [(10, 0.5), (20, 0.6), (30, float("nan")), (40, float("inf"))],  # non-finite values skipped
        [(0, 0.1), (10, 0.5), (20, 0.6)],  # step 0 (the untrained model) is not fitted
    ],
)
def test_too_few_points_gives_none(curve):
    assert predict(curve, MAX_STEPS, 0.8) is None


def test_three_points_are_enough():
    pred = predict([(10, 0.5), (20, 0.6), (30, 0.65)], 100, 0.9)
    assert isinstance(pred, Prediction)
    assert pred.n_points == 3
    assert set(pred.families) <= {"pow3", "exp3", "log_power"}  # four-parameter families need more
    assert P_MIN <= pred.p_reach <= P_MAX


def test_order_of_reports_does_not_matter():
    curve = observe(exp3, 0.25, seed=3)
    shuffled = curve[:]
    random.Random(7).shuffle(shuffled)
    assert predict(shuffled, MAX_STEPS, 0.65) == predict(curve, MAX_STEPS, 0.65)


def test_last_report_of_a_step_wins():
    curve = observe(pow3, 0.25, seed=1)
    stale = [(s, v - 0.3) for s, v in curve[::3]]  # earlier, wrong reports of some steps
    pred = predict(stale + curve, MAX_STEPS, 0.8)
    assert pred == predict(curve, MAX_STEPS, 0.8)
    assert pred.n_points == len(curve)


def test_non_finite_values_are_ignored():
    curve = observe(pow3, 0.25, seed=2)
    dirty = curve[:]
    dirty.insert(5, (55, float("nan")))
    dirty.insert(9, (95, float("inf")))
    dirty.append((curve[-1][0] + 5, float("-inf")))
    assert predict(dirty, MAX_STEPS, 0.8) == predict(curve, MAX_STEPS, 0.8)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"goal": "max"}, "goal"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": float("nan")}, "max_steps"),
        ({"target": float("nan")}, "target"),
        ({"bounds": (1.0, 0.0)}, "bounds"),
    ],
)
def test_bad_arguments_are_rejected(kwargs, field):
    args = {"curve": observe(pow3, 0.25), "max_steps": MAX_STEPS, "target": 0.8} | kwargs
    with pytest.raises(ValueError, match=field):
        predict(**args)


def test_non_numeric_value_raises():
    with pytest.raises(ValueError):
        predict([(10, 0.5), (20, "oops"), (30, 0.6), (40, 0.62)], MAX_STEPS, 0.8)


# --- robustness --------------------------------------------------------------------------------------


def test_flat_curve():
    exact = [(s, 0.5) for s in range(10, 260, 10)]
    pred = predict(exact, MAX_STEPS, 0.8, bounds=(0.0, 1.0))
    assert pred.final == pytest.approx(0.5, abs=1e-6)
    assert pred.p_reach == P_MIN
    noisy = observe(lambda s: np.full(len(s), 0.5), 0.25, noise=0.01, seed=4)
    pred = predict(noisy, MAX_STEPS, 0.8, bounds=(0.0, 1.0))
    assert pred.final == pytest.approx(0.5, abs=0.05)
    assert pred.p_reach < 0.2


def test_noisy_curve_stays_sane():
    clean = predict(observe(pow3, 0.25, noise=0.005), MAX_STEPS, 0.8, bounds=(0.0, 1.0))
    for seed in SEEDS:
        pred = predict(observe(pow3, 0.25, noise=0.05, seed=seed), MAX_STEPS, 0.8, bounds=(0.0, 1.0))
        assert 0.0 <= pred.final <= 1.0
        assert abs(pred.final - truth(pow3)) < 0.15
        assert pred.spread > clean.spread  # more noise, less certainty
        assert P_MIN <= pred.p_reach <= P_MAX


def test_predictions_respect_bounds_near_the_ceiling():
    def near_one(s):  # rises to 0.995: unbounded fits easily overshoot 1.0
        return 0.995 - 0.2 * np.exp(-np.asarray(s, float) / 40.0)

    for seed in SEEDS:
        pred = predict(observe(near_one, 0.2, noise=0.01, seed=seed), MAX_STEPS, 0.999, bounds=(0.0, 1.0))
        assert 0.0 <= pred.final <= 1.0
        assert P_MIN <= pred.p_reach <= P_MAX


def test_when_every_fit_leaves_the_bounds_the_recent_level_is_predicted():
    curve = [(s, 0.9 + 0.0004 * s) for s in range(10, 250, 10)]  # a straight line into the ceiling
    pred = predict(curve, MAX_STEPS, 0.999, bounds=(0.0, 1.0))
    assert pred.families == ()
    assert pred.final == pytest.approx(np.mean([v for _, v in curve[-3:]]))
    assert pred.spread > 0.05  # as uncertain as the observed range
    assert P_MIN <= pred.p_reach <= P_MAX


def test_large_loss_values_and_float_steps():
    curve = [(s, 1000.0 + 5000.0 * s**-0.5) for s in range(10, 300, 10)]
    pred = predict(curve, MAX_STEPS, 1200.0, "minimize")
    assert pred.final == pytest.approx(1000.0 + 5000.0 / math.sqrt(MAX_STEPS), rel=0.01)
    epochs = [(float(e), 0.9 - 0.3 * e**-0.7) for e in np.arange(0.5, 3.01, 0.25)]
    pred = predict(epochs, 10, 0.8, bounds=(0.0, 1.0))
    assert pred.final == pytest.approx(0.9 - 0.3 * 10**-0.7, abs=0.01)


# --- priority and should_kill ------------------------------------------------------------------------


def _pred(final, p_reach):
    return Prediction(final=final, p_reach=p_reach, spread=0.01, n_points=10, families=("pow3",))


def test_priority_orders_by_p_reach_then_final():
    assert priority(_pred(0.7, 0.9)) > priority(_pred(0.95, 0.5))
    assert priority(_pred(0.9, P_MAX)) > priority(_pred(0.85, P_MAX))
    assert priority(_pred(0.2, P_MAX), "minimize") > priority(_pred(0.3, P_MAX), "minimize")
    assert priority(_pred(1200.0, 0.5), "minimize") > priority(_pred(1300.0, 0.5), "minimize")
    assert priority(None) == 0.5
    assert priority(None, default=1.0) == 1.0
    assert abs(priority(_pred(0.9, 0.4)) - 0.4) < 1e-4  # the tie-break never outweighs p_reach


def test_priority_on_real_predictions():
    good = predict(observe(pow3, 0.25), MAX_STEPS, 0.8, bounds=(0.0, 1.0))
    poor = predict(observe(exp3, 0.25), MAX_STEPS, 0.8, bounds=(0.0, 1.0))
    assert priority(good) > priority(poor)


def test_should_kill():
    hopeless = _pred(0.5, 0.01)
    assert should_kill(hopeless, 0.05, steps_done=300, min_steps=200)
    assert not should_kill(hopeless, 0.05, steps_done=100, min_steps=200)  # too early to judge
    assert not should_kill(_pred(0.8, 0.3), 0.05, steps_done=300, min_steps=200)
    assert not should_kill(None, 0.05, steps_done=10_000, min_steps=200)  # no prediction, no kill
    with pytest.raises(ValueError):
        should_kill(hopeless, 1.5, 300, 200)


# --- purity ------------------------------------------------------------------------------------------


def test_module_imports_only_numpy_and_scipy():
    # The families are a module of their own, the one part of Quanta feedback imports; both are pure.
    roots = set()
    for module in (feedback, curve_families):
        tree = ast.parse(Path(module.__file__).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module != curve_families.__name__:
                roots.add(node.module.split(".")[0])
    stdlib = {"__future__", "contextlib", "math", "warnings", "collections", "dataclasses", "typing"}
    assert roots <= stdlib | {"numpy", "scipy"}


# --- the fit driven through leastsq is the fit curve_fit made ----------------------------------------


def _fit_through_curve_fit(fam, x, y):
    """`feedback._fit` as it was written on `scipy.optimize.curve_fit` (kept as the reference)."""
    import contextlib
    import warnings

    from scipy.optimize import OptimizeWarning, curve_fit

    p0 = fam.guess(x, y)
    if p0 is None:
        return None
    pos = np.array(fam.positive)
    p0 = np.where(pos, np.maximum(p0, 1e-8), p0)
    rss0 = float(((fam.model(x, *p0) - y) ** 2).sum())
    best = [rss0 if math.isfinite(rss0) else math.inf, p0]

    def params(phi):
        return np.where(pos, np.exp(np.minimum(phi, 700.0)), phi)

    def model(xd, *phi):
        theta = params(phi)
        out = fam.model(xd, *theta)
        rss = float(((out - y) ** 2).sum())
        if rss < best[0]:
            best[0], best[1] = rss, theta
        return out

    def jac(xd, *phi):
        theta = params(phi)
        return fam.jac(xd, *theta) * np.where(pos, theta, 1.0)

    phi0 = np.where(pos, np.log(p0), p0)
    with warnings.catch_warnings(), contextlib.suppress(RuntimeError, ValueError, TypeError):
        warnings.simplefilter("ignore", OptimizeWarning)
        curve_fit(model, x, y, p0=phi0, jac=jac, method="lm", maxfev=feedback._MAXFEV, ftol=1e-6, xtol=1e-6)
    return (best[1], best[0]) if math.isfinite(best[0]) else None


def test_predictions_are_bit_identical_to_the_curve_fit_ones(monkeypatch):
    # The judge's verdicts (and so every policy decision that reads them) depend on these numbers: the
    # cheaper driver of the same MINPACK fit must give exactly the same predictions, not close ones.
    rng = random.Random(11)
    cases = []
    for fn in (pow3, exp3, log_power, loss):
        for frac in (0.03, 0.08, 0.2, 0.5):
            for seed in range(3):
                curve = observe(fn, frac, noise=rng.choice([0.0, 0.005, 0.03]), seed=seed)
                goal = "minimize" if fn is loss else "maximize"
                bounds = rng.choice([None, (0.0, 1.0) if goal == "maximize" else (0.0, math.inf)])
                cases.append((curve, goal, bounds))
    now = [predict(c, MAX_STEPS, 0.8 if g == "maximize" else 0.35, g, bounds=b) for c, g, b in cases]
    monkeypatch.setattr(feedback, "_fit", _fit_through_curve_fit)
    before = [predict(c, MAX_STEPS, 0.8 if g == "maximize" else 0.35, g, bounds=b) for c, g, b in cases]
    assert sum(p is not None and len(p.families) > 0 for p in now) > 30
    assert now == before
