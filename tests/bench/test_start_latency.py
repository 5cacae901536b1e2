"""bench/start_latency.py starts: the floor under every start (a process importing torch) timed once.
(The cold path, `quanta run` to its first mini-batch, is the command tests/bench/test_search_race.py
runs and times.)"""

from __future__ import annotations

import json

import pytest

from bench.start_latency import main, summary


def test_the_import_floor_is_timed(tmp_path):
    out = tmp_path / "start.json"
    main(["--paths", "import_torch", "--repeats", "1", "--json", str(out)])
    paths = json.loads(out.read_text())["paths"]
    assert set(paths) == {"import_torch"}
    assert 0 < paths["import_torch"]["median_s"] < 120


def test_unknown_paths_are_refused_by_name():
    with pytest.raises(SystemExit):
        main(["--paths", "warm"])


def test_a_summary_leaves_runs_without_a_first_step_out_of_its_figures():
    s = summary([2.0, None, 4.0])
    assert s == {"runs_s": [2.0, None, 4.0], "median_s": 3.0, "min_s": 2.0, "max_s": 4.0}
    assert summary([None])["median_s"] is None
