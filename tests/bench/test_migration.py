"""bench/migration.py starts: two worker nodes on this machine (Redis started here, the database a
SQLite file), one trial of a small MLP moved from one node to the other through its checkpoint and
back, and twice between the devices of a node."""

from __future__ import annotations

import json
import shutil

import pytest

from bench.migration import main


@pytest.mark.services
def test_moves_across_and_within_nodes_are_timed(tmp_path):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (make system-deps)")
    out = tmp_path / "migration.json"
    main(["--moves", "2", "--width", "32", "--depth", "2", "--db", f"sqlite:///{tmp_path / 'm.db'}",
          "--json", str(out)])  # fmt: skip
    doc = json.loads(out.read_text())
    assert len(doc["moves"]) == 2 and len(doc["in_node_ms"]) == 2
    assert all(0 < m["checkpoint_ms"] <= m["total_ms"] for m in doc["moves"])
    assert doc["params"] == 256 * 32 + 32 + 32 * 10 + 10
