"""bench/sim_validate.py starts: a two-job trace run for real (sleeping jobs on CPU devices) and in the
simulator, through the same controller and policy."""

from __future__ import annotations

import json

from bench.sim_validate import main


def test_a_tiny_trace_runs_for_real_and_simulated(tmp_path):
    out = tmp_path / "validate.json"
    main(["--jobs", "2", "--median-steps", "10", "--interarrival", "0.5", "--out", str(out)])
    doc = json.loads(out.read_text())
    assert doc["policy"] == "fifo" and len(doc["jobs"]) == 2
    assert all(j["sim_jct_s"] > 0 and j["real_jct_s"] > 0 for j in doc["jobs"])
