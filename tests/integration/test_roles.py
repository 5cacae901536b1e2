"""Roles through the real API and the CLI: a viewer reads every search an admin sees (so a view can be
shared without an admin's token) and every write is refused with 403, changing nothing; the users and
their tokens stay an admin's. A role and a user name each have one spelling: `Admin` is refused as a role
(422) and as a new user's name beside `admin` (409)."""

from __future__ import annotations

import time

import pytest
from click.testing import Result
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from quanta.api.main import create_app
from quanta.cli import app as cli
from quanta.db.models import ClusterView, DevicePlacement, ReportRow
from quanta.db.secret import ENV
from quanta.db.store import Store
from quanta.sdk.client import parse_sse
from tests.integration.test_api import SPEC, TOKEN, settings_for
from tests.integration.test_users import bearer


@pytest.fixture(autouse=True)
def _secret_beside_the_database(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


@pytest.fixture
def api(tmp_path):
    """(client as the admin, store, bob's token: a member)."""
    app = create_app(settings_for(tmp_path))
    store: Store = app.state.store
    store.add_user("bob", time.time())
    bob = store.create_token("bob", time.time()).token
    with TestClient(app, headers=bearer(TOKEN)) as c:
        yield c, store, bob


def _search_with_a_trial(c: TestClient, store: Store, token: str, name: str) -> tuple[int, int]:
    r = c.post("/api/v1/searches", json={**SPEC, "name": name}, headers=bearer(token))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    store.update_search(sid, status="running", started_at=time.time())
    tid = store.add_trial(sid, 0, {"lr": 0.01}, {"lr": [0.01]}, time.time()).id
    store.update_trial(tid, status="running")
    store.add_rows([ReportRow(trial_id=tid, search_id=sid, step=1, at=time.time(), metrics={"accuracy": 0.5},
                              objective=0.5)])  # fmt: skip
    store.update_search(sid, best_metric=0.5, best_trial_id=tid)
    return sid, tid


def test_a_viewer_reads_every_search_and_every_write_is_a_403(api):
    c, store, bob = api
    r = c.post("/api/v1/users", json={"name": "vera", "role": "viewer"})
    assert r.status_code == 201 and r.json()["role"] == "viewer", r.text
    vera = bearer(c.post("/api/v1/users/vera/tokens", json={"name": "share"}).json()["token"])
    bobs, t_bob = _search_with_a_trial(c, store, bob, "bob's")
    admins, t_admin = _search_with_a_trial(c, store, TOKEN, "admin's")
    store.publish_cluster_view(
        ClusterView(
            at=time.time(),
            devices=(DevicePlacement("cpu:0", "local", "cpu", None, running=(t_bob,), parked=(t_admin,)),),
            pairs=(),
        )
    )

    # Reads: what the admin reads, but the users and their tokens.
    assert c.get("/api/v1/me", headers=vera).json()["role"] == "viewer"
    listed = c.get("/api/v1/searches", headers=vera).json()
    assert listed["total"] == 2 and {s["id"] for s in listed["items"]} == {bobs, admins}
    assert [s["id"] for s in c.get("/api/v1/searches", params={"owner": "bob"}, headers=vera).json()["items"]] == [bobs]
    for sid, tid in ((bobs, t_bob), (admins, t_admin)):
        for path in (
            f"/api/v1/searches/{sid}",
            f"/api/v1/searches/{sid}/trials",
            f"/api/v1/searches/{sid}/trials?format=csv",
            f"/api/v1/searches/{sid}/curves",
            f"/api/v1/searches/{sid}/timeline",
            f"/api/v1/searches/{sid}/best",
            f"/api/v1/searches/{sid}/importance",
            f"/api/v1/searches/{sid}/landscape?x=lr",
            f"/api/v1/trials/{tid}",
            f"/api/v1/trials/{tid}/logs",
        ):
            r = c.get(path, headers=vera)
            assert r.status_code == 200, (path, r.status_code, r.text[:200])
    dev = c.get("/api/v1/cluster", headers=vera).json()["devices"][0]
    assert (dev["running"], dev["parked"]) == ([t_bob], [t_admin])
    assert {u["name"] for u in c.get("/api/v1/shares", headers=vera).json()["users"]} >= {"admin", "bob", "vera"}
    text = c.get("/metrics", headers=vera).text
    assert f'search_id="{bobs}"' in text and f'search_id="{admins}"' in text
    r = c.get("/api/v1/events", params={"max_seconds": 0.5}, headers={**vera, "Last-Event-ID": "0"})
    assert sorted(e.data["search_id"] for e in parse_sse(iter(r.text.splitlines())) if e.event == "report") == [
        bobs,
        admins,
    ]

    # Writes: every one a 403, and nothing changed.
    for method, path, body in [
        ("POST", "/api/v1/searches", SPEC),
        ("POST", f"/api/v1/searches/{bobs}/stop", None),
        ("POST", f"/api/v1/searches/{bobs}/pause", None),
        ("POST", f"/api/v1/searches/{admins}/resume", None),
        ("DELETE", f"/api/v1/searches/{admins}", None),
        ("POST", f"/api/v1/trials/{t_bob}/stop", None),
        ("POST", "/api/v1/users", {"name": "eve"}),
        ("PATCH", "/api/v1/users/vera", {"role": "admin"}),
        ("DELETE", "/api/v1/users/bob", None),
        ("POST", "/api/v1/users/vera/tokens", {"name": "more"}),
        ("DELETE", "/api/v1/tokens/1", None),
        ("GET", "/api/v1/users", None),
        ("GET", "/api/v1/users/bob/tokens", None),
    ]:
        r = c.request(method, path, json=body, headers=vera)
        assert r.status_code == 403, (method, path, r.status_code, r.text[:200])
    assert c.post("/api/v1/searches", json=SPEC, headers=vera).json()["detail"] == "user vera is a viewer: read-only"
    assert c.get("/api/v1/searches").json()["total"] == 2
    assert {s.id: (s.status, s.command) for s in store.searches()} == {
        bobs: ("running", None),
        admins: ("running", None),
    }
    assert store.trial(t_bob).command is None and store.user("vera").role == "viewer"
    assert [t.active for t in store.tokens(None, time.time())] == [True, True, True]

    # A member still reads their own only; the admin can make the viewer a member.
    assert c.get("/api/v1/searches", headers=bearer(bob)).json()["total"] == 1
    assert c.patch("/api/v1/users/vera", json={"role": "member"}).json()["role"] == "member"
    assert c.get("/api/v1/searches", headers=vera).json()["total"] == 0


def _quanta(*args: str) -> Result:
    """A `quanta` command in this process (the CLI's own code; a subprocess costs seconds of imports)."""
    return CliRunner().invoke(cli, list(args))


def test_quanta_users_add_makes_a_viewer_whose_token_reads_everything(tmp_path):
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    r = _quanta("users", "add", "vic", "--role", "viewer", "--db", db)
    assert r.exit_code == 0 and "added user vic (viewer)" in r.stderr, r.output
    assert "vic\tviewer\t" in _quanta("users", "list", "--db", db).stdout
    token = _quanta("tokens", "create", "vic", "--db", db).stdout.strip()
    assert _quanta("users", "add", "val", "--role", "Viewer", "--db", db).exit_code == 2  # one spelling
    named = _quanta("users", "add", "Admin", "--db", db)
    assert named.exit_code == 2 and "user admin exists: names differ in more than case" in named.stderr

    app = create_app(settings_for(tmp_path, db_url=db))
    with TestClient(app, headers=bearer(TOKEN)) as c:
        sid = c.post("/api/v1/searches", json=SPEC).json()["id"]
        assert [s["id"] for s in c.get("/api/v1/searches", headers=bearer(token)).json()["items"]] == [sid]
        assert c.post(f"/api/v1/searches/{sid}/stop", headers=bearer(token)).status_code == 403


def test_a_role_and_a_user_name_have_one_spelling(api):
    c, store, _ = api
    r = c.post("/api/v1/users", json={"name": "al", "role": "Admin"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "role"
    for name, taken in (("Admin", "admin"), ("BOB", "bob")):
        r = c.post("/api/v1/users", json={"name": name})
        assert r.status_code == 409, (name, r.status_code)
        assert r.json()["detail"] == f"user {taken} exists: names differ in more than case"
    assert c.post("/api/v1/users", json={"name": "bob"}).json()["detail"] == "user bob exists"
    assert [u.name for u in store.users()] == ["admin", "bob"]
    assert c.patch("/api/v1/users/bob", json={"role": "ADMIN"}).status_code == 422
