"""Write `release-before-migrations.db`: a small SQLite database as the last Quanta without versioned
migrations wrote it (tests/unit/test_migrations.py upgrades a copy and checks every row is there).

Run with that release's code first on the path (see README.md here), not with the current tree:

    PYTHONPATH=<checkout of that release> python tests/data/make_release_db.py tests/data/release-before-migrations.db

What it holds (fixed clock, fixed tokens, secret `SECRET`): users admin, bob, a deleted carol and a new
carol; three searches (bob's completed one with trials, reports, quanta, latencies and a pair; old
carol's stopped one; new carol's queued one) after a fourth, the newest, was deleted; the controller's
round and policy state, a published cluster view, a warm start, a pending deletion request, a node with
its event cursor; tokens for bob and the new carol.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from quanta.db.cluster import DbCluster
from quanta.db.models import ClusterView, DevicePlacement, LatencyRow, PairRow, QuantumRow, ReportRow
from quanta.db.store import Store
from quanta.executor.wire import NodeDevice

SECRET = b"release-db-secret"
BOB_TOKEN = "qnt_bob-release-token-0123456789abcdef"
CAROL_TOKEN = "qnt_carol-release-token-0123456789abcdef"
T0 = 1_800_000_000.0  # the fixed clock's start


def main(path: Path) -> None:
    path.unlink(missing_ok=True)
    url = f"sqlite:///{path}"
    store = Store(url, secret=SECRET)
    cluster = DbCluster(engine=store.engine)  # the distributed tables, as a service with workers has them
    store.add_user("bob", T0, weight=2.0, max_alive_trials=8)
    store.add_user("carol", T0 + 1)
    store.add_token("bob", BOB_TOKEN, T0 + 2, name="laptop")
    spec = {"name": "bob-search", "trainable": "examples.mnist1d:train", "space": {"lr": {"loguniform": [1e-4, 1e-1]}}}
    bob = store.create_search("bob-search", spec, T0 + 10, owner="bob")
    assert bob.id is not None
    store.update_search(bob.id, status="completed", started_at=T0 + 11, finished_at=T0 + 90, best_metric=0.91)
    for n in range(3):
        t = store.add_trial(bob.id, n, {"lr": 0.01 * (n + 1)}, {"lr": [0.01 * (n + 1)]}, T0 + 12 + n)
        assert t.id is not None
        store.update_trial(t.id, status="completed", steps=20, metric=0.8 + n / 20, best_metric=0.8 + n / 20)
        store.add_rows(
            ReportRow(trial_id=t.id, search_id=bob.id, step=s, at=T0 + 20 + s, metrics={"acc": 0.5 + s / 40},
                      objective=0.5 + s / 40)
            for s in (5, 10, 20)
        )  # fmt: skip
        store.add_rows([
            QuantumRow(trial_id=t.id, search_id=bob.id, devices="cpu:0", started_at=T0 + 20, ended_at=T0 + 30,
                       steps=20, rate=2.0, rss_mb=100.0),
            LatencyRow(trial_id=t.id, kind="park", ms=12.5, at=T0 + 30),
        ])  # fmt: skip
    trials = store.trials(bob.id)
    store.add_rows([PairRow(trial_a=trials[0].id, trial_b=trials[1].id, rate_a=1.5, rate_b=1.4, at=T0 + 40)])
    old_carol = store.create_search("carol-search", {**spec, "name": "carol-search"}, T0 + 20, owner="carol")
    assert old_carol.id is not None
    store.update_search(old_carol.id, status="running", started_at=T0 + 21)
    newest = store.create_search("deleted", {**spec, "name": "deleted"}, T0 + 30, owner="bob")
    assert newest.id is not None
    store.delete_search(newest.id)  # the newest search is gone: its id must not come back
    store.delete_user("carol", T0 + 40, force=True)  # her running search gets a stop command
    store.update_search(old_carol.id, status="stopped", finished_at=T0 + 41, command=None)
    store.add_user("carol", T0 + 50)  # a new user of the old name
    store.add_token("carol", CAROL_TOKEN, T0 + 51)
    new_carol = store.create_search("carol-again", {**spec, "name": "carol-again"}, T0 + 60, owner="carol")
    assert new_carol.id is not None
    store.save_warm_start(new_carol.id, [{"params": {"lr": 0.02}, "objective": 0.85}])
    store.request_delete(bob.id, T0 + 70)
    store.save_round_no(17)
    store.save_policy_state("asha", {"rungs": {"1": [1, 2]}}, judge={"1": {"at": 20}})
    store.publish_cluster_view(
        ClusterView(at=T0 + 80, devices=(DevicePlacement("cpu:0", "local", "cpu", None, running=(1,)),), round_no=17)
    )
    cluster.register("node-a", "inc-1", [NodeDevice("node-a/cpu:0", "cpu", 0.0)])
    cluster.save_cursor({"handled": {"node-a": 3}, "returned": {"node-a": 4}})
    store.engine.dispose()
    with sqlite3.connect(path) as conn:  # one self-contained file: no -wal beside it
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")
    with sqlite3.connect(path) as conn:
        conn.execute("VACUUM")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
