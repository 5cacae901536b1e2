"""bench/tail.py: its summary on scripted runs, and the script on the real surrogate with a small budget."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.tail import summarize


def run(task: str, seed: int, order: str, medium: float | None, hard: float | None, device: float) -> dict:
    return {
        "task": task, "seed": seed, "order": order, "medium_s": medium, "hard_s": hard, "end_s": device / 4,
        "device_s": device, "completed": 64, "killed": 0, "started": 64,
    }  # fmt: skip


def test_the_summary_counts_hits_and_compares_each_order_with_the_first_per_run_and_per_task():
    runs = [
        run("a", 0, "highest", 10.0, 100.0, 400.0),
        run("a", 0, "lowest", 10.0, 50.0, 300.0),  # hard twice as soon
        run("a", 1, "highest", 20.0, None, 1000.0),  # a miss: counts the whole budget (1,000 s here)
        run("a", 1, "lowest", 20.0, None, 1200.0),
        run("b", 0, "highest", 30.0, 200.0, 500.0),
        run("b", 0, "lowest", 60.0, 400.0, 500.0),  # later at both
    ]
    out = summarize(runs, ["highest", "lowest"], miss_s=1000.0)
    assert out["highest"]["hits_hard"] == 2 and out["lowest"]["hits_medium"] == 3
    assert out["highest"]["median_device_s_missed"] == 1000.0 and out["lowest"]["median_device_s_missed"] == 1200.0
    hard = out["lowest"]["hard"]
    assert (hard["differ"], hard["sooner"], hard["later"]) == (2, 1, 1)
    assert hard["geomean_ratio_differing"] == pytest.approx(math.sqrt(2.0 * 0.5))
    # per task, the median over its seeds: a: (100, 1000) -> 550 against (50, 1000) -> 525; b: 200 / 400
    assert hard["median_task_ratio"] == pytest.approx((550 / 525 + 0.5) / 2)
    assert out["lowest"]["medium"]["sooner"] == 0 and out["lowest"]["medium"]["later"] == 1
    assert "hard" not in out["highest"]  # the baseline is not compared with itself


def test_the_script_runs_both_orders_on_one_task_and_writes_its_json(yahpo: Path, tmp_path: Path):
    from bench.tail import main

    out = tmp_path / "tail.json"
    main(["--tasks", "3945", "--seeds", "0", "--trials", "8", "--hours", "0.5", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert {r["order"] for r in doc["runs"]} == {"highest", "lowest"}
    assert all(r["started"] <= 8 for r in doc["runs"])  # the trial budget holds
    assert set(doc["summary"]) == {"highest", "lowest"} and doc["trials"] == 8
