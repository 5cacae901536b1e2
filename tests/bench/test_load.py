"""bench/load.py starts: a real `quanta serve` with one search, a tiny load (4 clients, 2 event streams) for
2 s, its table and its JSON with the figures the goals are judged on."""

from __future__ import annotations

import json

from tests.bench.conftest import run_script


def test_the_load_benchmark_runs_a_tiny_load_and_writes_its_figures(tmp_path):
    out = tmp_path / "load.json"
    proc = run_script("load", "--seconds", "2", "--clients", "4", "--streams", "2", "--json", str(out), timeout=240)
    figures = json.loads(out.read_text())
    assert figures["config"] == {"seconds": 2.0, "clients": 4, "streams": 2, "devices": 2}
    assert figures["requests"] > 0 and figures["read_requests_per_s"] > 0
    assert figures["server_errors_5xx"] == 0 and figures["transport_failures"] == 0
    assert figures["streams"]["statuses"] == [200]
    assert figures["search_status_after"] == "running"
    assert "GET /healthz" in figures["per_route"] and figures["p99_ms"] is not None
    assert set(figures["goals"]) >= {"read_requests_per_s >= 300", "p99 <= 250 ms", "healthz p99 <= 50 ms", "zero 5xx"}
    assert len(figures["load_average"]["before"]) == 3
    assert "read routes" in proc.stdout and "GET /healthz" in proc.stdout
