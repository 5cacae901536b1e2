"""bench/pbt.py: the specs each system runs (the same population, interval and mutable space; the
default's own space not mutable), the summary's shape, and one seed of every system on a tiny budget,
started as a user does, writing the table's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.pbt import SYSTEMS, main, spec_for, summarise, system_interval

from .conftest import run_script


def test_every_pbt_system_reads_one_spec_and_the_default_searches_the_same_rate_fixed():
    spec = spec_for("quanta_pbt", 3, 2000, 200, 4, 60.0)
    knobs = spec.scheduler
    assert knobs.policy == "pbt" and knobs.population == 4 and knobs.interval_steps == 200  # type: ignore[union-attr]
    assert spec.mutable == ("lr",) and spec.space == {"lr": {"loguniform": [0.001, 0.5]}}
    assert (spec.seed, spec.budget.max_trials, spec.budget.max_steps) == (3, 4, 2000)
    default = spec_for("default", 3, 2000, 200, 4, 60.0)
    assert default.scheduler.policy == "asha" and default.search.algorithm == "bohb"  # what a user gets
    assert default.mutable == () and default.space == spec.space and default.budget.max_trials == 100


def test_the_summary_counts_a_miss_as_its_wall_time_and_divides_each_peer_by_quanta():
    runs = {
        "quanta_pbt": [{"reached_s": 10.0, "wall_s": 50.0, "best_final": 0.9, "best_any": 0.95}],
        "ray_pbt": [{"reached_s": None, "wall_s": 40.0, "best_final": None, "best_any": 0.8}],
    }
    out = summarise(runs, 0.95)
    assert out["systems"]["ray_pbt"]["median_reached_s"] == 40.0 and out["systems"]["ray_pbt"]["reached"] == 0
    assert out["ratios"] == {"ray_pbt": pytest.approx(4.0)}
    assert out["systems"]["ray_pbt"]["median_best_final"] is None  # no member reached the last step
    assert out["systems"]["ray_pbt"]["median_best_any"] == 0.8


def test_a_system_runs_at_another_interval_after_an_at_and_its_ratio_is_kept():
    assert system_interval("syne_pbt@500", 1000) == ("syne_pbt", 500)
    assert system_interval("syne_pbt", 1000) == ("syne_pbt", 1000)
    with pytest.raises(SystemExit, match="positive number of steps"):
        system_interval("syne_pbt@0", 1000)
    runs = {
        name: [{"reached_s": t, "wall_s": 50.0, "best_final": 0.9, "best_any": 0.95}]
        for name, t in (("quanta_pbt", 10.0), ("syne_pbt", 20.0), ("syne_pbt@500", 15.0), ("quanta_pbt@500", 12.0))
    }
    assert summarise(runs, 0.95)["ratios"] == {"syne_pbt": pytest.approx(2.0), "syne_pbt@500": pytest.approx(1.5)}
    with pytest.raises(SystemExit, match="unknown default@500"):
        main(["--systems", "quanta_pbt,default@500", "--target", "0.9"])


def test_bad_systems_are_refused_by_name():
    with pytest.raises(SystemExit, match="unknown tf"):
        main(["--systems", "tf", "--target", "0.9"])
    with pytest.raises(SystemExit, match="default takes"):
        main(["--systems", "default", "--target", "0.9"])


def test_one_seed_of_every_system_on_a_tiny_budget(tmp_path: Path):
    pytest.importorskip("ray")
    pytest.importorskip("syne_tune")
    out = tmp_path / "pbt.json"
    args = ["--seeds", "0", "--max-steps", "400", "--interval", "100", "--max-seconds", "60"]
    proc = run_script("pbt", *args, "--target", "0.5", "--json", str(out), timeout=900)
    assert "seconds to accuracy" in proc.stdout
    result = json.loads(out.read_text())
    assert set(result["systems"]) == set(SYSTEMS) and result["target"] == 0.5
    for name, s in result["systems"].items():
        (run,) = s["runs"]
        assert run["seed"] == 0 and run["reports"] > 0, name
        assert set(run) >= {"wall_s", "reached_s", "best_final", "best_any", "exit_code"}
    for name in ("quanta_pbt", "ray_pbt", "syne_pbt"):  # every member trained to the last step
        assert result["systems"][name]["runs"][0]["best_final"] is not None, name
    assert set(result["ratios"]) <= {"ray_pbt", "syne_pbt"}
