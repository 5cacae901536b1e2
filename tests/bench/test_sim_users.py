"""bench/sim_users.py and bench/sim_speed.py start on the Tiresias toy trace (a few simulated jobs)."""

from __future__ import annotations

import json

from bench.sim_speed import main as speed_main
from bench.sim_users import main as users_main


def test_many_users_with_and_without_shares_on_a_toy_trace(traces, tmp_path):
    out = tmp_path / "users.json"
    users_main(["--trace", "60_job", "--max-jobs", "12", "--gpus", "8", "--users", "2", "--quantum", "600",
                "--only", "gandiva,gandiva+shares", "--out", str(out)])  # fmt: skip
    runs = json.loads(out.read_text())["runs"]
    assert set(runs) == {"gandiva", "gandiva+shares"}
    assert runs["gandiva+shares"]["shares"] == "equal" and set(runs["gandiva"]["users"]) == {"u0", "u1"}


def test_the_simulator_speed_on_a_toy_trace(traces, tmp_path):
    out = tmp_path / "speed.json"
    speed_main(["--trace", "60_job", "--gpus", "8", "--gpus-per-server", "4", "--policy", "fifo", "--out", str(out)])
    (row,) = json.loads(out.read_text()).values()
    assert row["jobs"] == 60 and row["wall_s"] > 0 and row["policy"] == "fifo"
