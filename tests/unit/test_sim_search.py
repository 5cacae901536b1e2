"""Searches replayed on LCBench in simulated time: the surrogate adapter on a stand-in model (no ONNX),
the real surrogate from ../shared (skipped only when that folder is absent), and whole searches through
the real controller, searchers and policies with the simulator's invariants checked at every tick."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from quanta.sim.lcbench import MIN_EPOCH_S, LCBench, clean_curve, data_dir, lcbench_space, read_params
from quanta.sim.runtime import InvariantError
from quanta.sim.search_bench import SearchSimResult, run_search, search_spec

CONT = ("epoch", "batch_size", "learning_rate", "momentum", "weight_decay", "num_layers", "max_units", "max_dropout")
Y = ("time", "val_accuracy", "val_cross_entropy")
SPACE_DOC = {
    "hyperparameters": [
        {"name": "OpenML_task_id", "type": "categorical", "choices": ["3945", "7593"]},
        {"name": "batch_size", "type": "uniform_int", "log": True, "lower": 16, "upper": 512},
        {"name": "epoch", "type": "uniform_int", "log": False, "lower": 1, "upper": 52},
        {"name": "learning_rate", "type": "uniform_float", "log": True, "lower": 1e-4, "upper": 0.1},
        {"name": "max_dropout", "type": "uniform_float", "log": False, "lower": 0.0, "upper": 1.0},
        {"name": "max_units", "type": "uniform_int", "log": True, "lower": 64, "upper": 1024},
        {"name": "momentum", "type": "uniform_float", "log": False, "lower": 0.1, "upper": 0.99},
        {"name": "num_layers", "type": "uniform_int", "log": False, "lower": 1, "upper": 5},
        {"name": "weight_decay", "type": "uniform_float", "log": False, "lower": 1e-5, "upper": 0.1},
    ]
}


class StandIn:
    """A surrogate with LCBench's inputs and outputs and a closed form: a slow first epoch, then epochs
    whose length grows with model size and shrinks with batch size; accuracy rising towards a ceiling set
    by how close the learning rate is to 1e-2, and falling late when dropout is low (overfitting)."""

    cont_names = CONT
    y_names = Y

    def __init__(self, time_scale: float = 1.0) -> None:
        self.calls: list[int] = []
        self.time_scale = time_scale

    def predict(self, task: str, x: np.ndarray) -> np.ndarray:
        self.calls.append(x.shape[0])
        c = {n: x[:, i].astype(np.float64) for i, n in enumerate(CONT)}
        out = self.formula(c, task)
        out[:, 0] *= self.time_scale
        return out

    @staticmethod
    def formula(c: dict[str, np.ndarray], task: str = "3945") -> np.ndarray:
        e = c["epoch"]
        per_epoch = (1.0 + c["num_layers"] * c["max_units"] / 512.0) * (64.0 / c["batch_size"]) + 0.5
        time = 5.0 + per_epoch * e
        ceiling = 95.0 - 12.0 * np.abs(np.log10(c["learning_rate"]) + 2.0) - (3.0 if task == "7593" else 0.0)
        rise = ceiling * (1.0 - np.exp(-e * (0.05 + c["momentum"] / 5.0)))
        overfit = (1.0 - c["max_dropout"]) * np.maximum(0.0, e - 30.0) * 0.3
        acc = rise - overfit
        return np.stack([time, acc, np.zeros_like(e)], axis=1)


def stand_in(task: str = "3945", time_scale: float = 1.0) -> LCBench:
    return LCBench(StandIn(time_scale), SPACE_DOC, task)


CONFIG = {
    "batch_size": 91.0,  # a search proposes integers as floats
    "learning_rate": 0.01,
    "momentum": 0.9,
    "weight_decay": 0.01,
    "num_layers": 3,
    "max_units": 256.0,
    "max_dropout": 0.2,
}


# ---- the adapter ----------------------------------------------------------------------------------


def test_a_curve_is_all_epochs_in_one_model_call_and_is_cached():
    bench = stand_in()
    model = bench.model
    assert isinstance(model, StandIn)
    curve = bench.curve(CONFIG)
    assert model.calls == [52] and curve.epochs == 52
    cols = {n: np.full(52, float(np.float32(bench.normalize(CONFIG).get(n, 0)))) for n in CONT}
    cols["epoch"] = np.arange(1, 53, dtype=np.float64)
    expected = StandIn.formula(cols)
    assert curve.time == pytest.approx(expected[:, 0].tolist())
    assert curve.val_accuracy == pytest.approx((expected[:, 1] / 100.0).tolist())
    assert curve.best == max(curve.val_accuracy) > curve.val_accuracy[-1]  # it peaks before the last epoch
    assert bench.curve({**CONFIG, "batch_size": 91, "extra": "ignored"}) is curve  # same config, no new call
    other = {**CONFIG, "learning_rate": 0.001}
    more = bench.curves([other, CONFIG, {**other, "momentum": 0.5}])
    assert model.calls == [52, 104] and more[1] is curve  # only the two new ones, in one call
    assert more[0].best < curve.best  # farther from the best learning rate


def test_configurations_are_rounded_and_clipped_and_bad_ones_named():
    bench = stand_in()
    cfg = bench.normalize({**CONFIG, "batch_size": 90.6, "num_layers": 7, "learning_rate": 3.0})
    assert cfg["batch_size"] == 91 and isinstance(cfg["batch_size"], int)
    assert cfg["num_layers"] == 5 and cfg["learning_rate"] == 0.1
    with pytest.raises(ValueError, match="'max_units' is missing"):
        bench.normalize({k: v for k, v in CONFIG.items() if k != "max_units"})
    with pytest.raises(ValueError, match="config.momentum: not a number"):
        bench.normalize({**CONFIG, "momentum": "fast"})
    with pytest.raises(ValueError, match="task: '1' is not an LCBench task"):
        stand_in("1")
    samples = bench.sample(200, seed=3)
    assert samples == bench.sample(200, seed=3) != bench.sample(200, seed=4)
    assert {s["num_layers"] for s in samples} == {1, 2, 3, 4, 5}
    assert all(16 <= s["batch_size"] <= 512 and 1e-5 <= s["weight_decay"] <= 0.1 for s in samples)


def test_the_config_space_becomes_a_quanta_space_with_its_bounds():
    params, epochs, tasks = read_params(SPACE_DOC)
    assert epochs == 52 and tasks == ("3945", "7593")
    space = lcbench_space(params)
    assert space == {
        "batch_size": {"loguniform": [16, 512]},  # rounded by normalize
        "learning_rate": {"loguniform": [1e-4, 0.1]},
        "max_dropout": {"uniform": [0.0, 1.0]},
        "max_units": {"loguniform": [64, 1024]},
        "momentum": {"uniform": [0.1, 0.99]},
        "num_layers": {"randint": [1, 6]},
        "weight_decay": {"uniform": [1e-5, 0.1]},
    }
    bad = {"hyperparameters": [*SPACE_DOC["hyperparameters"], {"name": "act", "type": "categorical", "choices": []}]}
    with pytest.raises(ValueError, match=r"hyperparameters\[9\] \(act\)"):
        read_params(bad)


def test_surrogate_outputs_are_cleaned_into_a_learning_curve():
    c = clean_curve(np.array([2.0, 1.5, 3.0, 3.0]), np.array([50.0, 101.0, -1.0, 80.0]))
    assert c.time == pytest.approx((2.0, 2.0 + MIN_EPOCH_S, 3.0, 3.0 + MIN_EPOCH_S))  # rises kept as they are
    assert c.val_accuracy == (0.5, 1.0, 0.0, 0.8)


def test_the_data_folder_missing_is_an_error_naming_it_and_the_way_out(tmp_path, monkeypatch):
    monkeypatch.setenv("QUANTA_YAHPO_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="QUANTA_YAHPO_DATA"):
        data_dir()
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "x")):
        data_dir(tmp_path / "x")


# ---- whole searches on the stand-in ---------------------------------------------------------------


class Watch:
    """Checks at every tick what the trace simulator checks, plus what reporting trials add: time
    never goes back, no trial past its step budget, no device over capacity (SimRuntime.check)."""

    def __init__(self) -> None:
        self.last = -math.inf
        self.ticks = 0

    def __call__(self, ctl, rt) -> None:
        now = rt.now()
        if now < self.last:
            raise InvariantError(f"time went back from {self.last} to {now}")
        self.last = now
        self.ticks += 1
        for tid, r in rt.residency().items():
            if r.steps > ctl.trial(tid).max_steps:
                raise InvariantError(f"trial {tid} at step {r.steps}")
        per_device: dict[str, int] = {}
        for r in rt.residency().values():
            if r.running:
                for d in r.devices:
                    per_device[d] = per_device.get(d, 0) + 1
        if any(n > rt.max_per_device for n in per_device.values()):
            raise InvariantError(f"over capacity: {per_device}")


# Random search keeps these quick (HyperOpt's TPE asks cost tens of ms each); the model-based searchers
# run in test_model_based_searchers_propose_from_simulated_reports.
POLICIES = [
    ("fifo", "random"),
    ("timeslice", "random"),
    ("gandiva", "random"),
    ("asha", "random"),
    ("hyperband", "random"),
]


@pytest.mark.parametrize("policy,algorithm", POLICIES)
def test_every_policy_searches_with_invariants_checked_at_every_tick(policy, algorithm):
    watch = Watch()
    targets = {"medium": 0.85, "hard": 0.9}
    res = run_search(
        stand_in(), policy=policy, algorithm=algorithm, workers=2, hours=0.25, seed=1, targets=targets,
        check=True, on_tick=watch,
    )  # fmt: skip
    assert isinstance(res, SearchSimResult) and watch.ticks > 5
    assert res.policy == policy and res.algorithm == algorithm
    assert res.started >= 2 and res.reports > 0
    assert res.sim_seconds == pytest.approx(900.0)  # no stop target: the whole budget
    times = [at for at, _ in res.best_so_far]
    bests = [b for _, b in res.best_so_far]
    assert times == sorted(times) and all(0 <= t <= 900 for t in times)
    assert all(b2 > b1 for b1, b2 in zip(bests, bests[1:], strict=False)) and all(0 <= b <= 1 for b in bests)
    for name, target in targets.items():  # the time to a target is where best-so-far first gets there
        first = next((at for at, b in res.best_so_far if b >= target), None)
        assert res.time_to_target[name] == first
    if policy in ("asha", "hyperband"):
        assert res.parked > 0  # trials park at their rungs
    if policy == "fifo":
        assert res.parked == 0 and res.killed == 0


@pytest.mark.parametrize("policy,algorithm", [("asha", "bohb"), ("fifo", "tpe")])
def test_model_based_searchers_propose_from_simulated_reports(policy, algorithm):
    from quanta.search.multifidelity import MultiFidelityTPE
    from quanta.search.searcher import HyperOptSearcher

    seen = {}

    def grab(ctl, rt) -> None:
        (s,) = ctl.searches()
        seen["searcher"] = s.searcher

    bench = stand_in(time_scale=0.1)  # trials of about 12 s: a few dozen in 3 simulated minutes
    res = run_search(bench, policy=policy, algorithm=algorithm, workers=2, hours=0.05, seed=2, check=True, on_tick=grab)
    searcher = seen["searcher"]
    assert res.algorithm == algorithm and len(searcher) > searcher.n_startup  # TPE proposed some of them
    if algorithm == "bohb":
        assert isinstance(searcher, MultiFidelityTPE)
        level, values = searcher.level_losses()
        assert level is not None and len(values) >= searcher.min_points  # fitted on simulated rung values
    else:
        assert isinstance(searcher, HyperOptSearcher)
        assert sum(1 for h in searcher.history() if h.loss is not None) > 3  # told finished trials


def test_a_search_is_deterministic_per_seed():
    kw = dict(policy="asha", algorithm="bohb", workers=2, hours=0.2, targets={"hard": 0.9})
    a = run_search(stand_in(), seed=5, **kw)
    b = run_search(stand_in(), seed=5, **kw)
    c = run_search(stand_in(), seed=6, **kw)
    strip = lambda r: {k: v for k, v in r.__dict__.items() if k != "wall_seconds"}  # noqa: E731
    assert strip(a) == strip(b)
    assert a.best_so_far != c.best_so_far  # another seed proposes other configurations


def test_a_search_stops_at_its_stop_target_and_fifo_runs_one_trial_per_device():
    res = run_search(
        stand_in(), policy="fifo", algorithm="random", workers=2, hours=4, seed=0, targets={"hard": 0.9}, stop_at=0.9
    )
    assert res.time_to_target["hard"] is not None
    assert res.sim_seconds == pytest.approx(res.time_to_target["hard"])
    assert res.best_so_far[-1][1] >= 0.9
    spec = search_spec(stand_in(), policy="fifo", workers=2, hours=4, stop_at=0.9)
    assert spec.parallelism == 2 and spec.metric.target == 0.9 and spec.budget.stop_on_target
    assert spec.budget.max_steps == 52 and spec.trainable == "quanta.sim.lcbench_trial:train"


def test_a_trial_budget_ends_the_search_and_its_device_time_is_counted_once_per_trial():
    res = run_search(stand_in(), policy="fifo", algorithm="random", workers=1, hours=24, seed=0, max_trials=3)
    assert res.started == 3 and res.completed == 3  # the budget, not the hours, ended it
    assert res.sim_seconds < 24 * 3600
    # One device busy from the first trial's start to the last one's end (start-up aside): a finished
    # trial's earlier processes are counted in its own device time, not a second time beside it.
    assert 0.5 * res.sim_seconds < res.device_seconds <= res.sim_seconds + 1e-6


def test_a_step_overhead_lengthens_every_epoch_of_a_simulated_trial():
    from quanta.executor.actions import TrialLaunch
    from quanta.sim.search_bench import lcbench_workload

    bench = stand_in()
    launch = TrialLaunch(1, "t:f", {**CONFIG, "task": "3945"}, 52, "ckpt")
    plain = lcbench_workload(bench)(launch).curve
    slow = lcbench_workload(bench, 0.5)(launch).curve
    assert plain is not None and slow is not None and plain.values == slow.values
    assert [b - a for a, b in zip(plain.ends, slow.ends, strict=True)] == pytest.approx([0.5 * k for k in range(1, 53)])
    with pytest.raises(ValueError, match="step_overhead_s"):
        lcbench_workload(bench, -1.0)
    kw = dict(policy="fifo", algorithm="random", workers=2, hours=4, seed=0, targets={"hard": 0.9}, stop_at=0.9)
    t0, t1 = (run_search(stand_in(), step_overhead_s=x, **kw).time_to_target["hard"] for x in (0.0, 1.0))
    assert t0 is not None and t1 is not None and t1 > t0


def test_a_multi_objective_search_reports_the_training_time_to_the_last_epoch_beside_accuracy():
    from quanta.executor.actions import TrialLaunch
    from quanta.sim.search_bench import MO_OBJECTIVES, TRAIN_TIME, lcbench_workload, train_times

    bench = stand_in()
    spec = search_spec(bench, workers=2, hours=1, objectives=MO_OBJECTIVES)
    assert [(o.name, o.goal) for o in spec.metrics] == [("val_accuracy", "maximize"), ("train_time_s", "minimize")]
    assert spec.metric.name == "val_accuracy" and spec.config["report"] == [TRAIN_TIME]
    assert search_spec(bench, workers=2, hours=1).metrics == ()  # single objective: as before
    launch = TrialLaunch(1, "t:f", {**CONFIG, "task": "3945"}, 52, "ckpt")
    curve = lcbench_workload(bench, report=[TRAIN_TIME])(launch).curve
    assert curve is not None and [name for name, _ in curve.more] == [TRAIN_TIME]
    (_, times), ends = curve.more[0], curve.ends
    # after epoch e: the mean epoch so far times 52; at the last epoch, the whole training time
    assert times[0] == pytest.approx(ends[0] * 52) and times[9] == pytest.approx(ends[9] / 10 * 52)
    assert times[-1] == pytest.approx(ends[-1]) and train_times(ends, 52) == times
    assert lcbench_workload(bench)(launch).curve.more == ()  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="objectives\\[1\\]"):
        search_spec(bench, objectives=[("val_accuracy", "maximize"), ("latency", "minimize")])
    with pytest.raises(ValueError, match="stop_at"):
        search_spec(bench, objectives=MO_OBJECTIVES, stop_at=0.9)
    with pytest.raises(ValueError, match="report"):
        lcbench_workload(bench, report=["latency"])


def test_a_multi_objective_search_runs_and_stop_when_sees_every_report_in_time_order():
    from quanta.sim.search_bench import MO_OBJECTIVES

    seen: list[tuple[float, dict]] = []

    def stop_when(at, metrics) -> bool:
        seen.append((at, dict(metrics)))
        return at >= 600.0

    # a quarter of an hour: the stopped run ends at 600 s, well inside the whole one
    kw = dict(policy="asha", algorithm="random", workers=2, hours=0.25, seed=3, objectives=MO_OBJECTIVES)
    res = run_search(stand_in(), check=True, stop_when=stop_when, **kw)
    assert res.stopped and 600.0 <= res.sim_seconds < 700.0 and seen[-1][0] >= 600.0
    assert [at for at, _ in seen] == sorted(at for at, _ in seen) and 0 < len(seen) <= res.reports
    assert all(set(m) == {"val_accuracy", "train_time_s"} and m["train_time_s"] > 0 for _, m in seen)
    whole = run_search(stand_in(), **kw)
    assert not whole.stopped and whole.sim_seconds == pytest.approx(900.0)
    assert whole.best_so_far[: len(res.best_so_far) - 1] == res.best_so_far[:-1]  # the same search, cut short
    plain: list[dict] = []
    run_search(stand_in(), policy="fifo", algorithm="random", workers=2, hours=0.1, seed=3,
               stop_when=lambda at, m: plain.append(dict(m)) or False)  # fmt: skip
    assert plain and all(set(m) == {"val_accuracy"} for m in plain)  # single objective: reports as before


def test_the_trial_template_preloads_named_tasks_once(monkeypatch):
    from quanta.sim import lcbench_trial

    loaded: list[tuple[str, object]] = []
    monkeypatch.setattr(lcbench_trial, "_TASKS", {})
    monkeypatch.setattr(lcbench_trial, "load_lcbench", lambda task, path: loaded.append((task, path)) or stand_in(task))
    monkeypatch.setenv(lcbench_trial.PRELOAD_ENV, "3945, 7593,")
    lcbench_trial.prepare()
    assert loaded == [("3945", None), ("7593", None)] and set(lcbench_trial._TASKS) == {("3945", None), ("7593", None)}
    monkeypatch.delenv(lcbench_trial.PRELOAD_ENV)
    lcbench_trial.prepare()
    assert len(loaded) == 2


def test_default_means_what_a_spec_naming_nothing_gets():
    from quanta.executor.policy.knobs import DEFAULT_POLICY
    from quanta.search.knobs import SearchAlgoSpec

    spec = search_spec(stand_in(), policy="default", algorithm=None, workers=4)
    assert spec.scheduler.policy == DEFAULT_POLICY
    assert spec.search == SearchAlgoSpec()
    assert spec.parallelism == 8
    with pytest.raises(KeyError, match="unknown policy 'nope'"):
        search_spec(stand_in(), policy="nope")


def test_knobs_are_merged_over_the_spec_blocks_and_bad_ones_named():
    from quanta.spec import SpecError

    spec = search_spec(stand_in(), policy="default", scheduler={"mode": "kill"}, search={"n_startup": 10})
    assert spec.scheduler.policy == "asha" and spec.scheduler.mode == "kill"
    assert spec.search.algorithm == "bohb" and spec.search.n_startup == 10
    spec = search_spec(stand_in(), policy="asha", algorithm="random", scheduler={"eta": 4.0})
    assert spec.scheduler.eta == 4.0 and spec.search.algorithm == "random"
    with pytest.raises(SpecError, match="mode"):
        search_spec(stand_in(), policy="default", scheduler={"mode": "sideways"})


# ---- the real surrogate -----------------------------------------------------------------------------


def _real_data() -> Path | None:
    try:
        return data_dir()
    except FileNotFoundError:
        return None


REAL = _real_data()
needs_yahpo = pytest.mark.skipif(REAL is None, reason="../shared/data/yahpo/lcbench (YAHPO Gym's LCBench) not present")


@needs_yahpo
def test_the_real_surrogate_batched_equals_yahpos_objective_function():
    from quanta.sim.lcbench import load_lcbench, yahpo_bench

    bench = load_lcbench("3945")
    yb = yahpo_bench()
    yb.set_instance("3945")
    if not hasattr(yb.config_space, "_sort_hyperparameters"):
        # yahpo-gym 1.0.2's objective_function re-sorts the space with a ConfigSpace 0.x private method
        # that ConfigSpace 1.x dropped (1.x keeps hyperparameters sorted): a no-op stands in for it, so
        # the reference is yahpo's own encoding with either ConfigSpace (what CI's fresh venv installs).
        type(yb.config_space)._sort_hyperparameters = lambda self: None  # type: ignore[attr-defined]
    configs = bench.sample(3, seed=0)
    curves = bench.curves(configs)
    for cfg, curve in zip(configs, curves, strict=True):
        rows = yb.objective_function([{**cfg, "OpenML_task_id": "3945", "epoch": e} for e in range(1, 53)])
        expected = clean_curve(np.array([r["time"] for r in rows]), np.array([r["val_accuracy"] for r in rows]))
        assert curve.time == pytest.approx(expected.time, rel=1e-6)
        assert curve.val_accuracy == pytest.approx(expected.val_accuracy, rel=1e-6)
        assert 0.0 < curve.best <= 1.0 and curve.time[-1] > curve.time[0] > 0
    with open(REAL / "lcbench" / "config_space.json") as fh:  # type: ignore[operator]
        doc = json.load(fh)
    assert bench.space == lcbench_space(read_params(doc)[0])
    assert bench.space["weight_decay"] == {"uniform": [1e-05, 0.1]}


@needs_yahpo
def test_a_short_search_on_the_real_surrogate():
    from quanta.sim.search_bench import simulate_search

    res = simulate_search("3945", "asha", "bohb", 2, 0.25, 0, {"low": 0.5})
    assert res.started > 2 and res.reports > 0 and res.sim_seconds == pytest.approx(900.0)
    assert res.time_to_target["low"] is not None and 0.5 <= res.best_so_far[-1][1] <= 1.0


def _open_surrogate(data: str) -> bool:
    from quanta.sim.lcbench import yahpo_bench

    return yahpo_bench(data) is not None


@needs_yahpo
def test_processes_opening_the_surrogate_at_once_do_not_share_yahpos_settings_file():
    """yahpo_gym writes its data path to a settings file and reads it back; processes sharing one (its
    default, ~/.config/yahpo_gym) read each other's half-written file and fail. Each process keeps its own."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    shared = Path("~/.config/yahpo_gym").expanduser()
    before = shared.stat().st_mtime_ns if shared.exists() else None
    with ProcessPoolExecutor(4, mp_context=mp.get_context("spawn")) as pool:
        assert list(pool.map(_open_surrogate, [str(REAL)] * 4)) == [True] * 4
    assert (shared.stat().st_mtime_ns if shared.exists() else None) == before
