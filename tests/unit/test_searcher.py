"""Ask/tell searchers over HyperOpt: determinism, pending trials, restore, nested spaces, TPE > random."""

from __future__ import annotations

import json
import math
import random
import statistics
import subprocess
import sys

import numpy as np
import pytest
from hyperopt import space_eval
from hyperopt.base import JOB_STATE_DONE, JOB_STATE_RUNNING, STATUS_FAIL, STATUS_OK, spec_from_misc

from quanta.search.factory import make_searcher
from quanta.search.knobs import SearchAlgoSpec
from quanta.search.searcher import (
    HistoryItem,
    HyperOptSearcher,
    RandomSearcher,
    Searcher,
    Suggestion,
    _plain,
    ask_seed,
)
from quanta.search.space import SpaceError

QUAD = {"x": {"uniform": [-5, 5]}, "y": {"uniform": [-5, 5]}}
NESTED = {
    "lr": {"loguniform": [1e-4, 1e-1]},
    "layers": {"randint": [1, 5]},
    "act": {"choice": ["relu", "tanh"]},
    "batch": 64,
    "optimizer": {
        "choice": [
            {"name": "sgd", "momentum": {"uniform": [0, 0.99]}},
            {"name": "adam", "beta1": {"quniform": [0.8, 0.99, 0.01]}},
            {"name": "rmsprop"},
        ]
    },
}
SEARCHERS = [HyperOptSearcher, RandomSearcher]


def quad(params) -> float:
    return (params["x"] - 1.5) ** 2 + (params["y"] + 2.0) ** 2


def nested_loss(p) -> float:
    loss = abs(math.log10(p["lr"]) + 2) + 0.1 * p["layers"]
    if p["optimizer"]["name"] == "sgd":
        loss += abs(p["optimizer"]["momentum"] - 0.9)
    return loss


def run(searcher, n, loss=quad, start=0):
    """Ask and tell `n` trials in turn; return the suggestions."""
    out = []
    for i in range(start, start + n):
        s = searcher.ask(i)
        searcher.tell(i, loss(s.params))
        out.append(s)
    return out


def docs(searcher):
    return {d["tid"]: d for d in searcher._trials.trials}


# -- protocol and construction ----------------------------------------------------------------------


@pytest.mark.parametrize("cls", SEARCHERS)
def test_implements_the_protocol(cls):
    s = cls(QUAD, seed=0)
    assert isinstance(s, Searcher)
    sug = s.ask(0)
    assert isinstance(sug, Suggestion)
    assert set(sug.params) == {"x", "y"} and set(sug.vals) == {"x", "y"}
    assert sug.vals == {"x": [sug.params["x"]], "y": [sug.params["y"]]}


def test_make_searcher_picks_the_algorithm_and_restores():
    tpe = SearchAlgoSpec(algorithm="tpe", n_startup=5)
    a = make_searcher(QUAD, 7, tpe)
    assert isinstance(a, HyperOptSearcher) and a.seed == 7 and a.n_startup == 5
    assert isinstance(make_searcher(QUAD, 7, SearchAlgoSpec(algorithm="random")), RandomSearcher)
    run(a, 12)
    b = make_searcher(QUAD, 7, tpe, history=a.history())
    assert b.ask(12) == a.ask(12)
    with pytest.raises(ValueError, match="rung"):
        make_searcher(QUAD, 7, SearchAlgoSpec(algorithm="bohb"))  # bohb fits at rungs: they must be given


def test_ask_seed_is_deterministic_and_distinct():
    assert ask_seed(3, 5) == ask_seed(3, 5)
    seeds = {ask_seed(s, n) for s in range(5) for n in range(200)}
    assert len(seeds) == 1000
    assert all(0 <= x < 2**32 for x in seeds)


# -- determinism ------------------------------------------------------------------------------------


def test_startup_stream_ignores_tells_and_their_order():
    n = 20
    a = HyperOptSearcher(NESTED, seed=11, n_startup=n)
    b = HyperOptSearcher(NESTED, seed=11, n_startup=n)
    c = HyperOptSearcher(NESTED, seed=11, n_startup=n)
    a_params = [s.params for s in run(a, n, nested_loss)]  # told one by one
    b_params = [b.ask(i).params for i in range(n)]  # all asked, then told backwards
    for i in reversed(range(n)):
        b.tell(i, nested_loss(b_params[i]))
    c_params = []
    for i in range(n):  # told in a scrambled order, some failed, some never
        c_params.append(c.ask(i).params)
        if i % 3 == 0 and i:
            c.tell(i - 2, None, ok=False)
            c.tell(i - 1, 0.5)
    assert a_params == b_params == c_params
    assert len({json.dumps(p, sort_keys=True) for p in a_params}) == n  # a different seed on every ask


def test_other_seeds_give_other_streams():
    streams = [[s.params for s in run(HyperOptSearcher(QUAD, seed=seed, n_startup=10), 10)] for seed in range(3)]
    assert streams[0] != streams[1] != streams[2] != streams[0]


def test_random_stream_ignores_tells_and_equals_tpe_startup():
    told = [s.params for s in run(RandomSearcher(NESTED, seed=4), 40, nested_loss)]
    untold = RandomSearcher(NESTED, seed=4)
    assert [untold.ask(i).params for i in range(40)] == told
    tpe = HyperOptSearcher(NESTED, seed=4, n_startup=15)
    assert [s.params for s in run(tpe, 15, nested_loss)] == told[:15]


def test_tpe_is_reproducible_end_to_end():
    a = run(HyperOptSearcher(NESTED, seed=2, n_startup=5), 30, nested_loss)
    b = run(HyperOptSearcher(NESTED, seed=2, n_startup=5), 30, nested_loss)
    assert a == b


def test_tpe_after_startup_depends_on_losses_not_tell_order():
    losses = [float(v) for v in np.random.default_rng(0).uniform(0, 10, 12)]

    def build(order, loss_of):
        s = HyperOptSearcher(QUAD, seed=5, n_startup=12)
        for i in range(12):
            s.ask(i)
        for i in order:
            s.tell(i, loss_of[i])
        return s

    forward = build(range(12), losses).ask(12)
    shuffled = list(range(12))
    random.Random(1).shuffle(shuffled)
    assert build(shuffled, losses).ask(12) == forward
    assert build(range(12), losses[::-1]).ask(12) != forward  # other losses, other suggestion


def test_tpe_with_no_startup_and_only_pending_trials():
    s = HyperOptSearcher(NESTED, seed=0, n_startup=0)
    for i in range(5):  # nothing told yet: TPE must still suggest
        s.ask(i)
    assert len(s) == 5


# -- pending trials, tells ------------------------------------------------------------------------


def test_pending_trials_are_running_docs_and_tells_update_them():
    s = HyperOptSearcher(QUAD, seed=0, n_startup=3)
    for i in range(3):
        s.ask(i)
    assert [d["state"] for d in docs(s).values()] == [JOB_STATE_RUNNING] * 3
    assert all(d["result"].get("loss") is None for d in docs(s).values())  # TPE: loss +inf

    s.tell(1, 0.25)
    assert docs(s)[1]["state"] == JOB_STATE_DONE
    assert docs(s)[1]["result"] == {"status": STATUS_OK, "loss": 0.25}
    s.tell(1, 0.125)  # telling twice overwrites
    assert docs(s)[1]["result"]["loss"] == 0.125
    s.tell(2, None, ok=False)
    assert docs(s)[2]["state"] == JOB_STATE_DONE and docs(s)[2]["result"]["status"] == STATUS_FAIL
    s.tell(0, float("nan"))  # a NaN loss is a failure
    assert docs(s)[0]["result"]["status"] == STATUS_FAIL
    s.tell(0, None)  # back in flight
    assert docs(s)[0]["state"] == JOB_STATE_RUNNING
    s.tell(2, 3.0, ok=False)  # a failure keeps no loss (TPE would otherwise rank it by it)
    assert docs(s)[2]["result"] == {"status": STATUS_FAIL}
    assert docs(s)[0]["state"] == JOB_STATE_RUNNING

    assert s.history() == [
        HistoryItem(0, s.history()[0].vals, None, True),
        HistoryItem(1, s.history()[1].vals, 0.125, True),
        HistoryItem(2, s.history()[2].vals, None, False),
    ]
    assert len(s._trials.trials) == 3  # one document per trial, however often told


@pytest.mark.parametrize("cls", SEARCHERS)
def test_asking_twice_and_telling_unknown_trials_raise(cls):
    s = cls(QUAD, seed=0)
    s.ask(0)
    with pytest.raises(ValueError, match="already asked"):
        s.ask(0)
    with pytest.raises(KeyError):
        s.tell(1, 0.5)
    with pytest.raises(ValueError):
        s.ask(-1)
    s.ask(7)  # numbers need not be contiguous
    s.tell(7, 1.0)


# -- restore ----------------------------------------------------------------------------------------


def searcher_with_history(cls, space, loss, n=30, seed=3, n_startup=10):
    """Run `n` asks with a realistic mix of told, failed and still-pending trials, told out of order."""
    a = cls(space, seed=seed, n_startup=n_startup)
    pending = []
    for i in range(n):
        s = a.ask(i)
        if i % 7 == 3:
            a.tell(i, None, ok=False)
        elif i % 4 == 1:
            pending.append((i, loss(s.params)))  # told later, or never
        else:
            a.tell(i, loss(s.params))
        if len(pending) > 2:
            j, value = pending.pop(0)
            a.tell(j, value)
    return a


@pytest.mark.parametrize("cls", SEARCHERS)
@pytest.mark.parametrize(("space", "loss"), [(QUAD, quad), (NESTED, nested_loss)])
def test_restore_asks_what_the_original_would_have_asked(cls, space, loss):
    a = searcher_with_history(cls, space, loss)
    history = a.history()
    assert any(h.loss is None and h.ok for h in history)  # pending trials are part of it
    assert any(not h.ok for h in history)

    stored = json.loads(json.dumps([h.__dict__ for h in history]))  # through a database and back
    random.Random(0).shuffle(stored)
    b = cls.restore(space, 3, 10, [HistoryItem(**h) for h in stored])
    assert b.history() == history
    assert b.ask(30).params == a.ask(30).params
    # ...and they keep agreeing afterwards
    for i in range(31, 36):
        x, y = a.ask(i), b.ask(i)
        assert x == y
        a.tell(i, loss(x.params))
        b.tell(i, loss(y.params))


def test_restored_searcher_enforces_the_same_rules():
    a = searcher_with_history(HyperOptSearcher, QUAD, quad, n=5)
    b = HyperOptSearcher.restore(QUAD, 3, 10, a.history())
    with pytest.raises(ValueError):
        b.ask(2)
    b.tell(2, 0.5)  # pending or told trials may be told (again)
    with pytest.raises(KeyError):
        b.tell(5, 0.5)


def test_restore_rejects_bad_history():
    item = HistoryItem(0, {"x": [0.0], "y": [0.0]}, 1.0)
    with pytest.raises(ValueError, match="repeats"):
        HyperOptSearcher.restore(QUAD, 0, 5, [item, item])
    with pytest.raises(ValueError, match="not in the space"):
        HyperOptSearcher.restore(QUAD, 0, 5, [HistoryItem(0, {"z": [0.0]}, 1.0)])


# -- nested spaces, plain values --------------------------------------------------------------------


def test_nested_choice_params_and_active_vals():
    s = HyperOptSearcher(NESTED, seed=0, n_startup=10)
    names = set()
    for sug in run(s, 40, nested_loss):  # startup and TPE phases
        p, v = sug.params, sug.vals
        opt = p["optimizer"]
        names.add(opt["name"])
        assert p["batch"] == 64 and p["act"] in ("relu", "tanh")
        assert 1e-4 <= p["lr"] <= 1e-1 and 1 <= p["layers"] < 5
        assert (
            set(v)
            == {"lr", "layers", "act", "optimizer"}
            | {
                "sgd": {"optimizer/0/momentum"},
                "adam": {"optimizer/1/beta1"},
                "rmsprop": set(),
            }[opt["name"]]
        )
        if opt["name"] == "sgd":
            assert set(opt) == {"name", "momentum"} and 0 <= opt["momentum"] <= 0.99
        elif opt["name"] == "adam":
            assert set(opt) == {"name", "beta1"}
        else:
            assert opt == {"name": "rmsprop"}
        assert s.params_of(v) == p
        # params_of is hyperopt's space_eval with the graph sorted once (a plain re-implementation)
        assert p == _plain(space_eval(s._hp_space, spec_from_misc({"vals": dict(v)})))
    assert names == {"sgd", "adam", "rmsprop"}


def plain(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(plain(v) for v in value)
    return type(value) in (int, float, str, bool, type(None))


@pytest.mark.parametrize("cls", SEARCHERS)
def test_params_and_vals_are_plain_and_json_serialisable(cls):
    space = {
        **NESTED,
        "drop": {"normal": [0.1, 0.01]},
        "width": {"qloguniform": [8, 256, 8]},
        "flag": {"choice": [True, False]},
    }
    for sug in run(cls(space, seed=1, n_startup=5), 12, nested_loss):
        assert plain(sug.params) and plain(sug.vals)
        assert type(sug.params["layers"]) is int and type(sug.vals["layers"][0]) is int
        assert type(sug.vals["optimizer"][0]) is int  # a choice is stored as its index
        assert json.loads(json.dumps(sug.vals)) == sug.vals
        assert json.loads(json.dumps(sug.params)) == sug.params


FLAT = {  # every kind of flat dimension
    "n": {"randint": [3, 8]},
    "lr": {"loguniform": [1e-4, 0.3]},
    "drop": {"normal": [0.1, 0.01]},
    "width": {"qloguniform": [8, 256, 8]},
    "depth": {"quniform": [1, 6, 1]},
    "act": {"choice": ["relu", "tanh", "gelu"]},
    **QUAD,
}


@pytest.mark.parametrize(
    ("space", "loss"), [(NESTED, nested_loss), ({"n": {"randint": [3, 8]}, **QUAD}, quad), (FLAT, quad)]
)
def test_tpe_asks_what_hyperopts_own_suggest_asks(space, loss):
    # The searcher builds TPE's posterior graph once (quanta.search.tpe) instead of at every ask and runs it
    # as a fixed program of calls (conditional spaces too: the posterior vectorises them, no switch is
    # left); at every ask, with pending, failed and finished trials behind it, it must suggest what
    # hyperopt.tpe.suggest suggests from the same trials and seed.
    from hyperopt import tpe

    s = HyperOptSearcher(space, seed=4, n_startup=5)
    for n in range(45):
        seed = ask_seed(4, n)
        theirs = tpe.suggest([n], s._domain, s._trials, seed, n_startup_jobs=5, verbose=False)
        ours = s._posterior().suggest([n], s._trials, seed, n_startup_jobs=5)
        assert ours[0]["misc"]["vals"] == theirs[0]["misc"]["vals"]
        sug = s.ask(n)
        assert {k: v for k, v in ours[0]["misc"]["vals"].items() if v} == sug.vals
        if n % 5 == 3:
            s.tell(n, None, ok=False)
        elif n % 5 != 4:  # every fifth stays pending
            s.tell(n, loss(sug.params))
    assert s._posterior()._program is not None


def test_randint_stays_in_bounds_after_startup():
    s = HyperOptSearcher({"n": {"randint": [3, 8]}, "x": {"uniform": [0, 1]}}, seed=0, n_startup=5)
    seen = {sug.params["n"] for sug in run(s, 40, lambda p: abs(p["n"] - 6) + p["x"])}
    assert seen <= set(range(3, 8)) and 6 in seen


def test_constant_only_space():
    s = HyperOptSearcher({"a": 1, "b": {"c": "x"}}, seed=0)
    assert s.ask(0) == Suggestion(params={"a": 1, "b": {"c": "x"}}, vals={})


def test_colliding_labels_are_a_space_error():
    with pytest.raises(SpaceError):
        HyperOptSearcher({"a/b": {"uniform": [0, 1]}, "a": {"b": {"uniform": [0, 1]}}}, seed=0)


def test_invalid_space_is_a_space_error():
    with pytest.raises(SpaceError) as info:
        RandomSearcher({"x": {"uniform": [1, 0]}}, seed=0)
    assert info.value.path == "space.x.uniform"


# -- quality ----------------------------------------------------------------------------------------


def best_loss(cls, seed, n=150):
    return min(quad(s.params) for s in run(cls(QUAD, seed=seed, n_startup=20), n))


def test_tpe_beats_random_on_a_quadratic():
    # Measured (hyperopt 0.3.0): TPE best 0.012 / 0.018 / 0.065, random 0.275 / 0.271 / 0.166 (seeds 0-2).
    tpe = statistics.median(best_loss(HyperOptSearcher, seed) for seed in range(3))
    rnd = statistics.median(best_loss(RandomSearcher, seed) for seed in range(3))
    assert tpe < 0.08
    assert rnd > 0.1
    assert tpe * 3 < rnd


# -- layering ---------------------------------------------------------------------------------------


def test_search_layer_imports_nothing_heavy():
    code = (
        "import sys, quanta.search.searcher, quanta.search.space\n"
        "bad = [m for m in ('torch', 'celery', 'sqlmodel', 'redis', 'fastapi') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("seed", range(6))
def test_the_numpy_split_equals_hyperopts_ap_split_trials(seed):
    # quanta.search.tpe binds each parameter's below/above split computed with numpy; it must equal what
    # hyperopt's own `ap_split_trials` returns, with tied losses (many pending trials are +inf), a
    # parameter seen on every trial, one seen on some (conditional), one on none, and int choices.
    from hyperopt.tpe import ap_split_trials

    from quanta.search.tpe import _split

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 80))
    tids = list(range(-3, n - 3))
    losses = [float("inf") if rng.random() < 0.4 else float(rng.integers(0, 5)) for _ in tids]
    some = [t for t in tids if rng.random() < 0.5]
    idxs = {"all": tids, "some": some, "none": [], "choice": tids}
    vals = {
        "all": [float(v) for v in rng.random(n)],
        "some": [float(v) for v in rng.random(len(some))],
        "none": [],
        "choice": [int(v) for v in rng.integers(0, 3, n)],
    }
    nodes = {label: object() for label in idxs}
    observed = {label: (np.asarray(idxs[label]), np.asarray(vals[label])) for label in idxs}
    ours = _split(nodes, observed, tids, losses, 0.25)
    for label, node in nodes.items():
        below, above = ap_split_trials(idxs[label], vals[label], tids, losses, 0.25)
        for mine, theirs in zip(ours[node], (below, above), strict=True):
            assert mine.dtype == theirs.dtype and mine.tolist() == theirs.tolist()
