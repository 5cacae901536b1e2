"""bench/round_cost.py: the windowing (pure) and the script on the real surrogate, a short search."""

from __future__ import annotations

import json

from bench.round_cost import windows

from .conftest import run_script


def test_windows_take_the_median_of_the_rounds_and_asks_in_each_and_say_none_where_there_are_none():
    rounds = [(10, 0.001), (12, 0.003), (15, 0.002), (40, 0.010)]
    asks = [(11, 0.004), (41, 0.020), (42, 0.030)]
    out = windows(rounds, asks, [(10, 20), (40, 50), (60, 70)])
    assert out[0] == {"from": 10, "to": 20, "rounds": 3, "round_ms": 2.0, "asks": 1, "ask_ms": 4.0}
    assert out[1]["rounds"] == 1 and out[1]["round_ms"] == 10.0 and out[1]["ask_ms"] == 25.0
    assert out[2] == {"from": 60, "to": 70, "rounds": 0, "round_ms": None, "asks": 0, "ask_ms": None}


def test_the_script_times_a_growing_search_and_ends_at_its_trials(yahpo, tmp_path):
    out = tmp_path / "round_cost.json"
    proc = run_script(
        "round_cost", "--task", "3945", "--seed", "0", "--trials", "30", "--windows", "5-15,15-30",
        "--json", str(out), timeout=300,
    )  # fmt: skip
    doc = json.loads(out.read_text())
    assert doc["task"] == "3945" and 15 <= doc["trials"] < 30
    assert all(w["rounds"] > 0 and w["round_ms"] > 0 for w in doc["windows"])
    assert doc["windows"][0]["asks"] > 0
    assert "round ms" in proc.stdout
