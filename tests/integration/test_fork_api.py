"""Forking through the real API (FastAPI's TestClient over a SQLite store; no controller runs, so requests
stay pending and the controller's steps are taken through the store): what is refused and why, who may
fork, the request as the controller carries it out, the lineage, the export; `mutable: true` on a
parameter that is not numeric is a 422 naming it."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from quanta.api.main import create_app
from quanta.db.launch import checkpoint_path
from quanta.db.secret import ENV
from quanta.db.store import Store
from tests.integration.test_api import TOKEN, settings_for
from tests.integration.test_users import bearer

SPEC = {
    "name": "forkable",
    "trainable": "tests.trainables:linear",
    "space": {
        "lr": {"loguniform": [0.001, 0.1], "mutable": True},
        "momentum": {"uniform": [0.5, 0.99]},
        "opt": {"wd": {"uniform": [0.0, 0.01], "mutable": True}, "kind": {"choice": ["sgd", "adam"]}},
    },
    "metric": {"name": "accuracy", "target": 0.9},
    "budget": {"max_trials": 4, "max_steps": 100},
}
PARAMS = {"lr": 0.01, "momentum": 0.9, "opt": {"wd": 0.001, "kind": "sgd"}}
VALS = {"lr": [0.01], "momentum": [0.9], "opt/wd": [0.001], "opt/kind": [0]}


@pytest.fixture(autouse=True)
def _secret_beside_the_database(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


@pytest.fixture
def api(tmp_path):
    """(client as the admin, store, workdir, bob's token: a member, vera's: a viewer)."""
    settings = settings_for(tmp_path, workdir=str(tmp_path / "work"))
    app = create_app(settings)
    store: Store = app.state.store
    store.add_user("bob", time.time())
    store.add_user("vera", time.time(), role="viewer")
    bob = store.create_token("bob", time.time()).token
    vera = store.create_token("vera", time.time()).token
    with TestClient(app, headers=bearer(TOKEN)) as c:
        yield c, store, tmp_path / "work", bob, vera


def _search(c: TestClient, store: Store, token: str = TOKEN) -> int:
    r = c.post("/api/v1/searches", json=SPEC, headers=bearer(token))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    assert r.json()["spec"]["mutable"] == ["lr", "opt.wd"]  # the flags, stored beside the space
    assert r.json()["spec"]["space"]["lr"] == {"loguniform": [0.001, 0.1]}
    store.update_search(sid, status="running", started_at=time.time())
    return sid


def _trial(store: Store, sid: int, number: int, **fields) -> int:
    tid = store.add_trial(sid, number, PARAMS, VALS, time.time()).id
    if fields:
        store.update_trial(tid, **fields)
    return tid


def test_a_fork_request_is_checked_stored_and_followed(api):
    c, store, work, bob, vera = api
    sid = _search(c, store)
    running = _trial(store, sid, 0, status="running", started_at=time.time(), steps=30)

    r = c.post(f"/api/v1/trials/{running}/fork", json={"set": {"lr": 0.002, "opt.wd": 0}, "steps": 500})
    assert r.status_code == 202, r.text
    fork = r.json()
    assert (fork["parent_id"], fork["search_id"], fork["status"], fork["child_id"]) == (running, sid, "pending", None)
    assert fork["values"] == {"lr": 0.002, "opt.wd": 0.0} and fork["steps"] == 500
    assert c.get(f"/api/v1/forks/{fork['id']}").json() == fork
    same = c.post(f"/api/v1/trials/{running}/fork", json={})  # the same values, to the search's budget
    assert same.status_code == 202 and same.json()["values"] == {} and same.json()["steps"] is None

    # The controller's steps, as `quanta.controller.forks` takes them: the new trial, then the state at step 30.
    params = {**PARAMS, "lr": 0.002, "opt": {"wd": 0.0, "kind": "sgd"}}
    child = store.start_fork(fork["id"], 1, params, VALS, None, time.time()).id
    waiting = c.get(f"/api/v1/forks/{fork['id']}").json()
    assert (waiting["status"], waiting["child_id"], waiting["fork_step"]) == ("copying", child, None)
    store.finish_fork(fork["id"], 30, time.time(), 530)
    done = c.get(f"/api/v1/forks/{fork['id']}").json()
    assert (done["status"], done["child_id"], done["fork_step"]) == ("done", child, 30)
    store.record_config_change(running, 42, time.time(), {"lr": 0.05}, {**PARAMS, "lr": 0.05})

    lineage = c.get(f"/api/v1/searches/{sid}/lineage").json()
    assert lineage["mutable"] == ["lr", "opt.wd"]
    trials = {t["id"]: t for t in lineage["trials"]}
    assert (trials[running]["parent_id"], trials[running]["fork_step"]) == (None, None)
    assert [(ch["step"], ch["values"], ch["cause"]) for ch in trials[running]["changes"]] == [(42, {"lr": 0.05}, "set")]
    forked = trials[child]
    assert (forked["parent_id"], forked["fork_step"], forked["params"]["lr"]) == (running, 30, 0.002)
    (change,) = trials[child]["changes"]
    assert (change["step"], change["values"], change["cause"], change["source_id"]) == (
        30, {"lr": 0.002, "opt.wd": 0.0}, "fork", running
    )  # fmt: skip
    assert [f["status"] for f in lineage["forks"]] == ["done", "pending"]
    assert c.get(f"/api/v1/trials/{child}").json()["parent_id"] == running
    assert c.get(f"/api/v1/trials/{child}").json()["fork_step"] == 30

    exported = c.get(f"/api/v1/searches/{sid}/trials", params={"format": "json"}).json()["trials"]
    assert {r["trial_id"]: (r["parent_id"], r["fork_step"]) for r in exported} == {
        running: (None, None), child: (running, 30)
    }  # fmt: skip
    csv_head = c.get(f"/api/v1/searches/{sid}/trials", params={"format": "csv"}).text.splitlines()[0]
    assert csv_head.startswith("trial_id,number,parent_id,fork_step,")


def test_what_a_fork_may_change_and_when_it_is_refused(api, tmp_path):
    c, store, work, bob, vera = api
    sid = _search(c, store)
    running = _trial(store, sid, 0, status="running", started_at=time.time())
    never_ran = _trial(store, sid, 1)
    lost = _trial(store, sid, 2, status="completed", started_at=1.0, checkpoint_step=40)  # its file is gone
    no_checkpoint = _trial(store, sid, 3, status="killed", started_at=1.0)
    kept = _trial(store, sid, 4, status="completed", started_at=1.0, checkpoint_step=80)
    checkpoint_path(work, sid, kept).parent.mkdir(parents=True)
    checkpoint_path(work, sid, kept).write_bytes(b"state")

    def refused(trial: int, body: dict, code: int) -> object:
        r = c.post(f"/api/v1/trials/{trial}/fork", json=body)
        assert r.status_code == code, r.text
        return r.json()["detail"]

    # 422: only mutable parameters, with numbers their dimensions take
    (err,) = refused(running, {"set": {"momentum": 0.5}}, 422)
    assert err["loc"] == "set.momentum" and "is not mutable" in err["msg"] and "lr, opt.wd" in err["msg"]
    (err,) = refused(running, {"set": {"opt.kind": 1}}, 422)
    assert err["loc"] == "set.opt.kind" and "is not mutable" in err["msg"]
    (err,) = refused(running, {"set": {"dropout": 0.1}}, 422)
    assert err["loc"] == "set.dropout" and "is not a parameter" in err["msg"]
    (err,) = refused(running, {"set": {"lr": "fast"}}, 422)
    assert err["loc"] == "set.lr" and "finite number" in err["msg"]
    (err,) = refused(running, {"set": {"lr": -0.1}}, 422)
    assert err["loc"] == "set.lr" and "above 0" in err["msg"]
    assert refused(running, {"set": {"lr": 0.01}, "steps": 0}, 422)[0]["loc"] == ["body", "steps"]
    assert refused(running, {"values": {"lr": 0.01}}, 422)[0]["loc"] == ["body", "values"]  # `set`, not its alias
    # 409: no state to fork, with the reason
    assert "has not run yet" in refused(never_ran, {}, 409)
    assert f"trial {lost}'s checkpoint (step 40) is gone" in refused(lost, {}, 409)
    assert "killed and wrote no checkpoint" in refused(no_checkpoint, {}, 409)
    assert c.post(f"/api/v1/trials/{kept}/fork", json={}).status_code == 202  # its last checkpoint
    store.update_search(sid, status="completed")
    assert "search" in refused(running, {}, 409) and "completed" in refused(running, {}, 409)
    assert store.fork_requests(("pending",))[0].parent_id == kept  # nothing else was stored
    assert len(store.fork_requests(("pending", "copying", "done", "failed"))) == 1

    # `mutable: true` on a parameter that is not numeric: 422 naming it
    bad = {**SPEC, "space": {**SPEC["space"], "opt": {"kind": {"choice": ["sgd", "adam"], "mutable": True}}}}
    r = c.post("/api/v1/searches", json=bad)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == "space.opt.kind" and "numeric" in r.json()["detail"][0]["msg"]


def test_another_users_trial_is_a_404_and_a_viewer_cannot_fork(api):
    c, store, work, bob, vera = api
    admins = _search(c, store)
    trial = _trial(store, admins, 0, status="running", started_at=time.time())
    fork = c.post(f"/api/v1/trials/{trial}/fork", json={}).json()
    for path in (f"/api/v1/forks/{fork['id']}", f"/api/v1/searches/{admins}/lineage", "/api/v1/forks/999"):
        r = c.get(path, headers=bearer(bob))
        assert r.status_code == 404, (path, r.text)
    r = c.post(f"/api/v1/trials/{trial}/fork", json={"set": {"lr": 0.01}}, headers=bearer(bob))
    assert r.status_code == 404 and r.json()["detail"] == f"trial {trial} not found"
    # bob's own trial: his to fork
    bobs = _search(c, store, bob)
    his = _trial(store, bobs, 0, status="running", started_at=time.time())
    assert c.post(f"/api/v1/trials/{his}/fork", json={}, headers=bearer(bob)).status_code == 202
    assert c.get(f"/api/v1/searches/{bobs}/lineage", headers=bearer(bob)).status_code == 200
    # a viewer reads lineage and fork requests, and forks nothing
    assert c.get(f"/api/v1/forks/{fork['id']}", headers=bearer(vera)).status_code == 200
    assert c.get(f"/api/v1/searches/{admins}/lineage", headers=bearer(vera)).status_code == 200
    r = c.post(f"/api/v1/trials/{trial}/fork", json={}, headers=bearer(vera))
    assert r.status_code == 403 and "viewer" in r.json()["detail"]
    assert len(store.fork_requests(("pending",))) == 2
