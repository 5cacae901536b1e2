"""bench/lcbench.py, bench/reach.py and bench/lcbench_targets.py: targets, time-to-target accounting,
summary.

Pure tests on scripted runs and a stand-in surrogate (no ONNX, no Syne Tune)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from bench.lcbench import Run, summarize, tabulate, target_stats
from bench.lcbench_targets import curve_targets, load_targets, targets_from_curves
from bench.reach import improvements, time_to_target

# ---- targets --------------------------------------------------------------------------------------


def test_targets_are_percentiles_of_each_configurations_best_epoch():
    # 100 configurations whose curves peak at epoch 2 at i/100 and then fall: the best, not the last,
    # epoch counts. Bests are 0.00..0.99, so p95 and p99 (linear interpolation) are 0.9405 and 0.9801.
    best = np.arange(100) / 100.0
    accs = np.column_stack([best / 2, best, best / 3])
    rng = np.random.default_rng(0)
    accs = accs[rng.permutation(100)]  # order does not matter
    t = targets_from_curves(accs)
    assert t["medium"] == pytest.approx(0.9405)
    assert t["hard"] == pytest.approx(0.9801)
    assert t["max"] == pytest.approx(0.99)
    assert t["median"] == pytest.approx(0.495)


@pytest.mark.parametrize("bad", [np.zeros((0, 52)), np.zeros(52), np.array([[0.5, np.nan]])])
def test_targets_refuse_empty_flat_or_nan_curves(bad):
    with pytest.raises(ValueError, match="accs"):
        targets_from_curves(bad)


@dataclass
class _Curve:
    time: tuple[float, ...]
    val_accuracy: tuple[float, ...]


class StandIn:
    """A surrogate with LCBench's interface: config x -> accuracy rising to x over 5 epochs."""

    epochs = 5

    def __init__(self):
        self.batches: list[int] = []

    def sample(self, n, seed):
        rng = np.random.default_rng(seed)
        return [{"x": float(v)} for v in rng.uniform(0, 1, n)]

    def curves(self, configs):
        self.batches.append(len(configs))
        return [_Curve(tuple(range(1, 6)), tuple(c["x"] * e / 5 for e in range(1, 6))) for c in configs]


def test_curve_targets_sample_once_in_one_batch_and_are_reproducible():
    bench = StandIn()
    a = curve_targets(bench, n=1000, seed=3)
    b = curve_targets(StandIn(), n=1000, seed=3)
    c = curve_targets(StandIn(), n=1000, seed=4)
    assert bench.batches == [1000]
    assert a == b and a != c
    xs = np.array([s["x"] for s in StandIn().sample(1000, 3)])
    assert a["hard"] == pytest.approx(np.percentile(xs, 99))
    assert a["medium"] == pytest.approx(np.percentile(xs, 95))


def test_load_targets_names_the_file_and_the_bad_task(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_targets(tmp_path / "nope.json")
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"tasks": {"3945": {"medium": 0.9, "hard": 0.8}}}))
    with pytest.raises(ValueError, match="3945"):
        load_targets(p)
    p.write_text(json.dumps({"tasks": {"3945": {"medium": 0.8, "hard": 0.9}}}))
    assert load_targets(p) == {"3945": {"medium": 0.8, "hard": 0.9}}


def test_the_committed_targets_cover_the_suite_and_only_it():
    from bench.lcbench_targets import DEFAULT_JSON

    suite = {
        "3945", "34539", "126025", "126029", "146212", "167149", "167152", "167161", "167181", "167184",
        "167185", "167200", "167201", "168329", "168331", "168335", "168908", "168910", "189862", "189865",
        "189873", "189905", "189908", "189909",
    }  # fmt: skip
    targets = load_targets(DEFAULT_JSON)
    assert set(targets) == suite
    assert all(0.0 < t["medium"] < t["hard"] <= t["max"] <= 1.0 for t in targets.values())


# ---- accounting -----------------------------------------------------------------------------------


def test_time_to_target_is_the_first_report_at_or_above_it_in_time_order():
    reports = [(50.0, 0.7), (10.0, 0.5), (30.0, 0.8), (40.0, 0.9)]
    assert time_to_target(reports, 0.8) == 30.0  # reached exactly
    assert time_to_target(reports, 0.85) == 40.0
    assert time_to_target(reports, 0.95) is None
    assert improvements(reports) == [(10.0, 0.5), (30.0, 0.8), (40.0, 0.9)]


def test_a_miss_counts_the_whole_budget_and_is_marked():
    s = target_stats([100.0, None, 300.0], budget_s=1000.0)
    assert s["runs_s"] == [100.0, 1000.0, 300.0]
    assert s["missed"] == [False, True, False]
    assert s["misses"] == 1
    assert s["median_s"] == 300.0
    assert s["median_censored"] is False
    two = target_stats([None, 50.0, None], budget_s=1000.0)
    assert two["median_s"] == 1000.0 and two["median_censored"] is True
    even = target_stats([10.0, None], budget_s=100.0)
    assert even["median_s"] == 55.0 and even["median_censored"] is True
    with pytest.raises(ValueError):
        target_stats([], 1.0)


def _run(system, task, seed, medium, hard):
    return Run(system, task, seed, {"medium": medium, "hard": hard}, [(1.0, 0.1)])


def scripted():
    """Two tasks, three seeds. Task A: Quanta 100/200/300 s to hard, best Syne method 400/500/miss.
    Task B: Quanta misses twice, Syne reaches at 600 s every time. FIFO random misses everywhere."""
    runs = []
    for seed, (q, s) in enumerate([(100, 400), (200, 500), (300, None)]):
        runs += [_run("quanta_default", "A", seed, q / 2, q), _run("syne_asha", "A", seed, s, s)]
        runs += [_run("syne_random", "A", seed, 900, 900), _run("quanta_fifo_random", "A", seed, 800, None)]
    for seed, q in enumerate([None, 50, None]):
        runs += [_run("quanta_default", "B", seed, 10, q), _run("syne_asha", "B", seed, 20, 600)]
        runs += [_run("syne_random", "B", seed, 30, 700), _run("quanta_fifo_random", "B", seed, 40, None)]
    return runs


def test_tabulate_and_summarize_scripted_runs():
    targets = {"A": {"medium": 0.9, "hard": 0.95}, "B": {"medium": 0.8, "hard": 0.85}}
    runs = scripted()
    runs.reverse()  # any order in, seed order out
    tasks = tabulate(runs, targets, budget_s=1000.0)
    a = tasks["A"]["systems"]
    assert tasks["A"]["targets"] == {"medium": 0.9, "hard": 0.95}
    assert a["quanta_default"]["hard"]["runs_s"] == [100.0, 200.0, 300.0]
    assert a["quanta_default"]["seeds"] == [0, 1, 2]
    assert a["syne_asha"]["hard"]["runs_s"] == [400.0, 500.0, 1000.0]
    assert a["syne_asha"]["hard"]["median_s"] == 500.0
    assert tasks["B"]["systems"]["quanta_default"]["hard"]["median_s"] == 1000.0
    assert tasks["A"]["curves"]["quanta_default"] == [[[1.0, 0.1]]] * 3

    s = summarize(tasks)
    hard = s["hard"]
    assert hard["tasks"] == 2
    # best Syne per task: A 500 / 200 = 2.5, B 600 / 1000 = 0.6 -> median 1.55; Quanta wins A only.
    assert hard["median_ratio_best_syne"] == pytest.approx((2.5 + 0.6) / 2)
    assert hard["tasks_won_vs_best_syne"] == 1
    # FIFO random misses everywhere: 1000/200 = 5 on A, 1000/1000 = 1 on B.
    assert hard["median_ratio_fifo_random"] == pytest.approx(3.0)
    assert hard["wins_vs"] == {"quanta_fifo_random": 1, "syne_asha": 1, "syne_random": 1}
    assert hard["tasks_won_by"] == {"quanta_default": 1, "syne_asha": 1}
    med = s["medium"]
    assert med["median_ratio_vs"]["syne_random"] == pytest.approx(6.0)  # 900/100 on A, 30/10 on B
    assert med["tasks_won_by"] == {"quanta_default": 2}
    goals = s["goals"]
    assert goals["ratio_best_syne_hard"]["met"] is True  # 1.55 >= 1.3
    assert goals["tasks_won_vs_best_syne_hard"]["met"] is False  # 1 of 2 < 2/3
    assert goals["ratio_fifo_random_hard"]["met"] is False  # 3 < 7


def test_the_best_peer_counts_every_system_that_is_not_quantas_dehb_too():
    targets = {"A": {"medium": 0.9, "hard": 0.95}, "B": {"medium": 0.8, "hard": 0.85}}
    # DEHB beats every Syne Tune method on B (300 s, against 600): best peer B 300 / 1000 = 0.3.
    runs = scripted() + [_run("dehb_exact", t, seed, 5, 300) for t in "AB" for seed in range(3)]
    hard = summarize(tabulate(runs, targets, budget_s=1000.0))["hard"]
    assert hard["median_ratio_best_syne"] == pytest.approx((2.5 + 0.6) / 2)  # DEHB is not Syne Tune
    # best peer: A min(500, 900, 300) / 200 = 1.5, B 300 / 1000 = 0.3; Quanta sooner on A only
    assert hard["median_ratio_best_peer"] == pytest.approx((1.5 + 0.3) / 2)
    assert hard["tasks_won_vs_best_peer"] == 1
    assert "quanta_fifo_random" in hard["median_ratio_vs"]  # Quanta's own systems are not peers


def test_summary_without_the_reference_or_peers_says_none():
    tasks = tabulate([_run("syne_asha", "A", 0, 1, 2)], {"A": {"medium": 0.5, "hard": 0.6}}, 10.0)
    s = summarize(tasks)
    assert s["hard"]["tasks"] == 0
    assert s["hard"]["median_ratio_best_syne"] is None and s["hard"]["median_ratio_best_peer"] is None
    assert s["goals"]["ratio_best_syne_hard"]["met"] is False


def test_runs_file_round_trip_and_resume_skips_finished_units(tmp_path):
    """A benchmark killed midway keeps its finished runs (JSON lines) and a rerun does not redo them."""
    from bench.lcbench import Run, load_runs, run_all, save_run

    path = tmp_path / "runs.jsonl"
    a = Run("quanta_default", "3945", 0, {"medium": 100.0, "hard": None}, [(1.0, 0.5), (100.0, 0.9)], 2.5, 28800.0)
    b = Run("syne_asha", "3945", 0, {"medium": 50.0, "hard": 70.0}, [], 1.0, 70.0)
    save_run(path, a)
    save_run(path, b)
    with path.open("a") as fh:
        fh.write('{"system": "torn')  # a write cut short by a kill
    loaded = load_runs(path)
    assert loaded == [a, b]
    targets = {"3945": {"medium": 0.9, "hard": 0.99}}
    seen: list[Run] = []
    # Every unit is already done: nothing runs (a run would need the YAHPO data), the order is the units'.
    runs = run_all(["3945"], [0], ["syne_asha", "quanta_default"], 4, 8.0, targets, None, seen.append, done=loaded)
    assert runs == [b, a] and seen == []
    assert load_runs(tmp_path / "missing.jsonl") == []
    # --tabulate-only: a unit not in the file (seed 1 here) is left out, not run.
    runs = run_all(["3945"], [0, 1], ["syne_asha"], 4, 8.0, targets, None, seen.append, done=loaded, run_missing=False)
    assert runs == [b] and seen == []


def test_task_names_stand_for_the_suite_and_the_held_out_ten_which_together_are_lcbenchs_34():
    from bench.lcbench import task_list
    from quanta.sim.lcbench import HELD_OUT, SUITE

    assert task_list("suite") == list(SUITE) and task_list("heldout") == list(HELD_OUT)
    assert task_list("3945, heldout,7") == ["3945", *HELD_OUT, "7"]
    assert len(set(SUITE) | set(HELD_OUT)) == 34 and not set(SUITE) & set(HELD_OUT)


def test_also_reads_more_runs_files_without_writing_them_and_runs_wins_a_shared_unit(tmp_path):
    from bench.lcbench import Run, main, save_run

    runs, more, out = tmp_path / "runs.jsonl", tmp_path / "more.jsonl", tmp_path / "out.json"
    save_run(runs, Run("quanta_default", "3945", 0, {"medium": 100.0, "hard": 200.0}))
    save_run(more, Run("quanta_default", "3945", 0, {"medium": 1.0, "hard": 2.0}))  # --runs has this unit
    save_run(more, Run("syne_asha", "3945", 0, {"medium": 300.0, "hard": 600.0}))
    before = (runs.read_text(), more.read_text())
    main(
        ["--tasks", "3945", "--seeds", "0", "--systems", "quanta_default,syne_asha", "--runs", str(runs),
         "--also", str(more), "--tabulate-only", "--json", str(out)]
    )  # fmt: skip
    systems = json.loads(out.read_text())["tasks"]["3945"]["systems"]
    assert systems["quanta_default"]["hard"]["runs_s"] == [200.0]
    assert systems["syne_asha"]["hard"]["runs_s"] == [600.0]
    assert (runs.read_text(), more.read_text()) == before
    with pytest.raises(SystemExit):
        main(["--tasks", "3945", "--runs", str(runs), "--also", str(tmp_path / "nope.jsonl"), "--tabulate-only"])


def test_the_race_starts_quanta_and_syne_tune_on_the_real_surrogate(yahpo, tmp_path):
    """A tiny race on one task (a few simulated minutes, so nobody reaches the hard target): every
    system runs, a miss counts the budget, and the JSON leaves the curves out unless asked."""
    pytest.importorskip("syne_tune", reason="Syne Tune is installed by `make dev` (see the Makefile)")
    from bench.lcbench import main

    out = tmp_path / "race.json"
    systems = "quanta_default,quanta_fifo_random,syne_asha_exact"
    main(["--tasks", "3945", "--seeds", "0", "--workers", "2", "--hours", "0.02", "--systems", systems,
          "--json", str(out)])  # fmt: skip
    doc = json.loads(out.read_text())
    block = doc["tasks"]["3945"]
    assert set(block["systems"]) == set(systems.split(",")) and "curves" not in block
    for entry in block["systems"].values():
        (hard,) = entry["hard"]["runs_s"]
        assert 0 < hard <= 0.02 * 3600
    assert doc["summary"]["hard"]["tasks"] == 1


def test_the_targets_script_starts_on_the_real_surrogate(yahpo, tmp_path):
    from bench.lcbench_targets import main

    out = tmp_path / "targets.json"
    main(["--tasks", "3945", "--n", "50", "--json", str(out)])
    t = json.loads(out.read_text())["tasks"]["3945"]
    assert 0 < t["medium"] <= t["hard"] <= t["max"] <= 1
