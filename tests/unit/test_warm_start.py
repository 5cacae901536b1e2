"""Warm start, pure and in memory: points a user gives (checked against the space, asked first), earlier
searches' trials seeding TPE and the multi-fidelity searcher, the exact replay after a restore, and the
store-side checks (a missing search, another space, another metric). No training."""

from __future__ import annotations

import json
import statistics

import pytest

from quanta.controller import Controller, ControllerOptions
from quanta.db.memory import MemoryStore
from quanta.db.warm import WarmStartError, check_warm_start, items_from_json, warm_items
from quanta.executor.policy import make_policy
from quanta.search.factory import make_searcher
from quanta.search.multifidelity import MultiFidelityTPE
from quanta.search.searcher import HistoryItem, HyperOptSearcher, Searcher
from quanta.search.space import SpaceError, point_vals, space_difference
from quanta.sim.runtime import SimRuntime
from quanta.spec import SearchSpec, SpecError, parse_spec

NESTED = {
    "lr": {"loguniform": [1e-4, 1e-1]},
    "layers": {"randint": [1, 5]},
    "batch": 64,
    "optimizer": {
        "choice": [
            {"name": "sgd", "momentum": {"uniform": [0, 0.99]}},
            {"name": "adam", "beta1": {"quniform": [0.8, 0.99, 0.01]}},
            {"name": "rmsprop"},
        ]
    },
}
LINE = {"x": {"uniform": [0, 1]}}


def searcher_of(spec: SearchSpec, history=(), warm=()) -> Searcher:
    """The searcher the controller builds for `spec` (the factory on the spec's blocks)."""
    return make_searcher(spec.space, spec.seed, spec.search, rungs=spec.searcher_rungs(), history=history, warm=warm)


def spec_of(space=None, **search) -> dict:
    return {
        "name": "w",
        "trainable": "tests.trainables:linear",
        "space": space or LINE,
        "metric": {"name": "loss", "goal": "minimize"},
        "budget": {"max_trials": 10, "max_steps": 90},
        "search": search,
    }


# ---- points -------------------------------------------------------------------------------------------


def test_a_point_becomes_the_searchers_record_and_back():
    point = {"lr": 0.01, "layers": 3, "optimizer": {"name": "sgd", "momentum": 0.9}}
    vals = point_vals(NESTED, point)
    assert vals == {"lr": [0.01], "layers": [3], "optimizer": [0], "optimizer/0/momentum": [0.9]}
    s = HyperOptSearcher(NESTED, 0, points=[vals])
    assert s.ask(0).params == {**point, "batch": 64}  # the constant is implied
    assert point_vals(NESTED, {"lr": 0.01, "layers": 1, "optimizer": {"name": "rmsprop"}})["optimizer"] == [2]


@pytest.mark.parametrize(
    ("point", "path", "words"),
    [
        ({"lr": 2.0, "layers": 1, "optimizer": {"name": "rmsprop"}}, "p.lr", "outside"),
        ({"lr": 0.01, "layers": 5, "optimizer": {"name": "rmsprop"}}, "p.layers", "integer in [1, 5)"),
        ({"lr": 0.01, "optimizer": {"name": "rmsprop"}}, "p.layers", "missing"),
        ({"lr": 0.01, "layers": 1, "optimizer": {"name": "rmsprop"}, "wd": 1}, "p.wd", "not a parameter"),
        ({"lr": 0.01, "layers": 1, "optimizer": {"name": "lamb"}}, "p.optimizer", "none of the choices"),
        ({"lr": 0.01, "layers": 1, "optimizer": {"name": "sgd", "momentum": 1.5}}, "p.optimizer", "outside"),
        ({"lr": "big", "layers": 1, "optimizer": {"name": "rmsprop"}}, "p.lr", "finite number"),
        ({"lr": 0.01, "layers": 1, "batch": 32, "optimizer": {"name": "rmsprop"}}, "p.batch", "constant"),
    ],
)
def test_a_bad_point_names_the_parameter(point, path, words):
    with pytest.raises(SpaceError) as err:
        point_vals(NESTED, point, "p")
    assert err.value.path == path and words in err.value.reason


def test_the_spec_checks_its_points_and_warm_start_ids():
    with pytest.raises(SpecError) as err:
        parse_spec(spec_of(points_to_evaluate=[{"x": 0.5}, {"x": 1.5}]))
    assert err.value.errors[0][0] == "search.points_to_evaluate[1].x" and "outside" in err.value.errors[0][1]
    with pytest.raises(SpecError, match="budget.max_trials is 10"):
        parse_spec(spec_of(points_to_evaluate=[{"x": 0.5}] * 11))
    with pytest.raises(SpecError, match="search.warm_start_from: .*twice"):
        parse_spec(spec_of(warm_start_from=[3, 3]))
    spec = parse_spec(spec_of(points_to_evaluate=[{"x": 0.25}, {"x": 0.75}], warm_start_from=[1]))
    s = searcher_of(spec)
    assert [s.ask(0).params, s.ask(1).params] == [{"x": 0.25}, {"x": 0.75}]
    assert s.ask(2).params != {"x": 0.75}  # then the searcher proposes


# ---- warm history -------------------------------------------------------------------------------------


def _bowl(x: float) -> float:
    return (x - 0.3) ** 2


def _warm_items(n: int = 40) -> list[HistoryItem]:
    """`n` earlier trials spread over [0, 1] with their losses on a bowl centred at 0.3."""
    xs = [(k + 0.5) / n for k in range(n)]
    return [
        HistoryItem(k, {"x": [x]}, _bowl(x), curve=((30, _bowl(x) + 0.1), (90, _bowl(x)))) for k, x in enumerate(xs)
    ]


def _errors(searcher, n: int) -> list[float]:
    """How far each of `n` asks lands from the bowl's optimum."""
    return [abs(searcher.ask(i).params["x"] - 0.3) for i in range(n)]


def test_warm_history_moves_tpe_towards_the_earlier_optimum_at_once():
    cold = HyperOptSearcher(LINE, 7, n_startup=10)
    warm = HyperOptSearcher(LINE, 7, n_startup=10, warm=_warm_items())
    assert warm.warm_size == 40 and len(warm) == 0 and warm.history() == []  # seeds, not trials
    # Cold TPE is random for its first 10 asks; seeded, it models the bowl from the first ask. (Its own
    # asks stay pending here, as when a search starts many trials at once.)
    cold_err = _errors(cold, 20)
    warm_err = _errors(warm, 20)
    assert statistics.median(warm_err) < 0.6 * statistics.median(cold_err), (warm_err, cold_err)
    assert warm.ask(20) != HyperOptSearcher(LINE, 7, n_startup=10).ask(20)  # not the random stream


def test_warm_curves_feed_the_multi_fidelity_levels():
    mf = MultiFidelityTPE(LINE, 7, n_startup=5, levels=(30, 90), warm=_warm_items())
    level, values = mf.level_losses()
    assert level == 1 and len(values) == 40 and all(n < 0 for n in values)  # warm tids are negative
    cold = MultiFidelityTPE(LINE, 7, n_startup=5, levels=(30, 90))
    assert statistics.median(_errors(mf, 20)) < 0.6 * statistics.median(_errors(cold, 20))


def _through_json(items: list[HistoryItem]) -> list[dict]:
    return json.loads(json.dumps([{**h.__dict__, "curve": [list(p) for p in h.curve]} for h in items]))


@pytest.mark.parametrize("algorithm", ["tpe", "bohb"])
def test_a_restored_searcher_replays_points_and_warm_history_exactly(algorithm):
    spec = parse_spec(spec_of(algorithm=algorithm, n_startup=3, points_to_evaluate=[{"x": 0.9}], warm_start_from=[1]))
    warm = items_from_json(_through_json(_warm_items(12)))
    a = searcher_of(spec, warm=warm)
    for i in range(5):
        s = a.ask(i)
        a.observe(i, 30, _bowl(s.params["x"]) + 0.1)
        if i != 3:  # trial 3 stays in flight
            a.tell(i, _bowl(s.params["x"]))
    history = items_from_json(_through_json(a.history()))  # through a database and back
    b = searcher_of(spec, history, warm=warm)
    assert b.history() == a.history()
    for i in range(5, 9):
        x, y = a.ask(i), b.ask(i)
        assert x == y
        a.tell(i, _bowl(x.params["x"]))
        b.tell(i, _bowl(y.params["x"]))
    # Without the warm history the restored searcher would ask something else: the replay needs it.
    assert searcher_of(spec, history).ask(5) != searcher_of(spec, history, warm=warm).ask(5)


# ---- spaces that differ -------------------------------------------------------------------------------


def test_space_difference_names_the_first_parameter_that_differs():
    assert space_difference(NESTED, json.loads(json.dumps(NESTED))) is None
    assert space_difference({"a": {"uniform": [0, 1]}}, {"a": {"uniform": [0.0, 1.0]}}) is None
    other = json.loads(json.dumps(NESTED))
    other["optimizer"]["choice"][0]["momentum"] = {"uniform": [0, 0.9]}
    assert space_difference(NESTED, other) == (
        "space.optimizer.choice[0].momentum: uniform [0, 0.99] here, uniform [0, 0.9] there"
    )
    assert space_difference(LINE, {"x": {"loguniform": [0.1, 1]}}) == (
        "space.x: uniform [0, 1] here, loguniform [0.1, 1] there"
    )
    assert space_difference(LINE, {**LINE, "y": {"uniform": [0, 1]}}) == "space.y: absent here, a parameter there"
    assert space_difference({**LINE, "y": 3}, LINE) == "space.y: a parameter here, absent there"


def _finished_search(store: MemoryStore, space=None, goal="minimize") -> int:
    """A stored search with three finished trials (one failed) and one still running."""
    data = spec_of(space)
    data["metric"] = {"name": "loss", "goal": goal}
    sp = parse_spec(data)
    row = store.create_search("old", sp.model_dump(mode="json"), 0.0)
    assert row.id is not None
    from quanta.db.models import ReportRow

    for n, (x, status, metric) in enumerate(
        [(0.1, "completed", 0.04), (0.5, "stopped", 0.05), (0.7, "failed", None), (0.9, "running", 0.4)]
    ):
        t = store.add_trial(row.id, n, {"x": x}, {"x": [x]}, 0.0)
        assert t.id is not None
        store.update_trial(t.id, status=status, metric=metric)
        if metric is not None:
            store.add_rows([ReportRow(trial_id=t.id, search_id=row.id, step=30, at=0.0, metrics={}, objective=metric)])
    return row.id


def test_warm_items_are_the_finished_trials_of_searches_that_fit():
    store = MemoryStore()
    old = _finished_search(store)
    spec = parse_spec(spec_of(warm_start_from=[old]))
    items = warm_items(store, spec)
    assert [(d["number"], d["loss"], d["ok"]) for d in items] == [(0, 0.04, True), (1, 0.05, True), (2, None, False)]
    assert items[0]["curve"] == [[30, 0.04]] and items[0]["vals"] == {"x": [0.1]}
    # Each error names what is wrong: the missing id (404), the parameter (422), the metric (422).
    with pytest.raises(WarmStartError) as err:
        check_warm_start(store, parse_spec(spec_of(warm_start_from=[old, 99])))
    assert err.value.missing and err.value.field == "search.warm_start_from[1]" and "search 99" in str(err.value)
    other = _finished_search(store, space={"x": {"uniform": [0, 2]}})
    with pytest.raises(WarmStartError) as err:
        check_warm_start(store, parse_spec(spec_of(warm_start_from=[other])))
    assert not err.value.missing and "space.x: uniform [0, 1] here, uniform [0, 2] there" in err.value.reason
    maximize = _finished_search(store, goal="maximize")
    with pytest.raises(WarmStartError, match="maximizes 'loss'"):
        check_warm_start(store, parse_spec(spec_of(warm_start_from=[maximize])))


def test_the_controller_keeps_the_warm_history_it_started_with_and_restores_from_it():
    store = MemoryStore()
    old = _finished_search(store)
    ctl = Controller(store, SimRuntime(1, 2, max_per_device=1), ControllerOptions(policy=make_policy("fifo")))
    spec = parse_spec(spec_of(algorithm="tpe", n_startup=2, points_to_evaluate=[{"x": 0.2}], warm_start_from=[old]))
    sid = ctl.submit(spec)
    kept = store.warm_start(sid)
    assert kept is not None and len(kept) == 3
    ctl.book.sync(0.0)
    trials = sorted(ctl.trials_of(sid), key=lambda t: t.number)
    assert trials[0].params == {"x": 0.2}  # the given point first
    # The earlier search changes afterwards (here: deleted); a restart replays the kept copy.
    store._searches.pop(old)
    expected = ctl.search(sid).searcher.ask(len(trials))
    again = Controller(store, SimRuntime(1, 2, max_per_device=1), ControllerOptions(policy=make_policy("fifo")))
    again.load()
    assert again.search(sid).searcher.ask(len(trials)) == expected
    # Nothing is stored for a search that cannot be warm-started.
    before = len(store.searches())
    with pytest.raises(WarmStartError):
        ctl.submit(parse_spec(spec_of(warm_start_from=[old])))  # deleted now
    assert len(store.searches()) == before
