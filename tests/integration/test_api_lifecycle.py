"""Tags, notes and resuming through the real API (FastAPI's TestClient over a temporary database):
`PATCH /searches/{id}` sets tags and notes within bounds (a 422 names the field), the list returns and
filters them, a member changes only their own searches and a viewer none; `POST /searches/{id}/resume`
raises the budget by what it is given and refuses, naming why, what cannot be resumed. (What the
controller then does with a resumed search: tests/integration/test_controller_commands.py and
test_lifecycle_cli.py.)"""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from quanta.api.main import create_app
from quanta.db.secret import ENV
from quanta.db.store import Store
from tests.integration.test_api import AUTH, SPEC, post, running_search, settings_for
from tests.integration.test_users import bearer


@pytest.fixture(autouse=True)
def _secret_beside_the_database(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


@pytest.fixture
def client(tmp_path):
    app = create_app(settings_for(tmp_path))
    with TestClient(app, headers=AUTH) as c:
        yield c


@pytest.fixture
def store(client) -> Store:
    return client.app.state.store


def patch(client: TestClient, sid: int, body: dict, **kw):  # noqa: ANN201
    return client.patch(f"/api/v1/searches/{sid}", json=body, **kw)


def test_tags_and_notes_are_set_returned_and_filtered_on(client, store):
    a, b = post(client).json()["id"], post(client, {**SPEC, "name": "other"}).json()["id"]
    r = patch(client, a, {"tags": ["bert", "lr-sweep", "bert"], "notes": "warm-up too short?"})
    assert r.status_code == 200, r.text
    assert (r.json()["tags"], r.json()["notes"]) == (["bert", "lr-sweep"], "warm-up too short?")
    assert patch(client, b, {"tags": ["bert-large"]}).status_code == 200
    got = client.get(f"/api/v1/searches/{a}").json()
    assert (got["tags"], got["notes"]) == (["bert", "lr-sweep"], "warm-up too short?")
    listed = {s["id"]: s for s in client.get("/api/v1/searches").json()["items"]}
    assert listed[a]["tags"] == ["bert", "lr-sweep"] and listed[a]["notes"] == "warm-up too short?"
    assert listed[b]["tags"] == ["bert-large"] and listed[b]["notes"] is None
    by_tag = client.get("/api/v1/searches", params={"tag": "bert"}).json()
    assert [s["id"] for s in by_tag["items"]] == [a] and by_tag["total"] == 1
    assert client.get("/api/v1/searches", params={"tag": "Bert"}).json()["total"] == 0  # exactly
    assert client.get("/api/v1/searches", params={"tag": "bert-large", "status": "queued"}).json()["total"] == 1

    r = patch(client, a, {"notes": ""})  # tags left out stay; empty notes go
    assert (r.json()["tags"], r.json()["notes"]) == (["bert", "lr-sweep"], None)
    r = patch(client, a, {"tags": []})
    assert r.json()["tags"] == [] and client.get("/api/v1/searches", params={"tag": "bert"}).json()["total"] == 0
    assert patch(client, 999, {"tags": ["x"]}).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tags": ["has space"]}, "tags"),
        ({"tags": ["-leading-dash"]}, "tags"),
        ({"tags": ["x" * 41]}, "tags"),
        ({"tags": [f"t{i}" for i in range(21)]}, "tags"),
        ({"tags": "bert"}, "tags"),
        ({"notes": "x" * 4001}, "notes"),
        ({"name": "renamed"}, "name"),
    ],
)
def test_tags_and_notes_out_of_bounds_are_a_422_naming_the_field(client, store, body, field):
    sid = post(client).json()["id"]
    patch(client, sid, {"tags": ["kept"], "notes": "kept"})
    r = patch(client, sid, body)
    assert r.status_code == 422, r.text
    assert any(field in err["loc"] for err in r.json()["detail"]), r.json()
    got = client.get(f"/api/v1/searches/{sid}").json()
    assert (got["tags"], got["notes"], got["name"]) == (["kept"], "kept", "lin")  # nothing half-written


def test_a_bad_tag_filter_is_a_422(client):
    r = client.get("/api/v1/searches", params={"tag": "no spaces please"})
    assert r.status_code == 422 and "tag" in r.json()["detail"][0]["loc"]


def test_members_tag_their_own_searches_and_a_viewer_none(client, store):
    store.add_user("bob", time.time())
    store.add_user("vera", time.time(), role="viewer")
    bob = bearer(store.create_token("bob", time.time()).token)
    vera = bearer(store.create_token("vera", time.time()).token)
    admins = post(client).json()["id"]
    bobs = post(client, headers=bob).json()["id"]
    assert patch(client, bobs, {"tags": ["mine"]}, headers=bob).status_code == 200
    assert patch(client, admins, {"tags": ["mine"]}, headers=bob).status_code == 404  # as if missing
    r = patch(client, bobs, {"tags": ["shared"]}, headers=vera)
    assert r.status_code == 403 and "viewer" in r.json()["detail"]
    assert patch(client, bobs, {"notes": "seen by the admin"}).status_code == 200  # an admin's: anyone's
    assert client.get(f"/api/v1/searches/{bobs}").json()["tags"] == ["mine"]
    patch(client, admins, {"tags": ["mine"]})
    assert [s["id"] for s in client.get("/api/v1/searches?tag=mine", headers=bob).json()["items"]] == [bobs]
    assert client.get("/api/v1/searches?tag=mine", headers=vera).json()["total"] == 2  # a viewer reads all
    assert client.post(f"/api/v1/searches/{bobs}/resume", json={"max_trials": 1}, headers=vera).status_code == 403


def _ended(client: TestClient, store: Store, status: str, spec: dict = SPEC, **fields) -> int:  # noqa: ANN003
    """A search as the controller leaves it once ended (without running a controller)."""
    sid = running_search(client, store, spec)
    now = time.time()
    store.update_search(sid, status=status, finished_at=now, **{"started_at": now - 10, **fields})
    return sid


def test_resume_raises_the_budget_and_asks_the_controller(client, store):
    sid = running_search(client, store)  # running: extended at once, nothing else to do
    r = client.post(f"/api/v1/searches/{sid}/resume", json={"max_trials": 2, "max_seconds": 60})
    assert r.status_code == 202, r.text
    budget = r.json()["spec"]["budget"]
    assert (budget["max_trials"], budget["max_seconds"]) == (5, 3660.0) and r.json()["progress"]["max_trials"] == 5
    assert store.search(sid).command == "resume" and r.json()["status"] == "running"

    stopped = _ended(client, store, "stopped", trials_created=1)  # budget left: resumed as it is
    r = client.post(f"/api/v1/searches/{stopped}/resume")
    assert r.status_code == 202 and r.json()["spec"]["budget"]["max_trials"] == 3
    assert store.search(stopped).command == "resume" and r.json()["status"] == "stopped"  # until the controller acts

    for _ in range(2):  # two requests add up
        assert client.post(f"/api/v1/searches/{stopped}/resume", json={"max_trials": 1}).status_code == 202
    assert store.search(stopped).spec["budget"]["max_trials"] == 5

    at_target = _ended(client, store, "completed", trials_created=1, reached=True)
    r = client.post(f"/api/v1/searches/{at_target}/resume", json={"max_trials": 2})
    assert r.status_code == 202 and r.json()["spec"]["budget"]["stop_on_target"] is False  # on to its budget

    paused = running_search(client, store)
    store.update_search(paused, status="paused")
    assert client.post(f"/api/v1/searches/{paused}/resume").status_code == 202


def test_what_cannot_be_resumed_is_refused_naming_why(client, store):
    queued = post(client).json()["id"]
    assert client.post(f"/api/v1/searches/{queued}/resume", json={"max_trials": 1}).status_code == 409
    running = running_search(client, store)
    r = client.post(f"/api/v1/searches/{running}/resume")
    assert r.status_code == 409 and "running" in r.json()["detail"]
    failed = _ended(client, store, "failed")
    assert client.post(f"/api/v1/searches/{failed}/resume", json={"max_trials": 1}).status_code == 409

    spent = _ended(client, store, "completed")  # every trial made, none stopped by its end
    made = [store.add_trial(spent, n, {"lr": 0.01 * (n + 1)}, {"lr": [0.01 * (n + 1)]}, time.time()) for n in range(3)]
    for t in made:
        store.update_trial(t.id, status="completed")
    r = client.post(f"/api/v1/searches/{spent}/resume")
    assert r.status_code == 409 and "give more trials" in r.json()["detail"]
    assert store.search(spent).command is None
    store.update_trial(made[2].id, status="stopped", reason="time budget spent")  # stopped by its end: goes on
    assert client.post(f"/api/v1/searches/{spent}/resume").status_code == 202

    out_of_time = _ended(client, store, "completed", trials_created=1, started_at=time.time() - 4000)
    r = client.post(f"/api/v1/searches/{out_of_time}/resume")
    assert r.status_code == 409 and "give more seconds" in r.json()["detail"]
    assert client.post(f"/api/v1/searches/{out_of_time}/resume", json={"max_seconds": 600}).status_code == 202

    for body, field in (
        ({"max_trials": -1}, "max_trials"),
        ({"max_trials": 100_000}, "max_trials"),  # 3 + 100000 is past the spec's bound
        ({"max_seconds": 400 * 86400}, "max_seconds"),
        ({"trials": 1}, "trials"),
    ):
        r = client.post(f"/api/v1/searches/{running}/resume", json=body)
        assert r.status_code == 422 and any(field in e["loc"] for e in r.json()["detail"]), (body, r.text)
    assert store.search(running).spec["budget"]["max_trials"] == 3  # nothing half-written
    assert client.post("/api/v1/searches/999/resume").status_code == 404


def test_openapi_documents_patch_and_the_resume_body(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert "patch" in paths["/api/v1/searches/{search_id}"]
    assert "requestBody" in paths["/api/v1/searches/{search_id}/resume"]["post"]
    assert any(p["name"] == "tag" for p in paths["/api/v1/searches"]["get"]["parameters"])


def test_a_change_of_tags_notes_or_budget_is_a_search_event(client, store):
    from quanta.api.events import Poller

    sid = running_search(client, store)
    poller = Poller(store)
    assert poller.poll() == []  # the baseline
    patch(client, sid, {"tags": ["seen"], "notes": "live"})
    (event,) = poller.poll()
    assert event.startswith("event: search") and '"tags":["seen"]' in event and '"notes":"live"' in event
    client.post(f"/api/v1/searches/{sid}/resume", json={"max_trials": 1})
    (event,) = poller.poll()
    assert '"max_trials":4' in event
