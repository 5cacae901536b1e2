"""A search that cannot succeed ends early and says why, through the real `quanta run` (a subprocess):
a trainable that raises in every trial, a metric name the trainable never reports, exit codes of their
own; a search without a target exits 0; the summary counts trials by how they ended; and a spec's error
is refused before anything heavy is imported or started."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import yaml

from tests.integration.test_quanta_run import ROOT, TINY, quanta_run

BOOM = {
    **TINY,
    "name": "boom",
    "trainable": "tests.trainables:boom",
    "budget": {"max_trials": 20, "max_steps": 10},
    "parallelism": 2,
}
TYPO = {
    **TINY,
    "name": "typo",
    "trainable": "tests.trainables:chatty",
    "metric": {"name": "acc", "target": 0.9},  # chatty reports `accuracy`
    "budget": {"max_trials": 20, "max_steps": 40},
    "parallelism": 2,
    "config": {},
}


def test_a_trainable_that_always_raises_ends_the_search_failed_with_its_traceback(tmp_path):
    code, output, out = quanta_run(tmp_path, BOOM)
    assert code == 4, output
    result = json.loads(out.read_text())
    assert result["status"] == "failed"
    assert result["error"].startswith("5 trials in a row failed")
    failed = [t for t in result["trials"] if t["status"] == "failed"]
    assert len(failed) >= 5 and len(result["trials"]) < 20  # it stopped early, not after 20 trials
    assert result["counts"]["failed"] == len(failed)
    # The summary names the failure, counts the failed trials and shows the first one's traceback.
    assert "5 trials in a row failed" in output and f"{len(failed)} failed" in output
    assert f"first failure (trial {failed[0]['id']})" in output
    assert "Traceback (most recent call last)" in output and "ValueError: boom at step 3" in output


def test_every_trial_failing_fails_the_search_with_the_early_stop_off(tmp_path):
    spec = {**BOOM, "budget": {"max_trials": 3, "max_steps": 10, "max_consecutive_failures": 0}}
    code, output, out = quanta_run(tmp_path, spec)
    assert code == 4, output
    result = json.loads(out.read_text())
    assert [t["status"] for t in result["trials"]] == ["failed"] * 3  # 0: no early stop, all 3 ran
    assert result["status"] == "failed" and result["error"] == "all 3 trials failed"
    assert "ValueError: boom at step 3" in output


def test_a_metric_never_reported_is_warned_about_then_stops_the_search(tmp_path):
    code, output, out = quanta_run(tmp_path, TYPO)
    assert code == 4, output
    result = json.loads(out.read_text())
    assert result["status"] == "failed" and len(result["trials"]) < 20
    # Warned once (in the log and the result), naming the metric and what the trials did report.
    assert result["warning"].startswith("metric 'acc' has not been reported: trials report 'accuracy'")
    assert output.count("WARNING quanta.controller: search 1: metric 'acc' has not been reported") == 1
    # Stopped at the fifth such trial (or a sixth, when two ended in the controller's same round).
    stopped = re.match(r"metric 'acc' was never reported: (\d+) trials reported only 'accuracy'", result["error"])
    assert stopped and 5 <= int(stopped.group(1)) <= 6, result["error"]
    assert "metric 'acc' was never reported" in output


def test_a_search_without_a_target_that_spends_its_budget_exits_0(tmp_path):
    spec = {**TINY, "metric": {"name": "accuracy"}, "budget": {"max_trials": 2, "max_steps": 50}}
    code, output, out = quanta_run(tmp_path, spec)
    assert code == 0, output
    result = json.loads(out.read_text())
    assert result["status"] == "completed" and result["target"] is None and not result["reached"]
    assert "none: the search ran its budget" in output


def test_the_summary_counts_trials_stopped_at_the_target_apart_from_completed(tmp_path):
    """Under ASHA the target is reached while the other trials run or wait at a rung: they are stopped,
    and the summary says so instead of "(0 completed)"."""
    spec = {
        **TINY,
        "budget": {"max_trials": 12, "max_steps": 270},
        "parallelism": 4,
        "metric": {"name": "accuracy", "target": 0.85},
        "scheduler": {"policy": "asha", "min_steps": 10, "eta": 3},
        "config": {"report_every": 5, "sleep_s": 0.002},
    }
    code, output, out = quanta_run(tmp_path, spec)
    assert code == 0, output
    result = json.loads(out.read_text())
    counts = result["counts"]
    statuses = [t["status"] for t in result["trials"]]
    assert counts["stopped"] == statuses.count("stopped") >= 1
    assert counts["completed"] == statuses.count("completed")
    assert counts["evaluated"] == len(statuses)  # all ended
    assert f"{counts['stopped']} stopped" in output and "(0 completed)" not in output
    assert "alive (running, parked or queued) when target reached" in output


def test_a_spec_error_is_refused_before_anything_heavy_is_imported_or_started(tmp_path):
    """`quanta run bad.yaml` names the bad field at once: no torch, HyperOpt or database imported, no trial
    template (a process importing torch) started, nothing stored."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**TINY, "budget": {"max_trails": 3}}))
    probe = f"""
import json, sys, time
started = []
sys.addaudithook(lambda event, args: started.append(str(args[0])) if event == "subprocess.Popen" else None)
t0 = time.perf_counter()
from typer.testing import CliRunner
from quanta.cli import app
result = CliRunner().invoke(app, ["run", {str(bad)!r}, "--db", "sqlite:///{tmp_path}/q.db"])
# a package imported is in sys.modules by its own name (`hyperopt.atpe` alone is the deferred placeholder
# quanta.search registers, importing nothing)
heavy = sorted(set(sys.modules) & {{"torch", "hyperopt", "scipy", "sqlalchemy", "numpy"}})
print(json.dumps({{"code": result.exit_code, "output": result.output, "heavy": heavy, "started": started,
                  "seconds": time.perf_counter() - t0}}))
"""
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    wall = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["code"] == 2 and "budget.max_trails" in seen["output"], seen
    assert seen["heavy"] == [] and seen["started"] == [], seen
    assert not (tmp_path / "q.db").exists()
    assert seen["seconds"] < 2.0 and wall < 10.0, (seen["seconds"], wall)  # measured: 0.15 s and 0.3 s
