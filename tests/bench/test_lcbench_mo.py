"""bench/lcbench_mo.py, bench/syne_lcbench_mo.py and the hypervolume accounting of bench/reach.py:
pure tests on scripted points and runs, a Syne Tune search on a stand-in surrogate (no ONNX), and the
script started on the real surrogate on one task, one seed and a short budget."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from bench.lcbench_mo import MORunResult, reference_front, summarize, tabulate
from bench.reach import FrontTracker, hypervolume, hypervolume_curve, time_to_hypervolume

# ---- hypervolume accounting -----------------------------------------------------------------------


def test_the_front_and_its_volume_grow_only_with_points_that_are_not_dominated():
    ref = (0.5, 100.0)  # (accuracy, seconds): the worst that counts
    t = FrontTracker(ref)
    assert t.add(0.9, 50.0) == pytest.approx(0.4 * 50)
    assert t.add(0.8, 60.0) == pytest.approx(20.0)  # dominated: nothing
    assert t.add(0.9, 50.0) == pytest.approx(20.0)  # the same point again: nothing
    assert t.add(0.4, 1.0) == pytest.approx(20.0)  # worse than the reference's accuracy: nothing
    assert t.add(0.99, 100.0) == pytest.approx(20.0)  # as slow as the reference: nothing
    assert t.add(0.7, 10.0) == pytest.approx(20.0 + 0.2 * 40)  # a trade-off: its strip of volume
    assert t.add(0.95, 5.0) == pytest.approx(0.45 * 95)  # dominates both: the front is one point again
    assert t.front == [(0.95, 5.0)]
    assert t.add(float("nan"), 1.0) == t.hv


def test_time_to_hypervolume_is_the_first_report_after_which_the_front_reaches_the_goal():
    ref = (0.0, 10.0)
    reports = [(30.0, 0.5, 2.0), (10.0, 0.2, 5.0), (20.0, 0.4, 8.0), (40.0, 0.9, 9.0)]
    # in time order: (0.2, 5 s) alone; (0.4, 8 s) a trade-off beside it; (0.5, 2 s) dominates both
    curve = hypervolume_curve(reports, ref)
    assert [t for t, _ in curve] == [10.0, 20.0, 30.0, 40.0]
    assert curve[0][1] == pytest.approx(1.0)
    assert curve[1][1] == pytest.approx(1.0 + 0.2 * 2.0)
    assert curve[2][1] == pytest.approx(0.5 * 8.0)  # (0.5, 2) dominates both earlier points
    assert curve[3][1] == pytest.approx(0.5 * 8.0 + 0.4 * 1.0)
    assert time_to_hypervolume(reports, ref, 4.0) == 30.0
    assert time_to_hypervolume(reports, ref, 4.4) == 40.0
    assert time_to_hypervolume(reports, ref, 5.0) is None


@dataclass
class _Curve:
    time: tuple[float, ...]
    val_accuracy: tuple[float, ...]


class StandIn:
    """LCBench's interface: config x -> accuracy rising to x over 5 epochs of (1 + 9 x^2) seconds each,
    so accurate configurations are slow and the front is a real trade-off."""

    epochs = 5

    def sample(self, n, seed):
        return [{"x": float(v)} for v in np.random.default_rng(seed).uniform(0.05, 1, n)]

    def curves(self, configs):
        return [
            _Curve(tuple((1 + 9 * c["x"] ** 2) * e for e in range(1, 6)), tuple(c["x"] * e / 5 for e in range(1, 6)))
            for c in configs
        ]


def test_the_reference_is_the_worst_of_1000_random_configurations_and_their_own_front_reaches_it_all():
    bench = StandIn()
    ref = reference_front(bench, n=1000, seed=0)
    points = ref["points"]
    assert len(points) == 1000
    assert ref["accuracy"] == min(a for a, _ in points) and ref["train_time_s"] == max(s for _, s in points)
    assert ref["front"] == 1000  # accuracy and seconds both grow with x: every point is a trade-off
    point = (ref["accuracy"], ref["train_time_s"])
    # the same volume however it is computed: moocore on all the points, the tracker point by point
    assert hypervolume(points, point) == pytest.approx(ref["hypervolume"])
    tracker = FrontTracker(point)
    for a, s in points:
        tracker.add(a, s)
    assert tracker.hv == pytest.approx(ref["hypervolume"], rel=1e-12)
    reports = [(float(i), a, s) for i, (a, s) in enumerate(points)]
    assert hypervolume_curve(reports, point)[-1][1] == pytest.approx(ref["hypervolume"])
    assert reference_front(StandIn(), n=1000, seed=0)["hypervolume"] == ref["hypervolume"]  # fixed seed


# ---- tables and summary ---------------------------------------------------------------------------


def _run(method, task, seed, t):
    return MORunResult(method, task, seed, t, 0.95 if t is not None else 0.8, [(1.0, 0.5)])


def test_tabulate_and_summarize_scripted_runs():
    refs = {"A": {"accuracy": 0.1, "train_time_s": 100.0, "hypervolume": 50.0, "front": 9}, "B": {"front": 3}}
    runs = []
    for seed, (q, moasha, morea, rnd) in enumerate(
        [(100, 400, 300, 900), (200, 500, 250, None), (300, None, 200, 800)]
    ):
        runs += [_run("quanta_default", "A", seed, q), _run("syne_moasha", "A", seed, moasha)]
        runs += [_run("syne_morea", "A", seed, morea), _run("quanta_fifo_random", "A", seed, rnd)]
    for seed in range(3):  # B: Quanta misses, MOASHA at 600 s
        runs += [_run("quanta_default", "B", seed, None), _run("syne_moasha", "B", seed, 600)]
        runs += [_run("quanta_fifo_random", "B", seed, None)]
    tasks = tabulate(list(reversed(runs)), refs, budget_s=1000.0)
    a = tasks["A"]["methods"]
    assert tasks["A"]["reference"] == refs["A"]
    assert a["quanta_default"]["runs_s"] == [100.0, 200.0, 300.0] and a["quanta_default"]["seeds"] == [0, 1, 2]
    assert a["syne_moasha"]["runs_s"] == [400.0, 500.0, 1000.0] and a["syne_moasha"]["misses"] == 1
    assert a["quanta_fifo_random"]["median_s"] == 900.0
    s = summarize(tasks)
    assert s["tasks"] == 2
    # best Syne Tune per task: A morea 250 / 200 = 1.25; B moasha 600 / 1000 = 0.6 -> median 0.925
    assert s["median_ratio_best_syne"] == pytest.approx((1.25 + 0.6) / 2)
    assert s["tasks_sooner_vs_best_syne"] == 1
    assert s["median_ratio_random"] == pytest.approx((900 / 200 + 1.0) / 2)
    assert s["tasks_sooner_vs_random"] == 1  # B: both miss, a tie
    assert s["goals"]["ratio_best_syne"]["met"] is False and s["goals"]["ratio_random"]["met"] is False


# ---- Syne Tune on a stand-in ----------------------------------------------------------------------


@dataclass(frozen=True)
class P:
    name: str
    kind: str
    low: float
    high: float
    log: bool


class SyneStandIn(StandIn):
    epochs = 5
    params = (P("x", "float", 0.05, 1.0, False),)


@pytest.mark.parametrize("method", ["moasha", "morea", "random"])
def test_syne_tunes_multi_objective_methods_run_and_stop_at_the_goal(method):
    pytest.importorskip("syne_tune", reason="Syne Tune is installed by `make dev` (see the Makefile)")
    from bench.syne_lcbench_mo import run_syne_mo

    ref = reference_front(SyneStandIn(), n=200, seed=0)
    point = (ref["accuracy"], ref["train_time_s"])
    goal = 0.5 * ref["hypervolume"]
    # 3 simulated minutes: MO-ASHA stops most trials after their first epoch of 1-10 s, and sorts its whole
    # rung at every decision, so a longer search here costs seconds of real time per simulated minute.
    run = run_syne_mo(method, "standin", workers=2, hours=0.05, seed=0, reference=point, goal=goal, bench=SyneStandIn())
    assert run.reports and run.started > 0
    assert [r[0] for r in run.reports] == sorted(r[0] for r in run.reports)
    assert all(0 <= a <= 1 and s > 0 for _, a, s in run.reports)
    reached = time_to_hypervolume(run.reports, point, goal)
    assert run.reached == (reached is not None)
    if run.reached:  # it ended at the goal: nothing measured long after it
        assert run.sim_seconds <= reached + 60
    with pytest.raises(ValueError, match="method"):
        run_syne_mo("nsga2", "standin", workers=1, hours=0.1, seed=0, reference=point, goal=goal, bench=SyneStandIn())


def test_a_run_past_its_wall_time_cap_ends_cut_and_counts_the_simulated_time_it_got_to():
    """`--max-wall-s`: a Syne Tune run still short of its goal at the cap ends `cut`; the table counts
    its simulated seconds so far (its time to the goal is longer: a lower bound) and marks it."""
    pytest.importorskip("syne_tune", reason="Syne Tune is installed by `make dev` (see the Makefile)")
    from bench.lcbench_mo import _fmt
    from bench.syne_lcbench_mo import run_syne_mo

    ref = reference_front(SyneStandIn(), n=200, seed=0)
    point = (ref["accuracy"], ref["train_time_s"])
    unreachable = 2.0 * ref["hypervolume"]
    kw = {"workers": 2, "hours": 0.05, "seed": 0, "reference": point, "goal": unreachable, "bench": SyneStandIn()}
    whole = run_syne_mo("random", "standin", **kw)
    cut = run_syne_mo("random", "standin", max_wall_s=0.0, **kw)
    assert not whole.cut and not whole.reached and whole.sim_seconds > 0.9 * 0.05 * 3600
    assert cut.cut and not cut.reached and 0 < cut.sim_seconds < whole.sim_seconds
    runs = [
        MORunResult("syne_random", "A", 0, None, 0.5, [], sim_s=cut.sim_seconds, cut=True),
        MORunResult("syne_random", "A", 1, 300.0, 0.95, []),
        MORunResult("syne_random", "A", 2, None, 0.7, [], sim_s=180.0),
    ]
    refs = {"A": {"front": 3}}
    entry = tabulate(runs, refs, budget_s=1000.0)["A"]["methods"]["syne_random"]
    assert entry["runs_s"] == [cut.sim_seconds, 300.0, 1000.0]
    assert entry["cut"] == [True, False, False] and entry["missed"] == [False, False, True]
    assert "1 cut" in _fmt(entry) and "1 miss" in _fmt(entry)


# ---- the script on the real surrogate -------------------------------------------------------------


def test_the_benchmark_starts_quanta_and_syne_tune_on_one_task(yahpo, tmp_path):
    pytest.importorskip("syne_tune", reason="Syne Tune is installed by `make dev` (see the Makefile)")
    from bench.lcbench_mo import main

    out, refs = tmp_path / "mo.json", tmp_path / "ref.json"
    methods = "quanta_default,quanta_fifo_random,syne_moasha,syne_morea,syne_random"
    main(["--tasks", "3945", "--seeds", "0", "--hours", "0.05", "--methods", methods, "--reference", str(refs),
          "--json", str(out)])  # fmt: skip
    doc = json.loads(out.read_text())
    block = doc["tasks"]["3945"]
    assert set(block["methods"]) == set(methods.split(","))
    ref = block["reference"]
    assert 0 <= ref["accuracy"] < 1 and ref["train_time_s"] > 0 and ref["front"] >= 1
    # the reference volume is at most the box between the reference point and the ideal (1, 0 s)
    assert 0 < ref["hypervolume"] <= (1 - ref["accuracy"]) * ref["train_time_s"]
    assert json.loads(refs.read_text())["tasks"]["3945"] == ref  # written down
    for entry in block["methods"].values():
        (secs,) = entry["runs_s"]
        assert 0 < secs <= 0.05 * 3600 and 0 <= entry["final_fraction"][0] <= 1 + 1e-9
        assert entry["missed"] == [entry["final_fraction"][0] < 0.95]
    s = doc["summary"]
    assert s["tasks"] == 1 and set(s["median_ratio_vs"]) == set(methods.split(",")) - {"quanta_default"}
    assert doc["goal_fraction"] == 0.95 and doc["seeds"] == [0] and doc["hours"] == 0.05


def test_mo_ashas_rungs_keep_a_newcomer_that_dominates_its_rung_and_stop_one_it_dominates():
    """Syne Tune 0.16's non-dominated priority returns the sort's order where its callers read one
    priority per trial; `ranked_priority` returns the latter, so MO-ASHA's rung decides on the newcomer."""
    pytest.importorskip("syne_tune", reason="Syne Tune is installed by `make dev` (see the Makefile)")
    from syne_tune.optimizer.schedulers.asha import Bracket
    from syne_tune.optimizer.schedulers.multiobjective.multiobjective_priority import NonDominatedPriority

    from bench.syne_lcbench_mo import ranked_priority

    x = np.array([[0.5, 5.0], [0.6, 6.0], [0.7, 7.0], [0.1, 1.0]])  # losses: the last dominates all
    assert list(ranked_priority()(x)) == [1, 2, 3, 0]
    assert list(NonDominatedPriority()(x)) == [3, 0, 1, 2]  # as shipped: the order, not the priorities

    def newcomer(priority, losses):
        rung = Bracket(1, 9, 3, 0, priority)
        for i, (e, t) in enumerate([(0.5, 5.0), (0.6, 6.0), (0.7, 7.0)]):
            rung.on_result(i, 1, {"e": e, "t": t})
        return rung.on_result(9, 1, {"e": losses[0], "t": losses[1]})

    assert newcomer(ranked_priority(), (0.1, 1.0)) == "CONTINUE"
    assert newcomer(ranked_priority(), (0.9, 9.0)) == "STOP"
    assert newcomer(NonDominatedPriority(), (0.1, 1.0)) == "STOP"  # the shipped priority stops the best


def test_runs_saved_as_they_end_are_not_run_again(monkeypatch, tmp_path):
    """`--runs`: each run is appended as it ends; a second invocation runs only the units not there, and
    a last line cut short is ignored."""
    import bench.lcbench_mo as mo

    made: list[tuple[str, str, int]] = []

    def fake_run_one(method, task, seed, workers, hours, ref, data, knobs=None, max_wall_s=None):
        made.append((method, task, seed))
        return MORunResult(method, task, seed, 10.0 * (seed + 1), 0.95, [(1.0, 0.5), (10.0, 0.95)], started=3)

    monkeypatch.setattr(mo, "run_one", fake_run_one)
    path = tmp_path / "runs.jsonl"
    refs = {"1": {}}
    first = mo.run_all(["1"], [0], ["a", "b"], 4, 1.0, refs, None, lambda r: mo.save_run(path, r))
    assert made == [("a", "1", 0), ("b", "1", 0)] and len(first) == 2
    with path.open("a") as fh:
        fh.write('{"method": "a", "task"')  # a line cut short
    before = mo.load_runs(path)
    curve = [(1.0, 0.5), (10.0, 0.95)]
    assert [(r.method, r.seed, r.curve) for r in before] == [("a", 0, curve), ("b", 0, curve)]
    made.clear()
    both = mo.run_all(["1"], [0, 1], ["a", "b"], 4, 1.0, refs, None, done_before=before)
    assert made == [("a", "1", 1), ("b", "1", 1)]
    got = [(r.method, r.seed, r.time_s) for r in both]
    assert got == [("a", 0, 10.0), ("b", 0, 10.0), ("a", 1, 20.0), ("b", 1, 20.0)]


def test_the_suite_halves_split_it_and_a_variant_reaches_quanta_default_alone(yahpo, tmp_path, monkeypatch):
    import bench.lcbench_mo as mo

    even, odd = mo._tasks("suite-even"), mo._tasks("suite-odd")
    assert len(even) == len(odd) == 12 and sorted(even + odd) == sorted(mo.task_list("suite"))
    seen: dict[str, object] = {}

    def run_quanta(method, task, seed, workers, hours, ref, data, knobs=None):
        seen[method] = knobs
        return MORunResult(method, task, seed, 1.0, 1.0)

    monkeypatch.setattr(mo, "run_quanta", run_quanta)
    knobs = {"search": {"n_startup": 8}}
    mo.main(["--tasks", "3945", "--seeds", "0", "--methods", "quanta_default,quanta_fifo_random", "--knobs",
             json.dumps(knobs), "--json", str(tmp_path / "v.json")])  # fmt: skip
    assert seen == {"quanta_default": knobs, "quanta_fifo_random": None}
    assert json.loads((tmp_path / "v.json").read_text())["knobs"] == knobs
    with pytest.raises(SystemExit):
        mo.main(["--tasks", "3945", "--methods", "quanta_default", "--knobs", '{"policy": "fifo"}'])


def test_an_earlier_result_is_tabulated_beside_this_invocations_runs(monkeypatch, tmp_path):
    """`--include`: the runs an earlier `--json` recorded of this invocation's tasks and seeds count in its
    table and summary; a unit both have is taken from this invocation; a file that is no such result is
    refused by name."""
    import bench.lcbench_mo as mo

    times = {("syne_moasha", 0): 400.0, ("syne_moasha", 1): None, ("syne_moasha", 2): 300.0}

    def fake_run_one(method, task, seed, workers, hours, ref, data, knobs=None, max_wall_s=None):
        t = times.get((method, seed), 100.0 if method == "quanta_default" else 900.0)
        return MORunResult(method, task, seed, t, 0.95 if t is not None else 0.9, [], started=5, wall_s=2.0)

    monkeypatch.setattr(mo, "run_one", fake_run_one)
    reference = tmp_path / "ref.json"
    ref = {"accuracy": 0.1, "train_time_s": 9.0, "hypervolume": 1.0, "front": 2}
    reference.write_text(json.dumps({"tasks": {"7": ref}}))
    common = ["--tasks", "7", "--hours", "1", "--reference", str(reference)]
    first = tmp_path / "first.json"
    mo.main([*common, "--seeds", "0,1,2", "--methods", "syne_moasha,quanta_default", "--json", str(first)])
    times[("quanta_default", 0)] = 200.0  # this invocation's run of a unit the earlier result also has
    out = mo.main([*common, "--seeds", "0,1", "--methods", "quanta_default,syne_morea", "--include", str(first)])
    methods = out["tasks"]["7"]["methods"]
    assert methods["syne_moasha"]["runs_s"] == [400.0, 3600.0]  # this invocation's seeds only
    assert methods["syne_moasha"]["missed"] == [False, True]
    assert methods["syne_moasha"]["started"] == [5, 5]
    assert methods["quanta_default"]["runs_s"] == [200.0, 100.0]  # seed 0 from this invocation
    assert methods["syne_morea"]["runs_s"] == [900.0, 900.0]
    assert out["summary"]["median_ratio_best_syne"] == pytest.approx(900.0 / 150.0)
    assert out["methods"] == ["quanta_default", "syne_morea", "syne_moasha"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"tasks": {"7": {}}}')
    with pytest.raises(ValueError, match="bad.json"):
        mo.main([*common, "--seeds", "0", "--methods", "quanta_default", "--include", str(bad)])
