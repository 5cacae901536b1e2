"""bench/sim_compare.py: the comparison that proves re-simulated runs equal the published ones."""

from __future__ import annotations

import json

from bench.sim_compare import ELSEWHERE, SIM_RUNS, VALIDATE_RUNS, compare_fields, main, plan, published_names


def rows(published, now):
    return {r.field: (r.published, r.now, r.same) for r in compare_fields("run", "fifo", published, now)}


def test_every_field_but_the_hosts_timings_is_compared():
    got = rows(
        {"mean_jct_s": 1.5, "wall_s": 3.0, "jobs_per_s": 10.0, "by": {"1": 2}},
        {"mean_jct_s": 1.5, "wall_s": 9.0, "jobs_per_s": 1.0, "by": {"1": 2}},
    )
    assert got == {"mean_jct_s": (1.5, 1.5, True), "by.1": (2, 2, True)}


def test_a_changed_appeared_or_vanished_field_is_a_difference():
    published = {"a": 1.0, "gone": 1, "jobs": [{"x": 1}], "ticks": 10}
    got = rows(published, {"a": 1.000001, "new": 2, "jobs": [{"x": 1}, {"x": 2}], "ticks": 3})
    assert {f for f, (_, _, same) in got.items() if not same} == {"a", "gone", "new", "jobs[1]"}
    assert got["jobs[0].x"] == (1, 1, True)
    assert "ticks" not in got  # how often the controller planned (quiet rounds skipped), not a result


def test_floats_agree_to_their_last_digits_and_ints_exactly():
    got = rows({"u": 0.28473392087211474, "n": 3}, {"u": 0.28473392087211485, "n": 4})
    assert got["u"][2] and not got["n"][2]  # the same time summed in other slices; a count that moved


def test_every_published_file_has_a_check_or_a_stated_reason():
    names = published_names()
    assert set(SIM_RUNS) | set(VALIDATE_RUNS) <= set(names)
    tasks = plan(names, quick=False, explicit=False)
    assert [t.name for t in tasks] == names
    unknown = [t.name for t in tasks if t.kind == "skip" and t.name not in ELSEWHERE]
    assert not unknown, f"teach bench/sim_compare.py about {unknown}"


def test_quick_mode_runs_each_published_cluster_once_plus_the_toy():
    tasks = plan(published_names(), quick=True, explicit=False)
    quick = sorted(t.name for t in tasks if t.kind == "quick_sim")
    assert quick == [
        "quick_60_job_8",
        "quick_6c71a0_100",
        "quick_b436b2_100",
        "quick_ee9e8c_200",
        "quick_ee9e8c_200_mixed",
    ]


def test_the_published_validation_re_simulates_identically(tmp_path):
    """The script starts and agrees with a published file: the simulated half of the fifo validation
    (a synthetic trace, no Philly data) re-simulated with today's code, every field the same."""
    out = tmp_path / "compare.json"
    assert main(["--only", "sim_validate_fifo", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["differences"] == 0 and report["fields"] > 10
