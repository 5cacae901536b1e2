"""The live suite (bench/live_suite.py): every workload is complete (its spec parses, its trainable and
the peer adapter it runs through import), a workload's targets come from its file, and a tiny race of
the held-out workload, run as `bench/search.py --suite` runs it, starts Quanta's default and Optuna and
writes the workload's JSON and the suite summary."""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
from pathlib import Path

import pytest

from bench.live_suite import ADAPTERS, BY_NAME, SUITE, TARGETS_TO_CHOOSE, select
from bench.peers import AdapterTrial, configspace, decode_flat
from bench.search import suite_summary
from quanta.spec import load_spec

from .conftest import run_script


def test_the_suite_has_six_named_workloads_and_two_held_out() -> None:
    assert {"mnist1d", "mnist1d_long", "digits", "cifar10", "hf_tiny", "lightning"} < set(BY_NAME)
    assert [w.name for w in SUITE if w.held_out] == ["breast_cancer", "breast_cancer_loss"]
    assert set(TARGETS_TO_CHOOSE) <= set(BY_NAME)


@pytest.mark.parametrize("workload", SUITE, ids=lambda w: w.name)
def test_every_workload_is_complete(workload) -> None:
    spec = load_spec(workload.spec_path)  # parses and validates the spec
    assert spec.metric.target is not None and workload.trials > 0 and workload.max_seconds > 0
    module, _, fn = ADAPTERS[workload.adapter].partition(":")
    if workload.missing():
        pytest.skip(f"{workload.name} needs {workload.missing()} (pip install -e '.[integrations]')")
    assert callable(getattr(importlib.import_module(module), fn))
    assert callable(workload.trainable())
    # The peers' view of the space: BOHB's ConfigSpace samples decode to configurations of the spec.
    if importlib.util.find_spec("ConfigSpace") is not None:
        flat = dict(configspace(spec.space, 0).sample_configuration())
        assert not any("/" in k for k in flat), "Ray Tune would split such a key into nested dicts"
        config = decode_flat(spec.space, flat)
        assert set(config) == set(spec.space)


def test_the_held_out_trainable_runs_under_a_peers_trial() -> None:
    """The adapter peers use is the SDK's own Trial: reports reach the peer's callback at their step."""
    seen: list[tuple[int, float]] = []
    trial = AdapterTrial({"seed": 0}, 201, lambda step, m: seen.append((step, m["accuracy"])))
    BY_NAME["breast_cancer"].trainable()(trial.config, trial)
    assert [s for s, _ in seen] == [0, 100, 200] and all(0.0 <= a <= 1.0 for _, a in seen)


def test_targets_come_from_the_file_and_a_missing_one_names_the_command(tmp_path: Path) -> None:
    w = BY_NAME["breast_cancer"]
    with pytest.raises(FileNotFoundError, match="choose_targets.py --suite --workloads breast_cancer"):
        w.targets(tmp_path)
    w.targets_path(tmp_path).write_text(json.dumps({"targets": {"easy": 0.9, "medium": 0.95, "hard": 0.97}}))
    assert w.targets(tmp_path) == {"easy": 0.9, "medium": 0.95, "hard": 0.97}
    with pytest.raises(ValueError, match="unknown nope"):
        select("digits,nope")


def test_the_summary_is_the_best_peers_median_over_the_defaults() -> None:
    def res(easy: float, medium: float, hard: float) -> dict:
        return {t: {"median_s": v} for t, v in (("easy", easy), ("medium", medium), ("hard", hard))}

    targets = {"easy": 0.9, "medium": 0.95, "hard": 0.97}
    per = {
        "a": {"default": res(10, 10, 10), "optuna": res(12, 15, 30), "ray": res(11, 13, 40)},
        "b": {"default": res(10, 20, 40), "optuna": res(9, 20, 40), "ray": res(20, 40, 80)},
    }
    s = suite_summary(per, {"a": targets, "b": targets}, ["default", "optuna", "ray"], 2)
    a = s["workloads"]["a"]
    assert a["medium"]["best_peer"] == "ray" and a["medium"]["ratio"] == pytest.approx(1.3)
    assert a["hard"]["best_peer"] == "optuna" and a["hard"]["device_s"] == 20
    assert s["meet_goal"] == ["a"] and s["meet_goal_count"] == "1/2"
    assert s["geomean"]["hard"] == pytest.approx((3.0 * 1.0) ** 0.5)


def test_a_tiny_race_of_the_held_out_workload_writes_its_json(tmp_path: Path) -> None:
    if importlib.util.find_spec("optuna") is None:
        pytest.skip("optuna is not installed (pip install -e '.[bench]')")
    targets = {"easy": 0.5, "medium": 0.6, "hard": 0.999}  # hard out of reach: both spend their budget
    (tmp_path / "targets_breast_cancer.json").write_text(json.dumps({"targets": targets}))
    out = tmp_path / "out"
    run_script(
        "search",
        *("--suite", "--workloads", "breast_cancer", "--systems", "default,optuna", "--seeds", "0"),
        *("--trials", "2", "--max-steps", "101", "--max-seconds", "6"),
        *("--targets-dir", str(tmp_path), "--out-dir", str(out)),
        timeout=150,
    )
    race = json.loads((out / "search_breast_cancer.json").read_text())
    assert race["targets"] == targets and race["workload"]["spec"] == "examples/breast_cancer.yaml"
    assert set(race["systems"]) == {"default", "optuna"}
    for system in ("default", "optuna"):
        assert race["systems"][system]["hard"]["reached"] == [False]
    summary = json.loads((out / "suite.json").read_text())
    assert summary["system"] == "default" and summary["peers"] == ["optuna"]
    assert set(summary["workloads"]["breast_cancer"]) == {"easy", "medium", "hard"}


def test_a_peers_trial_checkpointed_at_a_report_resumes_after_it(tmp_path: Path) -> None:
    """What Ray Tune's BOHB relies on: the checkpoint a report makes due is written at the next step
    boundary, and a trial resumed from it goes on from there, not from step 0."""
    fn = BY_NAME["breast_cancer"].trainable()
    path = str(tmp_path / "trial.pt")
    saved: list[tuple[int, int]] = []
    first = AdapterTrial(
        {"seed": 0}, 101, lambda s, m: None, checkpoint_path=path, on_checkpoint=lambda p, s, m: saved.append((s, 0))
    )
    fn(first.config, first)
    assert saved == [(0, 0), (100, 0)] and Path(path).exists()
    steps: list[int] = []
    second = AdapterTrial({"seed": 0}, 201, lambda s, m: steps.append(s), checkpoint_path=path, resume=True)
    fn(second.config, second)
    assert second.restored_step == 101 and steps == [200]


def test_the_peers_stop_at_a_target_in_the_direction_of_the_metrics_goal(tmp_path: Path) -> None:
    """A loss to minimize is past its target below it, and the best of a log is its least value."""
    from bench.peers import _best_in_log, past

    spec = load_spec(BY_NAME["breast_cancer_loss"].spec_path)
    log = tmp_path / "reports.log"
    log.write_text("1.0 0.30\n2.0 0.08\n3.0 0.12\n")
    assert _best_in_log(str(log), spec) == 0.08
    assert past(0.06, 0.07, spec) and not past(0.08, 0.07, spec)
    up = load_spec(BY_NAME["breast_cancer"].spec_path)
    assert _best_in_log(str(log), up) == 0.30 and past(0.99, 0.98, up)
    assert _best_in_log(str(tmp_path / "none.log"), spec) == math.inf  # nothing reported: the worst
