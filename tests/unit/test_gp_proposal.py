"""The GP proposal of BOHB's model asks (`search.acquisition: gp`): encoding, conditions, a known optimum,
and a rebuilt searcher asking what the original asks (no training)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quanta.search.gp_proposal import GPProposer, fitted_size
from quanta.search.multifidelity import MultiFidelityTPE
from quanta.search.searcher import HyperOptSearcher

SPACE = {
    "lr": {"loguniform": [1e-4, 0.3]},
    "x": {"uniform": [0.0, 1.0]},
    "k": {"randint": [2, 7]},
    "opt": {"choice": [{"name": "sgd", "m": {"uniform": [0.5, 0.99]}}, {"name": "adam"}]},
}
LEVELS = (1, 3, 9)


def _loss(p: dict) -> float:
    return (math.log10(p["lr"]) + 2) ** 2 + (p["x"] - 0.3) ** 2 + (0.5 if p["opt"]["name"] == "sgd" else 0.0)


def _searcher(acquisition: str, seed: int = 0) -> MultiFidelityTPE:
    return MultiFidelityTPE(SPACE, seed, 10, levels=LEVELS, min_points=5, acquisition=acquisition)


def _drive(s: MultiFidelityTPE, trials: int) -> None:
    for n in range(trials):
        f = _loss(s.ask(n).params)
        for step in LEVELS:
            s.observe(n, step, f + 1.0 / step)
        s.tell(n, f + 1.0 / LEVELS[-1])


def _proposer() -> GPProposer:
    return GPProposer(HyperOptSearcher(SPACE, 0)._domain)


def test_decoding_gives_values_inside_the_space_and_only_the_active_labels() -> None:
    gp = _proposer()
    rng = np.random.default_rng(0)
    for u in rng.random((200, len(gp.labels))):
        vals = gp.decode(u)
        assert 1e-4 <= vals["lr"][0] <= 0.3 and 0.0 <= vals["x"][0] <= 1.0
        assert vals["k"][0] in range(2, 7) and isinstance(vals["k"][0], int)
        assert ("opt/0/m" in vals) == (vals["opt"][0] == 0)  # momentum only under sgd
        # Decoding what encoding gives returns the same record.
        again = gp.decode(gp.encode(vals))
        assert again.keys() == vals.keys()
        for key in vals:
            assert math.isclose(float(again[key][0]), float(vals[key][0]), rel_tol=1e-9, abs_tol=1e-12)


def test_the_vectorised_snap_equals_decoding_then_encoding() -> None:
    gp = _proposer()
    u = np.random.default_rng(1).random((300, len(gp.labels)))
    snapped = gp._snap(u)
    expected = np.array([gp.encode(gp.decode(row)) for row in u])
    assert np.allclose(snapped, expected)


def test_fitted_sizes_grow_geometrically_and_never_exceed_the_data() -> None:
    sizes = [fitted_size(n) for n in range(1, 400)]
    assert all(s <= n for s, n in zip(sizes, range(1, 400), strict=True))
    assert sizes == sorted(sizes)
    assert len(set(sizes)) < 60  # a refit per ~15 % of growth, not per observation


def test_the_gp_finds_the_optimum_of_a_smooth_loss_as_well_as_tpe() -> None:
    best = {}
    for acquisition in ("tpe", "gp"):
        runs = []
        for seed in range(3):
            s = _searcher(acquisition, seed)
            _drive(s, 60)
            runs.append(min(h.loss for h in s.history() if h.loss is not None))
        best[acquisition] = float(np.median(runs))
    floor = 1.0 / LEVELS[-1]
    assert best["gp"] - floor < 0.02
    assert best["gp"] <= best["tpe"] + 1e-3


def test_a_searcher_rebuilt_from_its_history_asks_what_the_original_asks() -> None:
    s = _searcher("gp")
    _drive(s, 40)
    rebuilt = MultiFidelityTPE.restore(SPACE, 0, 10, s.history(), levels=LEVELS, min_points=5, acquisition="gp")
    for n in (40, 41, 42):
        assert rebuilt.ask(n).vals == s.ask(n).vals


def test_an_unknown_acquisition_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="acquisition"):
        _searcher("ucb")


def test_the_default_searcher_proposes_by_the_gp_with_one_objective_and_with_several() -> None:
    from quanta.search.factory import make_searcher
    from quanta.search.knobs import SearchAlgoSpec
    from quanta.search.pareto_tpe import ParetoTPE

    single = make_searcher(SPACE, 0, SearchAlgoSpec(), rungs=LEVELS)
    assert isinstance(single, MultiFidelityTPE) and single._gp is not None
    pinned = make_searcher(SPACE, 0, SearchAlgoSpec(acquisition="tpe"), rungs=LEVELS)
    assert isinstance(pinned, MultiFidelityTPE) and pinned._gp is None
    several = make_searcher(SPACE, 0, SearchAlgoSpec(), rungs=LEVELS, pareto=True)
    assert isinstance(several, ParetoTPE) and several._gp is not None  # ParEGO's scalarisations
    several_tpe = make_searcher(SPACE, 0, SearchAlgoSpec(acquisition="tpe"), rungs=LEVELS, pareto=True)
    assert isinstance(several_tpe, ParetoTPE) and several_tpe._gp is None
    finished_only = make_searcher(SPACE, 0, SearchAlgoSpec(algorithm="tpe"), rungs=LEVELS, pareto=True)
    assert isinstance(finished_only, ParetoTPE) and finished_only._gp is None


def test_a_spec_with_several_objectives_takes_either_acquisition() -> None:
    from quanta.spec import parse_spec

    two = [{"name": "accuracy", "goal": "maximize"}, {"name": "latency_ms", "goal": "minimize"}]
    base = {"name": "mo", "trainable": "m:f", "space": {"lr": {"loguniform": [1e-4, 1e-1]}}, "metrics": two}
    for acquisition in ("gp", "tpe"):
        assert parse_spec({**base, "search": {"acquisition": acquisition}}).search.acquisition == acquisition
    assert parse_spec({**base}).search.acquisition is None


def test_a_rebuilt_searcher_asks_the_same_when_trials_reached_the_level_out_of_order() -> None:
    # Trials reach a rung out of order (an old trial promoted late): the kernel fitted before such an
    # arrival must not be what a rebuilt searcher, which never saw that moment, fails to reproduce.
    s = _searcher("gp")
    rng = np.random.default_rng(3)
    late: list[tuple[int, float]] = []
    for n in range(45):
        f = _loss(s.ask(n).params)
        s.observe(n, LEVELS[0], f + 1.0)
        if rng.random() < 0.4:
            late.append((n, f))  # reaches the last level some asks later
        else:
            s.observe(n, LEVELS[-1], f)
        if late and rng.random() < 0.5:
            m, g = late.pop(0)
            s.observe(m, LEVELS[-1], g)
    rebuilt = MultiFidelityTPE.restore(SPACE, 0, 10, s.history(), levels=LEVELS, min_points=5, acquisition="gp")
    for n in (45, 46, 47):
        assert rebuilt.ask(n).vals == s.ask(n).vals


def test_a_gp_that_cannot_be_solved_falls_back_to_tpe_at_the_same_level(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _searcher("gp")
    _drive(s, 20)

    def singular(*_args: object, **_kwargs: object) -> dict:
        raise np.linalg.LinAlgError("Matrix is not positive definite")

    tpe = MultiFidelityTPE.restore(SPACE, 0, 10, s.history(), levels=LEVELS, min_points=5, acquisition="tpe")
    monkeypatch.setattr(GPProposer, "propose", singular)
    for n in (20, 21, 22):  # what TPE asks from the same history (its random share included)
        assert s.ask(n).vals == tpe.ask(n).vals
