"""The multivariate TPE (`app.search.joint_tpe`) and `search.multivariate` on the multi-fidelity searcher.

No training: synthetic objectives with known structure.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from app.search.factory import make_searcher
from app.search.joint_tpe import _Mixture, decode, encode, encode_vals, propose, split
from app.search.multifidelity import MultiFidelityTPE
from app.search.searcher import RandomSearcher
from app.search.space import Dim, compile_space, space_dims
from app.spec import SearchSpec

SPACE = {
    "x": {"uniform": [0.0, 1.0]},
    "y": {"uniform": [0.0, 1.0]},
    "lr": {"loguniform": [1e-4, 1.0]},
    "opt": {"choice": [{"name": "sgd", "momentum": {"uniform": [0.5, 0.99]}}, {"name": "adam"}]},
}


def loss(p: dict) -> float:
    """Good near (0.2, 0.8) or (0.8, 0.2), at lr 0.01, with SGD at momentum 0.9 or with Adam."""
    d = min(math.hypot(p["x"] - 0.2, p["y"] - 0.8), math.hypot(p["x"] - 0.8, p["y"] - 0.2))
    opt = p["opt"]
    penalty = 0.1 if opt["name"] == "adam" else 0.2 * abs(opt["momentum"] - 0.9)
    return d + 0.05 * abs(math.log10(p["lr"]) + 2) + penalty


def test_space_dims_label_as_hyperopt_and_nest_under_their_choice():
    dims = space_dims(SPACE)
    assert [d.label for d in dims] == ["x", "y", "lr", "opt", "opt/0/momentum"]
    assert {d.label for d in dims} == set(MultiFidelityTPE(SPACE, 0, levels=(10,))._labels)
    assert dims[3] == Dim("opt", "choice", (2.0,), ())
    assert dims[4].parents == (("opt", 0),)


@pytest.mark.parametrize(
    ("kind", "args", "values"),
    [
        ("uniform", (-2.0, 3.0), [-2.0, 0.5, 3.0]),
        ("loguniform", (1e-4, 0.3), [1e-4, 0.01, 0.3]),
        ("quniform", (0.0, 10.0, 2.0), [0.0, 4.0, 10.0]),
        ("qloguniform", (1.0, 1000.0, 5.0), [5.0, 100.0, 1000.0]),
        ("randint", (3.0, 8.0), [3, 5, 7]),
        ("normal", (1.0, 2.0), [-3.0, 1.0, 4.5]),
        ("choice", (3.0,), [0, 1, 2]),
    ],
)
def test_decode_inverts_encode(kind, args, values):
    dim = Dim("p", kind, args)
    for v in values:
        u = encode(dim, v)
        if kind != "normal" and kind != "choice":
            assert 0.0 <= u <= 1.0
        assert decode(dim, u) == pytest.approx(v)
    if kind in ("quniform", "qloguniform"):  # off-grid coordinates round to a multiple of q
        assert decode(dim, 0.37) % args[2] == pytest.approx(0.0, abs=1e-9)


def test_each_density_integrates_to_one():
    """Truncated kernels renormalised to the range; the choice kernel sums to one."""
    rows = np.array([[0.05, 0.0], [0.5, 1.0], [0.97, 2.0]])
    mix = _Mixture([Dim("a", "uniform", (0.0, 1.0)), Dim("c", "choice", (3.0,))], rows)
    grid = (np.arange(20000) + 0.5) / 20000
    xs = np.column_stack([grid, np.full_like(grid, np.nan)])
    assert np.exp(mix.log_pdf(xs)).mean() == pytest.approx(1.0, abs=1e-3)
    cats = np.column_stack([np.full(3, np.nan), np.arange(3.0)])
    assert np.exp(mix.log_pdf(cats)).sum() == pytest.approx(1.0, abs=1e-9)


def test_split_takes_hyperopts_count_of_lowest_finite_losses():
    losses = np.array([0.5, math.inf, 0.1, 0.3, 0.1, math.inf, 0.9, 0.2, 0.4])
    below, above = split(losses, 0.25)  # ceil(0.25 * 3) = 1
    assert below.tolist() == [2] and sorted(above.tolist()) == [0, 1, 3, 4, 5, 6, 7, 8]
    below, _ = split(losses, 1.0)  # 3: ties by position
    assert below.tolist() == [2, 4, 7]
    below, above = split(np.array([math.inf, math.inf, 1.0]), 1.0)  # pending trials are never "good"
    assert below.tolist() == [2] and above.tolist() == [0, 1]


def test_proposals_lie_in_the_space_follow_its_choices_and_depend_only_on_the_seed():
    dims = space_dims(SPACE)
    rng = np.random.default_rng(0)
    searcher = RandomSearcher(SPACE, 0)
    vals = [searcher.ask(n).vals for n in range(30)]
    rows = np.array([encode_vals(dims, v) for v in vals])
    losses = rng.random(30)
    losses[::4] = math.inf
    seen = set()
    for seed in range(40):
        out = propose(dims, rows, losses, 0.25, seed)
        assert out == propose(dims, rows, losses, 0.25, seed)
        assert 0.0 <= out["x"][0] <= 1.0 and 0.0 <= out["y"][0] <= 1.0 and 1e-4 <= out["lr"][0] <= 1.0
        assert ("opt/0/momentum" in out) == (out["opt"] == [0])
        if "opt/0/momentum" in out:
            assert 0.5 <= out["opt/0/momentum"][0] <= 0.99
        seen.add(round(out["x"][0], 9))
    assert len(seen) > 30  # different seeds, different draws
    with pytest.raises(ValueError, match="rows"):
        propose(dims, rows[:5], losses, 0.25, 0)


def _best_of(searcher, n: int = 40) -> float:
    best = math.inf
    for i in range(n):
        value = loss(searcher.ask(i).params)
        searcher.observe(i, 100, value)
        searcher.tell(i, value)
        best = min(best, value)
    return best


@pytest.mark.slow
def test_the_joint_model_learns_where_random_search_does_not():
    """Best loss after 40 trials, 30 seeds: the multivariate searcher's median is clearly below random
    search's (measured when written: 0.130 against 0.155; HyperOpt's univariate TPE 0.120)."""
    seeds = range(30)
    joint = [_best_of(MultiFidelityTPE(SPACE, s, 10, levels=(100,), multivariate=True)) for s in seeds]
    rand = [_best_of(RandomSearcher(SPACE, s, 10)) for s in seeds]
    assert statistics.median(joint) <= 0.9 * statistics.median(rand), (joint, rand)


def test_multivariate_restores_exactly_and_asks_otherwise_than_univariate():
    def run(searcher, n=16):
        for i in range(n):
            value = loss(searcher.ask(i).params)
            for step in (10, 30, 90):
                searcher.observe(i, step, value + 1.0 / step)
            if i % 3:
                searcher.tell(i, value + 1.0 / 90)
        return searcher

    options = {"levels": (10, 30, 90), "min_points": 4, "random_fraction": 0.0}
    a = run(MultiFidelityTPE(SPACE, 5, 6, multivariate=True, **options))
    b = MultiFidelityTPE.restore(SPACE, 5, 6, a.history(), multivariate=True, **options)
    uni = run(MultiFidelityTPE(SPACE, 5, 6, **options))
    assert b.ask(16).vals == a.ask(16).vals
    assert a.history()[:6] == uni.history()[:6]  # the random start is the same
    assert [h.vals for h in a.history()[6:]] != [h.vals for h in uni.history()[6:16]]


def test_the_specs_field_reaches_the_searcher_and_a_compiled_space_is_refused():
    spec = SearchSpec.model_validate(
        {
            "name": "s",
            "trainable": "m:f",
            "space": SPACE,
            "metric": {"name": "loss", "goal": "minimize"},
            "search": {"multivariate": True},
        }
    )
    searcher = make_searcher(spec.space, spec.seed, spec.search, rungs=spec.searcher_rungs())
    assert isinstance(searcher, MultiFidelityTPE) and searcher.multivariate
    plain = make_searcher(spec.space, spec.seed, spec.search.model_copy(update={"multivariate": False}), rungs=(1, 3))
    assert isinstance(plain, MultiFidelityTPE) and not plain.multivariate
    with pytest.raises(ValueError, match="spec's space"):
        MultiFidelityTPE(compile_space(SPACE), 0, levels=(10,), multivariate=True)
