"""A search's Pareto front through the API (`GET /searches/{id}/pareto`), the SDK (`Search.pareto()`
against a live `quanta serve`, `quanta.sdk.pareto` on a database) and the export route. The searches
are written into the database as finished ones with their reports: nothing trains."""

from __future__ import annotations

import time

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from quanta.api.main import create_app
from quanta.db.models import ReportRow, SearchRow
from quanta.db.store import Store
from quanta.sdk import Client
from quanta.sdk import pareto as local_pareto
from quanta.spec import parse_spec
from tests.integration.live_server import start_server
from tests.integration.test_api import TOKEN, settings_for
from tests.integration.test_users import bearer

MO = {
    "name": "trade-off",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"loguniform": [1e-4, 1e-1]}, "width": {"choice": [64, 128]}},
    "metrics": [{"name": "acc", "goal": "maximize"}, {"name": "lat", "goal": "minimize"}],
    "constraints": [{"name": "params_m", "max": 5.0}],
    "reference": {"acc": 0.0, "lat": 10.0},
}
# (params, [(step, metrics)]) per trial: two on the front, one dominated, one infeasible.
TRIALS = [
    ({"lr": 0.01, "width": 64}, [(10, {"acc": 0.8, "lat": 4.0, "params_m": 3.0}), (20, {"acc": 0.9, "lat": 4.0})]),
    ({"lr": 0.02, "width": 128}, [(10, {"acc": 0.7, "lat": 1.0, "params_m": 1.0})]),
    ({"lr": 0.03, "width": 64}, [(10, {"acc": 0.6, "lat": 6.0, "params_m": 1.0})]),
    ({"lr": 0.04, "width": 128}, [(10, {"acc": 0.99, "lat": 0.5, "params_m": 9.0})]),
]


def finished_search(store: Store, spec: dict = MO, owner_id: int | None = 1) -> tuple[int, list[int]]:
    """A completed search with TRIALS' reports (written as ended: a queued one would be started by a
    server's controller)."""
    checked = parse_spec(spec)
    now = time.time()
    with store.session() as s:
        row = SearchRow(
            name=checked.name,
            spec=checked.model_dump(mode="json"),
            status="completed",
            created_at=now - 100,
            started_at=now - 100,
            finished_at=now,
            owner_id=owner_id,
        )
        s.add(row)
        s.commit()
        sid = row.id
    assert sid is not None
    ids = []
    for n, (params, reports) in enumerate(TRIALS):
        t = store.add_trial(sid, n, params, {}, now - 100)
        store.update_trial(t.id, status="completed", steps=reports[-1][0], metric=reports[-1][1]["acc"])
        store.add_rows(
            [
                ReportRow(trial_id=t.id, search_id=sid, step=step, at=now - 100 + n + step, metrics=m)
                for step, m in reports
            ]
        )
        ids.append(t.id)
    return sid, ids


@pytest.fixture
def api(tmp_path):
    """(client as the admin, store, bob's token: a member)."""
    app = create_app(settings_for(tmp_path))
    store: Store = app.state.store
    store.add_user("bob", time.time())
    bob = store.create_token("bob", time.time()).token
    with TestClient(app, headers=bearer(TOKEN)) as c:
        yield c, store, bob


def test_the_route_answers_the_front_counts_and_hypervolume(api):
    c, store, bob = api
    sid, (a, b, d, e) = finished_search(store)
    r = c.get(f"/api/v1/searches/{sid}/pareto")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["pareto"] and body["reference"] == {"acc": 0.0, "lat": 10.0} and not body["reference_derived"]
    assert [(p["trial_id"], p["number"], p["step"], p["values"]) for p in body["front"]] == [
        (a, 0, 20, {"acc": 0.9, "lat": 4.0}),
        (b, 1, 10, {"acc": 0.7, "lat": 1.0}),
    ]
    assert body["front"][0]["params"] == {"lr": 0.01, "width": 64} and body["front"][0]["status"] == "completed"
    assert body["counts"] == {"front": 2, "dominated": 2, "infeasible": 1, "non_finite": 0, "no_points": 0}
    assert body["trials"] == {"front": 2, "dominated": 1, "infeasible": 1, "non_finite": 0, "no_points": 0}
    assert body["hypervolume"] == pytest.approx(7.5)
    assert body["hypervolume_curve"][-1][1] == pytest.approx(7.5)
    assert len(body["points"]) == body["points_total"] == 5
    assert c.get(f"/api/v1/searches/{sid}/pareto", params={"max_points": 0}).json()["points"] == []
    assert c.get(f"/api/v1/searches/{sid}/pareto", params={"max_points": -1}).status_code == 422

    # The same visibility as every search route: no token 401, another member's search 404 as a missing one.
    assert TestClient(c.app).get(f"/api/v1/searches/{sid}/pareto").status_code == 401
    assert c.get(f"/api/v1/searches/{sid}/pareto", headers=bearer(bob)).status_code == 404
    assert c.get(f"/api/v1/searches/{sid + 100}/pareto").status_code == 404
    bobs, _ = finished_search(store, owner_id=store.user("bob").id)
    assert c.get(f"/api/v1/searches/{bobs}/pareto", headers=bearer(bob)).status_code == 200

    # Importance is per objective: the first by default, another by name, an unknown one a 422.
    imp = c.get(f"/api/v1/searches/{sid}/importance").json()
    assert (imp["metric"], imp["objectives"]) == ("acc", ["acc", "lat"])
    assert c.get(f"/api/v1/searches/{sid}/importance", params={"objective": "lat"}).json()["goal"] == "minimize"
    r = c.get(f"/api/v1/searches/{sid}/importance", params={"objective": "loss"})
    assert r.status_code == 422 and "'loss' is not an objective" in r.text

    # The export route carries the objective and feasibility columns.
    text = c.get(f"/api/v1/searches/{sid}/trials", params={"format": "csv"}).text
    header = text.splitlines()[0].split(",")
    assert {"objectives.acc", "objectives.lat", "violation", "feasible", "on_front"} <= set(header)


def test_a_single_objective_search_answers_with_its_best_point(api):
    c, store, _ = api
    single = {k: v for k, v in MO.items() if k not in ("metrics", "constraints", "reference")}
    sid, (a, b, d, e) = finished_search(store, {**single, "metric": {"name": "acc", "goal": "maximize"}})
    body = c.get(f"/api/v1/searches/{sid}/pareto").json()
    assert not body["pareto"] and body["constraints"] == [] and body["reference_derived"]
    assert [(p["trial_id"], p["values"]) for p in body["front"]] == [(e, {"acc": 0.99})]


def test_local_pareto_reads_a_database(tmp_path):
    db = f"sqlite:///{tmp_path}/q.db"
    sid, (a, b, d, e) = finished_search(Store(db))
    frame = local_pareto(sid, db=db)
    assert list(frame.columns) == ["trial_id", "number", "step", "seconds", "status", "acc", "lat", "params.lr",
                                   "params.width"]  # fmt: skip
    assert list(frame["trial_id"]) == [a, b]
    with pytest.raises(KeyError, match="not found"):
        local_pareto(sid + 1, db=db)
    with pytest.raises(FileNotFoundError, match="no database"):
        local_pareto(sid, db=f"sqlite:///{tmp_path}/missing.db")
    assert not (tmp_path / "missing.db").exists()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("pareto"))
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def test_search_pareto_is_a_dataframe_of_the_front(server):
    sid, (a, b, d, e) = finished_search(Store(server.db_url))
    with Client(server.url, server.token) as client:
        search = client.search(sid)
        frame = search.pareto()
        assert isinstance(frame, pd.DataFrame)
        assert list(frame.columns) == ["trial_id", "number", "step", "seconds", "status", "acc", "lat",
                                       "params.lr", "params.width"]  # fmt: skip
        assert list(frame["trial_id"]) == [a, b] and list(frame["step"]) == [20, 10]
        assert list(frame["acc"]) == [0.9, 0.7] and list(frame["lat"]) == [4.0, 1.0]
        assert list(frame["params.width"]) == [64, 128]
        whole = search.pareto(frame=False)
        assert whole["counts"]["infeasible"] == 1 and len(whole["points"]) == 5
