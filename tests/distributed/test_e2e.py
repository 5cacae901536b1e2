"""End to end on many "machines": two worker nodes of 2 CPU devices each, the API and the controller
(`quanta serve --broker`), PostgreSQL and Redis. A 20-trial gandiva search on digits posted to the API
reaches its target, and the API's /cluster shows both nodes."""

from __future__ import annotations

import time

import httpx
import pytest
from sqlmodel import select

from quanta.db.models import IntentRow
from tests.conftest_services import free_port
from tests.distributed.conftest import Cluster, wait_for

pytestmark = [pytest.mark.services, pytest.mark.slow]

TARGET = 0.97


def digits_spec(policy: str) -> dict:
    return {
        "name": "digits-cluster",
        "trainable": "examples.digits:train",
        "space": {
            "lr": {"loguniform": [1.0e-3, 0.1]},
            "hidden": {"choice": [32, 64, 128]},
            "dropout": {"uniform": [0.0, 0.3]},
            "batch_size": {"choice": [32, 64]},
        },
        "metric": {"name": "accuracy", "goal": "maximize", "target": TARGET},
        "budget": {"max_trials": 20, "max_steps": 500, "max_seconds": 240},
        "parallelism": 6,
        "search": {"algorithm": "tpe", "n_startup": 6},
        "scheduler": {"policy": policy, "quantum_s": 1.0},
        "config": {"eval_every": 25},
    }


def test_gandiva_search_on_two_nodes_reaches_target(cluster: Cluster) -> None:
    policy = "gandiva"
    cluster.stop("controller")  # one controller per database: serve brings its own
    port, token = free_port(), "e2e-token-0123456789abcdefghijklmno"
    cluster.serve(port, token)
    # A POST imports the trainable in a process of its own first (torch and scikit-learn: several seconds
    # on a loaded 2-core machine), so the client waits longer than httpx's 5 s default.
    api = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}, timeout=45)
    try:

        def healthy() -> bool:
            assert cluster.procs["serve"].poll() is None, cluster.log("serve")[-3000:]
            try:
                return api.get("/healthz").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, 60, "the API")
        r = api.post("/api/v1/searches", json=digits_spec(policy))
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        started = time.monotonic()
        row = cluster.wait_search(sid, 200)
        assert row.status == "completed"
        assert row.reached, f"target not reached: best {row.best_metric}"
        assert row.best_metric >= TARGET
        trials = cluster.trials(sid)
        assert 1 <= len(trials) <= 20
        view = api.get("/api/v1/cluster").json()
        assert view["nodes"] == ["n1", "n2"], view
        assert {d["id"] for d in view["devices"]} == {"n1/cpu:0", "n1/cpu:1", "n2/cpu:0", "n2/cpu:1"}
        ids = {t.id for t in trials}
        with cluster.store.session() as s:
            actions = [a for i in s.exec(select(IntentRow)) for a in i.actions if a["trial_id"] in ids]
        placed = {d.split("/")[0] for a in actions for d in a.get("devices", ())}
        assert placed == {"n1", "n2"}, "the policy should have used both nodes"
        print(
            f"{len(trials)} trials, best {row.best_metric:.3f} after {row.seconds_to_target:.1f} s "
            f"({policy}; {time.monotonic() - started:.1f} s in all)"
        )
    finally:
        api.close()
        cluster.stop("serve")
