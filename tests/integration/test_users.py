"""Users and tokens through the real API: two members and an admin. A member sees and controls only
their own searches and trials (another's answers 404, as a missing one); an admin sees all. Admin routes
manage users (weights, quotas) and tokens; unknown, revoked and expired tokens are 401; a revoked token
is refused within a second by a running `quanta serve`; the `quanta users`/`quanta tokens` commands work
on the server's database; a user over quota has their search queued with the reason."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from quanta.api.main import create_app
from quanta.db.models import FIRST_ADMIN, ClusterView, DevicePlacement, PairRates, ReportRow
from quanta.db.secret import ENV
from quanta.db.store import Store
from quanta.devices import parse_devices
from quanta.sdk.client import parse_sse
from quanta.service import ControllerThread
from tests.integration.live_server import ROOT, start_server
from tests.integration.test_api import SPEC, TOKEN, settings_for


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(autouse=True)
def _secret_beside_the_database(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)  # the server and the CLI find the same file beside the database


@pytest.fixture
def api(tmp_path):
    """(client as the admin, store, bob's token, carol's token)."""
    app = create_app(settings_for(tmp_path))
    store: Store = app.state.store
    store.add_user("bob", time.time())
    store.add_user("carol", time.time())
    bob = store.create_token("bob", time.time()).token
    carol = store.create_token("carol", time.time()).token
    with TestClient(app, headers=bearer(TOKEN)) as c:
        yield c, store, bob, carol


def _post(c: TestClient, token: str, name: str) -> int:
    r = c.post("/api/v1/searches", json={**SPEC, "name": name}, headers=bearer(token))
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_a_member_sees_only_their_own_searches_and_trials_and_others_are_404(api):
    c, store, bob, carol = api
    mine, theirs = _post(c, bob, "bob's"), _post(c, carol, "carol's")
    assert c.get(f"/api/v1/searches/{mine}", headers=bearer(bob)).json()["owner"] == "bob"
    for sid in (mine, theirs):
        store.update_search(sid, status="running", started_at=time.time())
    t_mine = store.add_trial(mine, 0, {"lr": 0.1}, {"lr": [0.1]}, time.time()).id
    t_theirs = store.add_trial(theirs, 0, {"lr": 0.2}, {"lr": [0.2]}, time.time()).id
    for sid, tid, value in ((mine, t_mine, 0.5), (theirs, t_theirs, 0.7)):
        store.update_trial(tid, status="running")
        store.add_rows([ReportRow(trial_id=tid, search_id=sid, step=1, at=time.time(), metrics={"accuracy": value},
                                  objective=value)])  # fmt: skip
        store.update_search(sid, best_metric=value, best_trial_id=tid)

    as_bob = bearer(bob)
    listed = c.get("/api/v1/searches", headers=as_bob).json()
    assert listed["total"] == 1 and [s["id"] for s in listed["items"]] == [mine]
    assert c.get("/api/v1/searches", params={"owner": "carol"}, headers=as_bob).json() == {"items": [], "total": 0}

    def routes(sid: int, tid: int) -> list[tuple[str, str]]:
        return [
            ("GET", f"/api/v1/searches/{sid}"),
            ("POST", f"/api/v1/searches/{sid}/stop"),
            ("POST", f"/api/v1/searches/{sid}/pause"),
            ("POST", f"/api/v1/searches/{sid}/resume"),
            ("DELETE", f"/api/v1/searches/{sid}"),
            ("GET", f"/api/v1/searches/{sid}/trials"),
            ("GET", f"/api/v1/searches/{sid}/curves"),
            ("GET", f"/api/v1/searches/{sid}/timeline"),
            ("GET", f"/api/v1/searches/{sid}/best"),
            ("GET", f"/api/v1/trials/{tid}"),
            ("POST", f"/api/v1/trials/{tid}/stop"),
            ("GET", f"/api/v1/events?search_id={sid}"),
        ]

    for (method, path), (_, nowhere) in zip(routes(theirs, t_theirs), routes(999_999, 999_998), strict=True):
        other, missing = c.request(method, path, headers=as_bob), c.request(method, nowhere, headers=as_bob)
        assert other.status_code == missing.status_code == 404, (method, path, other.status_code)
        as_missing = missing.json()["detail"].replace("999999", str(theirs)).replace("999998", str(t_theirs))
        assert other.json() == {"detail": as_missing}  # word for word what a missing id gets
    assert store.search(theirs).command is None and store.trial(t_theirs).command is None  # nothing was done
    assert c.get(f"/api/v1/trials/{t_mine}", headers=as_bob).status_code == 200
    assert c.post(f"/api/v1/searches/{mine}/pause", headers=as_bob).status_code == 202

    # The event stream carries bob's reports only (resumed from the start: every report is due).
    def reports(headers: dict[str, str]) -> list[int]:
        r = c.get("/api/v1/events", params={"max_seconds": 0.5}, headers={**headers, "Last-Event-ID": "0"})
        assert r.status_code == 200
        return sorted(e.data["search_id"] for e in parse_sse(iter(r.text.splitlines())) if e.event == "report")

    assert reports(as_bob) == [mine]
    assert reports(bearer(TOKEN)) == [mine, theirs]

    # The cluster view: bob sees the devices and his own trials only.
    store.publish_cluster_view(
        ClusterView(
            at=time.time(),
            devices=(DevicePlacement("cpu:0", "local", "cpu", None, running=(t_mine,), parked=(t_theirs,)),),
            pairs=(PairRates(t_mine, t_theirs, 1.0, 1.0),),
        )
    )
    dev = c.get("/api/v1/cluster", headers=as_bob).json()
    assert (dev["devices"][0]["running"], dev["devices"][0]["parked"], dev["pairs"]) == ([t_mine], [], [])
    dev = c.get("/api/v1/cluster").json()
    assert (dev["devices"][0]["running"], dev["devices"][0]["parked"]) == ([t_mine], [t_theirs])

    # Metrics: bob's counts and best metrics are his own.
    text = c.get("/metrics", headers=as_bob).text
    assert f'search_id="{mine}"' in text and f'search_id="{theirs}"' not in text
    assert 'quanta_searches{state="running"} 1.0' in text
    text = c.get("/metrics").text
    assert f'search_id="{mine}"' in text and f'search_id="{theirs}"' in text

    # The admin sees everything, and can narrow the list to one user's searches.
    assert c.get("/api/v1/searches").json()["total"] == 2
    assert [s["id"] for s in c.get("/api/v1/searches", params={"owner": "carol"}).json()["items"]] == [theirs]
    assert c.get(f"/api/v1/searches/{theirs}").status_code == 200
    assert c.get(f"/api/v1/trials/{t_theirs}").status_code == 200
    assert c.get("/api/v1/me").json()["name"] == FIRST_ADMIN
    assert c.get("/api/v1/me", headers=as_bob).json() == c.get("/api/v1/users/bob").json()


def test_admin_routes_manage_users_and_tokens_and_members_get_403(api):
    c, store, bob, _ = api
    for method, path, body in [
        ("GET", "/api/v1/users", None),
        ("POST", "/api/v1/users", {"name": "x"}),
        ("GET", "/api/v1/users/bob", None),
        ("PATCH", "/api/v1/users/bob", {"weight": 5}),
        ("DELETE", "/api/v1/users/carol", None),
        ("GET", "/api/v1/users/bob/tokens", None),
        ("POST", "/api/v1/users/bob/tokens", {}),
        ("DELETE", "/api/v1/tokens/1", None),
    ]:
        assert c.request(method, path, json=body, headers=bearer(bob)).status_code == 403, (method, path)
    assert store.user("x") is None and store.user("bob").weight == 1.0 and store.user("carol") is not None

    r = c.post("/api/v1/users", json={"name": "dave", "weight": 2.5, "max_alive_trials": 4})
    assert r.status_code == 201 and r.json()["weight"] == 2.5 and r.json()["role"] == "member"
    assert c.post("/api/v1/users", json={"name": "dave"}).status_code == 409
    for body, field in [
        ({"name": "eve", "weight": 0}, "weight"),
        ({"name": "eve", "weight": 1e9}, "weight"),
        ({"name": "eve", "max_devices": -1}, "max_devices"),
        ({"name": "eve", "max_alive_trials": 10**7}, "max_alive_trials"),
        ({"name": "eve", "role": "root"}, "role"),
        ({"name": "bad name"}, "name"),
    ]:
        r = c.post("/api/v1/users", json=body)
        assert r.status_code == 422 and field in [e["loc"][-1] for e in r.json()["detail"]], (body, r.text)
    assert store.user("eve") is None
    r = c.patch("/api/v1/users/dave", json={"weight": -1})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "weight"
    r = c.patch("/api/v1/users/dave", json={"max_devices": 2, "weight": 0.5})
    assert r.status_code == 200 and (r.json()["max_devices"], r.json()["weight"], r.json()["max_alive_trials"]) == (
        2,
        0.5,
        4,
    )
    assert c.patch("/api/v1/users/nobody", json={"weight": 1}).status_code == 404
    assert c.patch(f"/api/v1/users/{FIRST_ADMIN}", json={"role": "member"}).status_code == 409
    assert [u["name"] for u in c.get("/api/v1/users").json()] == [FIRST_ADMIN, "bob", "carol", "dave"]
    assert store.user_weights()["dave"] == 0.5

    made = c.post("/api/v1/users/dave/tokens", json={"name": "ci", "expires_days": 30})
    assert made.status_code == 201
    new = made.json()
    assert new["expires_at"] == pytest.approx(time.time() + 30 * 86_400, abs=60)
    assert c.get("/api/v1/me", headers=bearer(new["token"])).json()["name"] == "dave"
    listed = c.get("/api/v1/users/dave/tokens").json()
    assert [t["id"] for t in listed] == [new["id"]] and "token" not in listed[0] and listed[0]["active"]
    assert new["token"] not in c.get("/api/v1/users/dave/tokens").text
    r = c.post("/api/v1/users/dave/tokens", json={"expires_days": 0})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "expires_days"
    assert c.post("/api/v1/users/nobody/tokens", json={}).status_code == 404
    assert c.delete(f"/api/v1/tokens/{new['prefix'][:9]}").json()["revoked_at"] is not None
    assert c.get("/api/v1/me", headers=bearer(new["token"])).status_code == 401
    assert c.delete("/api/v1/tokens/qnt_nothing-like-it").status_code == 404


def test_unknown_revoked_expired_and_deleted_users_tokens_are_401(api):
    c, store, bob, carol = api
    expired = store.create_token("bob", time.time() - 100, expires_at=time.time() - 1).token
    for token in ("qnt_" + "x" * 43, expired):
        r = c.get("/api/v1/searches", headers=bearer(token))
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    anonymous = TestClient(c.app)  # no header: the event stream takes `?token=`
    assert anonymous.get("/api/v1/events", params={"token": expired, "max_seconds": 0.1}).status_code == 401
    assert anonymous.get("/api/v1/events", params={"token": bob, "max_seconds": 0.1}).status_code == 200

    # Deleting a user with active searches: 409, nothing changed; with force their searches are stopped.
    sid = _post(c, carol, "carol's")
    store.update_search(sid, status="running", started_at=time.time())
    queued = _post(c, carol, "queued")
    r = c.delete("/api/v1/users/carol")
    assert r.status_code == 409 and "force=true" in r.json()["detail"]
    assert c.get("/api/v1/me", headers=bearer(carol)).status_code == 200
    assert c.delete("/api/v1/users/carol", params={"force": "true"}).status_code == 204
    assert c.get("/api/v1/me", headers=bearer(carol)).status_code == 401
    assert store.search(sid).command == "stop" and store.search(queued).status == "stopped"
    assert c.get(f"/api/v1/searches/{sid}").json()["owner"] == "carol"  # the admin still sees them
    assert c.delete("/api/v1/users/carol").status_code == 404
    assert c.delete(f"/api/v1/users/{FIRST_ADMIN}").status_code == 409


def test_a_new_user_given_a_deleted_users_name_owns_none_of_their_searches(api):
    """Ownership is by user id: after `DELETE /users/carol?force=true` and a new carol, the old carol's
    search stays (an admin sees it, still named carol, owned by nobody) and the new carol can neither
    list, read, stop nor delete it, nor read its trials; what she submits is hers."""
    c, store, bob, carol = api
    old_id = c.get("/api/v1/me", headers=bearer(carol)).json()["id"]
    old = _post(c, carol, "old carol's")
    trial = store.add_trial(old, 0, {}, {}, time.time())
    assert c.delete("/api/v1/users/carol", params={"force": "true"}).status_code == 204
    assert c.post("/api/v1/users", json={"name": "carol"}).status_code == 201
    new_token = c.post("/api/v1/users/carol/tokens", json={}).json()["token"]
    new = bearer(new_token)
    me = c.get("/api/v1/me", headers=new).json()
    assert me["name"] == "carol" and me["id"] > old_id  # a user id is never given twice
    assert c.get("/api/v1/searches", headers=new).json() == {"items": [], "total": 0}
    assert c.get("/api/v1/searches", params={"owner": "carol"}, headers=new).json()["total"] == 0
    assert c.get(f"/api/v1/searches/{old}", headers=new).status_code == 404
    assert c.get(f"/api/v1/searches/{old}/curves", headers=new).status_code == 404
    assert c.get(f"/api/v1/trials/{trial.id}", headers=new).status_code == 404
    assert c.post(f"/api/v1/searches/{old}/stop", headers=new).status_code == 404
    assert c.delete(f"/api/v1/searches/{old}", headers=new).status_code == 404
    assert store.has_search(old)
    _post(c, bob, "bob's")
    mine = _post(c, new_token, "hers")
    listed = c.get("/api/v1/searches", headers=new).json()
    assert [s["id"] for s in listed["items"]] == [mine] and listed["items"][0]["owner_id"] == me["id"]
    shown = c.get(f"/api/v1/searches/{old}").json()  # as the admin
    assert (shown["owner"], shown["owner_id"]) == ("carol", None)
    assert [s["id"] for s in c.get("/api/v1/searches", params={"owner": "carol"}).json()["items"]] == [mine]


def test_the_id_of_a_deleted_newest_search_is_not_given_to_the_next(api):
    """SQLite re-used the highest freed id: bob's deleted newest search's id (and URL) went to carol's."""
    c, store, bob, carol = api
    _post(c, bob, "first")
    newest = _post(c, bob, "newest")
    assert c.delete(f"/api/v1/searches/{newest}", headers=bearer(bob)).status_code == 204
    assert _post(c, carol, "next") > newest


def _quanta(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quanta.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != ENV},
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`_quanta`'s command run in this process by the same typer app (Click's test runner: stdout and stderr
    apart, the exit code), without the server secret's variable: no interpreter start and import per
    command."""
    from typer.testing import CliRunner

    from quanta.cli import app as cli

    r = CliRunner().invoke(cli, list(args), env={ENV: None})
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return subprocess.CompletedProcess(["quanta", *args], r.exit_code, r.stdout, r.stderr)


def test_cli_users_and_tokens_on_a_sqlite_file(tmp_path):
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    r = _cli("users", "add", "bob", "--weight", "2", "--max-devices", "3", "--db", db)
    assert r.returncode == 0, r.stderr
    r = _cli("users", "add", "bob", "--db", db)
    assert r.returncode == 2 and "user bob exists" in r.stderr
    r = _cli("users", "add", "carol", "--weight", "0", "--db", db)
    assert r.returncode == 2 and "weight" in r.stderr
    r = _cli("users", "list", "--db", db)
    lines = [line.split("\t") for line in r.stdout.splitlines()]
    assert r.returncode == 0 and [row[:5] for row in lines[1:]] == [
        [FIRST_ADMIN, "admin", "1", "0", "0"], ["bob", "member", "2", "0", "3"]
    ]  # fmt: skip
    r = _cli("tokens", "create", "bob", "--expires-days", "7", "--db", db)
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip()
    assert r.stdout == token + "\n" and token.startswith("qnt_")  # the token alone on stdout
    store = Store(db)
    assert store.authenticate(token, time.time()).name == "bob"
    r = _cli("tokens", "list", "bob", "--db", db)
    assert r.returncode == 0 and token not in r.stdout and token[:10] in r.stdout and "\tactive\t" in r.stdout
    r = _cli("tokens", "revoke", token[:10], "--db", db)
    assert r.returncode == 0, r.stderr
    assert store.authenticate(token, time.time()) is None
    assert _cli("tokens", "create", "nobody", "--db", db).returncode == 2
    r = _cli("tokens", "revoke", "qnt_unknown", "--db", db)
    assert r.returncode == 2 and "no token matches" in r.stderr
    assert (tmp_path / "cli.db").stat().st_mode & 0o077 == 0  # created private


def test_a_revoked_token_is_refused_within_a_second_by_a_running_server(tmp_path):
    server = start_server(tmp_path, devices="cpu:1")
    try:
        db = server.db_url
        assert _quanta("users", "add", "bob", "--db", db).returncode == 0
        made = _quanta("tokens", "create", "bob", "--db", db)
        assert made.returncode == 0, made.stderr
        token = made.stdout.strip()
        deadline = time.monotonic() + 120
        while True:  # the API answers before the controller's template is warm
            try:
                me = httpx.get(server.url + "/api/v1/me", headers=bearer(token), timeout=5)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and server.proc.poll() is None, server.log()
                time.sleep(0.2)
        assert me.status_code == 200 and me.json()["name"] == "bob"
        with httpx.stream(
            "GET", server.url + "/api/v1/events", params={"token": token, "max_seconds": 60}, timeout=30
        ) as stream:
            assert stream.status_code == 200
            lines = stream.iter_lines()
            assert next(lines).startswith("retry")
            revoked = _quanta("tokens", "revoke", token[:12], "--db", db)
            assert revoked.returncode == 0, revoked.stderr
            t0 = time.monotonic()
            while httpx.get(server.url + "/api/v1/me", headers=bearer(token), timeout=5).status_code != 401:
                assert time.monotonic() - t0 < 1.0, "a revoked token still accepted after 1 s"
                time.sleep(0.02)
            refused_after = time.monotonic() - t0
            for _ in lines:  # the open stream ends too (it re-checks its token twice a second)
                pass
            stream_ended_after = time.monotonic() - t0
        assert refused_after < 1.0 and stream_ended_after < 5.0, (refused_after, stream_ended_after)
        assert httpx.get(server.url + "/api/v1/me", headers=server.headers, timeout=5).json()["name"] == FIRST_ADMIN
    finally:
        server.stop()


def test_a_search_over_its_owners_quota_queues_with_the_reason(tmp_path):
    app = create_app(settings_for(tmp_path))
    store: Store = app.state.store
    loop = ControllerThread(store, parse_devices("cpu:2"), tmp_path / "work", tick_s=0.2)
    app.state.controller_state = loop.state
    loop.start()
    long = {**SPEC, "parallelism": 2, "metric": {"name": "accuracy", "target": 2.0},
            "budget": {"max_trials": 10, "max_steps": 100_000}, "scheduler": {"policy": "fifo", "quantum_s": 0.5},
            "config": {"sleep_s": 0.01, "report_every": 20}}  # fmt: skip
    try:
        with TestClient(app, headers=bearer(TOKEN)) as c:
            assert c.post("/api/v1/users", json={"name": "bob", "max_alive_trials": 1}).status_code == 201
            bob = bearer(c.post("/api/v1/users/bob/tokens", json={}).json()["token"])
            first = c.post("/api/v1/searches", json={**long, "name": "first"}, headers=bob).json()["id"]
            second = c.post("/api/v1/searches", json={**long, "name": "second"}, headers=bob).json()["id"]
            reason = "quota: user bob has 1 of at most 1 alive trials"
            deadline = time.monotonic() + 90
            while True:
                a = c.get(f"/api/v1/searches/{first}", headers=bob).json()
                b = c.get(f"/api/v1/searches/{second}", headers=bob).json()
                if a["status"] == "running" and a["progress"]["trials_created"] >= 1 and b["waiting"]:
                    break
                assert time.monotonic() < deadline, (a, b)
                time.sleep(0.2)
            assert b["status"] == "queued" and b["waiting"] == reason
            assert a["waiting"] == reason and a["progress"]["trials_created"] == 1  # parallelism 2, quota 1
            assert c.post(f"/api/v1/searches/{first}/stop", headers=bob).status_code == 202
            while True:  # its trial gone, the queued search starts
                b = c.get(f"/api/v1/searches/{second}", headers=bob).json()
                if b["status"] == "running" and b["progress"]["trials_created"] >= 1:
                    break
                assert time.monotonic() < deadline, b
                time.sleep(0.2)
            time.sleep(0.5)
            trials = c.get(f"/api/v1/searches/{second}/trials", headers=bob).json()["items"]
            assert sum(t["status"] in ("queued", "running") for t in trials) == 1  # still within the quota
            c.post(f"/api/v1/searches/{second}/stop", headers=bob)
    finally:
        loop.stop()
