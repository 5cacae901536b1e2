"""bench/peer_env.py: the LCBench peers that run in their own environment (MOBSTER, Hyper-Tune, DyHPO and
the multi-objective random scalarisation from Syne Tune 0.14.2; DEHB 0.1.2), started from bench/lcbench.py
and bench/lcbench_mo.py in a subprocess of that environment.

The smoke tests run each system for two simulated minutes on the real surrogate; they need the peer
environment (`make peers-old`, about 2 minutes to build; or QUANTA_PEER_VENV naming one) and are
skipped without it. The others check what happens when it is missing, without it."""

from __future__ import annotations

import pytest

from bench.lcbench import TARGETS, Run, _run_one, main
from bench.lcbench_mo import DEFAULT_REFERENCE_JSON as DEFAULT_MO_REFERENCE
from bench.lcbench_targets import load_targets
from bench.peer_env import BUILD, PEER_SYSTEMS, VENV_ENV, missing_reason, run_peer

TASK = "3945"
HOURS = 0.03  # 108 simulated seconds: tens of decisions, a few wall seconds each


@pytest.fixture(scope="module")
def peer_env() -> None:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def targets() -> dict[str, float]:
    return load_targets()[TASK]


@pytest.mark.parametrize("system", sorted(PEER_SYSTEMS))
def test_each_peer_runs_a_short_search_on_the_real_surrogate_from_the_table(peer_env, yahpo, targets, system):
    run = _run_one(system, TASK, 0, 2, HOURS, targets, None)
    assert isinstance(run, Run) and (run.system, run.task, run.seed) == (system, TASK, 0)
    assert set(run.time_to_target) == set(TARGETS)
    assert run.best_so_far, "no report in two simulated minutes"
    times = [t for t, _ in run.best_so_far]
    values = [v for _, v in run.best_so_far]
    # Reports come at the surrogate's epoch times (task 3945's epochs last about a second), inside the budget.
    assert times[0] > 0 and times == sorted(times) and times[-1] <= HOURS * 3600
    assert values == sorted(values) and all(0 <= v <= 1 for v in values)
    assert 0 < run.sim_s <= HOURS * 3600 and run.wall_s > 0
    for k, t in run.time_to_target.items():
        reached = [tt for tt, v in run.best_so_far if v >= targets[k]]
        assert t == (min(reached) if reached else None)


def test_dehb_on_the_exact_clock_is_the_same_run_for_the_same_seed(peer_env, yahpo, targets):
    a, b, c = (run_peer("dehb_exact", TASK, seed, 4, HOURS, targets, targets["hard"], None) for seed in (5, 5, 6))
    assert (a.time_to_target, a.best_so_far, a.started, a.sim_seconds) == (
        b.time_to_target, b.best_so_far, b.started, b.sim_seconds,
    )  # fmt: skip
    assert a.best_so_far != c.best_so_far  # the seed matters


def test_a_failing_peer_run_raises_with_the_peer_environments_own_error(peer_env, targets):
    with pytest.raises(RuntimeError, match="peer environment") as err:
        run_peer("dehb_exact", "nope", 0, 1, 0.01, targets, None, None)
    assert "nope" in str(err.value)  # the subprocess's traceback names the bad task


def test_without_the_environment_a_peer_is_refused_naming_how_to_build_it(monkeypatch, tmp_path, targets):
    monkeypatch.setenv(VENV_ENV, str(tmp_path / "none"))
    assert BUILD in (missing_reason() or "")
    with pytest.raises(RuntimeError, match="make peers-old"):
        run_peer("syne_mobster_exact", TASK, 0, 1, 0.01, targets, None, None)
    with pytest.raises(SystemExit):
        main(["--tasks", TASK, "--seeds", "0", "--systems", "quanta_default,dehb_exact"])
    with pytest.raises(ValueError, match="system"):
        run_peer("syne_asha_exact", TASK, 0, 1, 0.01, targets, None, None)


def test_syne_tunes_random_scalarisation_runs_two_objectives_in_the_peer_environment(peer_env, yahpo):
    """`syne_rsbo` of bench/lcbench_mo.py: Syne Tune 0.14.2's MORandomScalarizationBayesOpt in the peer
    environment, its reports back as (seconds, val_accuracy, train_time_s) within the budget."""
    from bench.lcbench_mo import load_references, run_syne

    ref = load_references(DEFAULT_MO_REFERENCE)[TASK]
    r = run_syne("syne_rsbo", TASK, 0, 2, HOURS, ref, None)
    assert (r.method, r.task, r.seed) == ("syne_rsbo", TASK, 0) and r.started >= 2
    assert r.curve and all(0 < t <= HOURS * 3600 for t, _ in r.curve)
    fractions = [f for _, f in r.curve]
    assert fractions == sorted(fractions) and 0 < fractions[-1] <= 1.0 + 1e-9
    assert 0 < r.sim_s <= HOURS * 3600 and r.wall_s > 0


def test_without_the_environment_the_two_objective_peer_is_refused(monkeypatch, tmp_path):
    from bench.lcbench_mo import available_methods
    from bench.lcbench_mo import main as mo_main
    from bench.peer_env import run_peer_mo

    monkeypatch.setenv(VENV_ENV, str(tmp_path / "none"))
    assert "syne_rsbo" not in available_methods()
    with pytest.raises(SystemExit):
        mo_main(["--tasks", TASK, "--seeds", "0", "--methods", "quanta_default,syne_rsbo"])
    with pytest.raises(RuntimeError, match="make peers-old"):
        run_peer_mo("syne_rsbo", TASK, 0, 1, 0.01, (0.5, 100.0), 1.0, None)
    with pytest.raises(ValueError, match="method"):
        run_peer_mo("syne_moasha", TASK, 0, 1, 0.01, (0.5, 100.0), 1.0, None)
