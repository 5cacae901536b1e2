"""The REST API over a temporary SQLite database (FastAPI's TestClient), and one search run to the end by
a live controller loop in this process."""

from __future__ import annotations

import threading
import time

import pytest
import yaml
from fastapi.testclient import TestClient

from quanta.api.main import create_app
from quanta.api.routes import events as events_route
from quanta.api.settings import Settings
from quanta.db.models import ClusterView, DevicePlacement, LatencyRow, PairRates, QuantumRow, ReportRow
from quanta.db.store import Store
from quanta.devices import parse_devices
from quanta.sdk.client import parse_sse
from quanta.service import ControllerThread
from quanta.status import SEARCH_FINAL, TRIAL_FINAL

TOKEN = "api-test-token-0123456789abcdefghij"  # 32 characters at least (QUANTA_TOKEN's minimum)
AUTH = {"Authorization": f"Bearer {TOKEN}"}

SPEC = {
    "name": "lin",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"loguniform": [0.001, 0.1]}},
    "metric": {"name": "accuracy", "goal": "maximize", "target": 0.9},
    "budget": {"max_trials": 3, "max_steps": 40},
    "parallelism": 2,
    "scheduler": {"quantum_s": 0.5},
    "config": {"report_every": 5},
}


def settings_for(tmp_path, **kw) -> Settings:
    base = dict(
        db_url=f"sqlite:///{tmp_path / 'api.db'}",
        token=TOKEN,
        trainable_allowlist="tests.,examples.",
        delete_wait_s=0.3,
        events_poll_s=0.1,
    )
    return Settings(**{**base, **kw})


@pytest.fixture
def client(tmp_path):
    app = create_app(settings_for(tmp_path))
    with TestClient(app, headers=AUTH) as c:
        yield c


@pytest.fixture
def store(client) -> Store:
    return client.app.state.store


def post(client, spec=SPEC, **kw):
    return client.post("/api/v1/searches", json=spec, **kw)


def running_search(client, store, spec=SPEC) -> int:
    """A search as the controller leaves it once started (without running a controller)."""
    sid = post(client, spec).json()["id"]
    store.update_search(sid, status="running", started_at=time.time())
    return sid


# ---- auth ----------------------------------------------------------------------------------------


PROTECTED = [
    ("GET", "/api/v1/searches"),
    ("POST", "/api/v1/searches"),
    ("GET", "/api/v1/searches/1"),
    ("POST", "/api/v1/searches/1/stop"),
    ("POST", "/api/v1/searches/1/pause"),
    ("POST", "/api/v1/searches/1/resume"),
    ("DELETE", "/api/v1/searches/1"),
    ("GET", "/api/v1/searches/1/trials"),
    ("GET", "/api/v1/searches/1/curves"),
    ("GET", "/api/v1/searches/1/timeline"),
    ("GET", "/api/v1/searches/1/best"),
    ("GET", "/api/v1/trials/1"),
    ("POST", "/api/v1/trials/1/stop"),
    ("GET", "/api/v1/cluster"),
    ("GET", "/api/v1/events"),
    ("GET", "/metrics"),
    ("GET", "/api/v1/me"),
    ("GET", "/api/v1/users"),
    ("POST", "/api/v1/users"),
    ("GET", "/api/v1/users/bob"),
    ("PATCH", "/api/v1/users/bob"),
    ("DELETE", "/api/v1/users/bob"),
    ("GET", "/api/v1/users/bob/tokens"),
    ("POST", "/api/v1/users/bob/tokens"),
    ("DELETE", "/api/v1/tokens/1"),
]


def test_every_route_but_health_and_dashboard_needs_a_token(client, store):
    post(client)
    anonymous = TestClient(client.app)
    for method, path in PROTECTED:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
            r = anonymous.request(method, path, headers=headers)
            assert r.status_code == 401, (method, path, headers, r.status_code)
            assert r.headers["www-authenticate"] == "Bearer"
    assert anonymous.get("/healthz").json() == {"status": "ok", "controller": "none"}
    assert anonymous.get("/").status_code == 200
    assert anonymous.get("/static/no-such-file.js").status_code == 404
    assert anonymous.get("/openapi.json").status_code == 200
    # EventSource cannot set headers: the token may come in the query string.
    r = anonymous.get("/api/v1/events", params={"token": TOKEN, "max_seconds": 0.2})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert anonymous.get("/api/v1/searches", params={"token": TOKEN}).status_code == 401  # header only elsewhere


def test_tokens_are_stored_hashed(client, store):
    from sqlmodel import select

    from quanta.db.models import TokenRow

    with store.session() as s:
        rows = list(s.exec(select(TokenRow)))
    assert rows and all(TOKEN not in r.token_hash for r in rows)
    assert len(rows[0].token_hash) == 64


# ---- create / read ---------------------------------------------------------------------------------


def test_create_json_and_yaml_then_get_and_list(client):
    r = post(client)
    assert r.status_code == 201
    a = r.json()
    assert a["status"] == "queued" and a["name"] == "lin" and a["best"] is None
    assert a["progress"] == {"trials_created": 0, "trials_done": 0, "max_trials": 3, "trials": None}
    assert a["metric"] == {"name": "accuracy", "goal": "maximize", "target": 0.9}
    assert a["policy"] == "asha" and a["spec"]["trainable"] == "tests.trainables:linear"  # the default policy
    for key in ("created_at", "started_at", "finished_at", "reached", "seconds_to_target"):
        assert key in a
    text = yaml.safe_dump({**SPEC, "name": "from-yaml"})
    for ctype in ("application/yaml", "text/plain", "application/x-yaml"):
        r = client.post("/api/v1/searches", content=text, headers={"Content-Type": ctype})
        assert r.status_code == 201, r.text
        assert r.json()["name"] == "from-yaml"
    assert client.get(f"/api/v1/searches/{a['id']}").json()["id"] == a["id"]
    body = client.get("/api/v1/searches").json()
    assert body["total"] == 4 and [s["id"] for s in body["items"]] == [4, 3, 2, 1]  # newest first
    body = client.get("/api/v1/searches", params={"sort": "id", "offset": 1, "limit": 2}).json()
    assert body["total"] == 4 and [s["id"] for s in body["items"]] == [2, 3]
    assert client.get("/api/v1/searches", params={"status": "running"}).json() == {"items": [], "total": 0}


def test_invalid_specs_are_422_naming_the_field_and_create_nothing(client):
    cases = [
        ({**SPEC, "budget": {"max_steps": 0}}, "budget.max_steps"),
        ({**SPEC, "metric": {"name": "accuracy", "goal": "up"}}, "metric.goal"),
        ({k: v for k, v in SPEC.items() if k != "trainable"}, "trainable"),
        ({**SPEC, "trainable": "not a function"}, "trainable"),
        ({**SPEC, "space": {}}, "space"),
        ({**SPEC, "unknown_field": 1}, "unknown_field"),
        ({**SPEC, "trainable": "tests.no_such_module:train"}, "trainable"),
        ({**SPEC, "trainable": "tests.trainables:no_such_function"}, "trainable"),
    ]
    for spec, loc in cases:
        r = post(client, spec)
        assert r.status_code == 422, (loc, r.text)
        locs = [e["loc"] for e in r.json()["detail"]]
        assert loc in locs, (loc, r.json())
        assert all(e["msg"] for e in r.json()["detail"])
    r = client.post("/api/v1/searches", content="name: [unclosed", headers={"Content-Type": "application/yaml"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "spec"
    r = client.post("/api/v1/searches", content="{bad json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    r = client.post("/api/v1/searches", content="- a list", headers={"Content-Type": "application/yaml"})
    assert r.status_code == 422
    nan = yaml.safe_dump({**SPEC, "metric": {"name": "accuracy", "target": float("nan")}})
    r = client.post("/api/v1/searches", content=nan, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "metric.target"
    r = client.post("/api/v1/searches", content=b"\xff\xfe", headers={"Content-Type": "application/yaml"})
    assert r.status_code == 422
    r = client.post("/api/v1/searches", content=b"x", headers={"Content-Type": "image/png"})
    assert r.status_code == 415
    assert client.get("/api/v1/searches").json()["total"] == 0


def test_trainables_outside_the_allowlist_are_403(client):
    for trainable in ("os:system", "subprocess:run", "examplesx.mod:f", "quanta.cli:main"):
        r = post(client, {**SPEC, "trainable": trainable})
        assert r.status_code == 403, trainable
        assert f"trainable '{trainable}' is not allowed" in r.json()["detail"]
    assert post(client, {**SPEC, "trainable": "examples.digits:train"}).status_code == 201
    assert client.get("/api/v1/searches").json()["total"] == 1


def test_default_allowlist_is_examples_only(tmp_path):
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'a.db'}", token=TOKEN)
    assert settings.allowlist == ["examples."]
    with TestClient(create_app(settings), headers=AUTH) as c:
        assert post(c).status_code == 403  # tests.trainables
        assert post(c, {**SPEC, "trainable": "examples.digits:train"}).status_code == 201


def test_unknown_ids_are_404(client):
    for method, path in PROTECTED:
        if "/1" not in path:
            continue
        r = client.request(method, path.replace("/1", "/999"))
        assert r.status_code == 404, (method, path, r.status_code)
        assert "999 not found" in r.json()["detail"]
    assert client.get("/api/v1/searches/0").status_code == 422
    assert client.get("/api/v1/searches/abc").status_code == 422


# ---- control -------------------------------------------------------------------------------------


def test_stop_pause_resume_write_commands_for_the_controller(client, store):
    queued = post(client).json()["id"]
    assert client.post(f"/api/v1/searches/{queued}/pause").status_code == 409
    r = client.post(f"/api/v1/searches/{queued}/stop")  # never started: stopped here at once
    assert r.status_code == 202 and r.json()["status"] == "stopped"
    assert client.post(f"/api/v1/searches/{queued}/stop").status_code == 409

    sid = running_search(client, store)
    assert client.post(f"/api/v1/searches/{sid}/resume").status_code == 409
    r = client.post(f"/api/v1/searches/{sid}/pause")
    assert r.status_code == 202 and store.search(sid).command == "pause"
    store.update_search(sid, status="paused", command=None)  # what the controller does
    r = client.post(f"/api/v1/searches/{sid}/resume")
    assert r.status_code == 202 and store.search(sid).command == "resume"
    r = client.post(f"/api/v1/searches/{sid}/stop")
    assert r.status_code == 202 and store.search(sid).command == "stop"

    t = store.add_trial(sid, 0, {"lr": 0.01}, {"lr": 0.01}, time.time())
    r = client.post(f"/api/v1/trials/{t.id}/stop")
    assert r.status_code == 202 and r.json()["id"] == t.id
    assert store.trial(t.id).command == "stop"
    store.update_trial(t.id, status="completed", command=None)
    assert client.post(f"/api/v1/trials/{t.id}/stop").status_code == 409


def test_delete(client, store):
    queued = post(client).json()["id"]
    assert client.delete(f"/api/v1/searches/{queued}").status_code == 204
    assert client.get(f"/api/v1/searches/{queued}").status_code == 404

    # A started search: the API asks the controller's host to stop it and delete it; without a
    # controller it answers 202 after its wait, and the request stays recorded.
    sid = running_search(client, store)
    t = store.add_trial(sid, 0, {"lr": 0.01}, {"lr": 0.01}, time.time())
    store.add_rows([ReportRow(trial_id=t.id, search_id=sid, step=1, at=time.time(), metrics={"a": 1.0})])
    r = client.delete(f"/api/v1/searches/{sid}")
    assert r.status_code == 202 and r.json() == {"id": sid, "status": "deleting"}
    assert store.pending_deletes() == [sid]
    assert store.search(sid).command == "stop"
    store.delete_search(sid)  # what the controller's host does once the trials exited
    assert client.get(f"/api/v1/searches/{sid}").status_code == 404
    assert store.trial(t.id) is None and store.search_reports(sid) == [] and store.pending_deletes() == []


# ---- trials and views ----------------------------------------------------------------------------


def _populate(store: Store, sid: int) -> list[int]:
    now = time.time()
    ids = []
    for n, (metric, steps, status) in enumerate(
        [(0.5, 10, "completed"), (None, 0, "queued"), (0.9, 30, "running"), (0.7, 20, "killed"), (0.6, 40, "failed")]
    ):
        t = store.add_trial(sid, n, {"lr": 0.01 * (n + 1)}, {"lr": 0.01 * (n + 1)}, now)
        store.update_trial(t.id, metric=metric, best_metric=metric, steps=steps, status=status)
        ids.append(t.id)
    return ids


def test_trials_are_paged_sorted_and_filtered(client, store):
    sid = running_search(client, store)
    ids = _populate(store, sid)
    body = client.get(f"/api/v1/searches/{sid}/trials").json()
    assert body["total"] == 5 and [t["id"] for t in body["items"]] == ids
    t = body["items"][0]
    assert set(t) >= {
        "id", "search_id", "number", "params", "status", "metric", "best_metric", "steps",
        "device_seconds", "retries", "error", "created_at", "started_at", "finished_at",
    }  # fmt: skip
    metric = lambda sort: [  # noqa: E731
        x["metric"] for x in client.get(f"/api/v1/searches/{sid}/trials", params={"sort": sort}).json()["items"]
    ]
    assert metric("metric") == [0.5, 0.6, 0.7, 0.9, None]
    assert metric("-metric") == [0.9, 0.7, 0.6, 0.5, None]
    steps = client.get(f"/api/v1/searches/{sid}/trials", params={"sort": "-steps"}).json()["items"]
    assert [x["steps"] for x in steps] == [40, 30, 20, 10, 0]
    page = client.get(f"/api/v1/searches/{sid}/trials", params={"sort": "-id", "offset": 1, "limit": 2}).json()
    assert page["total"] == 5 and [x["id"] for x in page["items"]] == [ids[3], ids[2]]
    done = client.get(f"/api/v1/searches/{sid}/trials", params={"status": "completed"}).json()
    assert done["total"] == 1 and done["items"][0]["id"] == ids[0]
    assert client.get(f"/api/v1/searches/{sid}/trials", params={"sort": "bogus"}).status_code == 422
    assert client.get(f"/api/v1/searches/{sid}/trials", params={"limit": 0}).status_code == 422
    assert client.get(f"/api/v1/searches/{sid}").json()["progress"]["trials_done"] == 3


def test_trial_detail_curves_timeline_best(client, store):
    sid = running_search(client, store)
    t0 = store.search(sid).started_at
    a, b = _populate(store, sid)[:2]
    store.add_rows(
        [ReportRow(trial_id=a, search_id=sid, step=s, at=t0 + s, metrics={"accuracy": v, "loss": float("nan")},
                   objective=v) for s, v in [(1, 0.3), (2, 0.5), (3, 0.4)]]
        + [ReportRow(trial_id=b, search_id=sid, step=1, at=t0 + 2.5, metrics={"accuracy": 0.6}, objective=0.6)]
        + [QuantumRow(trial_id=a, search_id=sid, devices="cpu:0", started_at=t0, ended_at=t0 + 1, steps=5,
                      rate=5.0, rss_mb=10, packed_with=str(b)),
           QuantumRow(trial_id=b, search_id=sid, devices="cpu:0", started_at=t0, ended_at=t0 + 1, steps=4,
                      rate=4.0, rss_mb=10, packed_with=str(a))]
    )  # fmt: skip
    d = client.get(f"/api/v1/trials/{a}").json()
    assert d["id"] == a and d["search_id"] == sid and d["params"] == {"lr": 0.01}
    assert [(p["step"], p["objective"]) for p in d["curve"]] == [(1, 0.3), (2, 0.5), (3, 0.4)]
    assert d["curve"][0]["metrics"] == {"accuracy": 0.3, "loss": None}  # NaN travels as null
    assert d["quanta"] == [
        {"devices": ["cpu:0"], "started_at": t0, "ended_at": t0 + 1, "steps": 5, "rate": 5.0, "packed_with": [b]}
    ]
    curves = client.get(f"/api/v1/searches/{sid}/curves").json()
    assert curves["trials"][str(a)] == [[1, 0.3], [2, 0.5], [3, 0.4]]
    assert curves["trials"][str(b)] == [[1, 0.6]]
    assert curves["status"][str(a)] == "completed" and len(curves["status"]) == 5
    thin = client.get(f"/api/v1/searches/{sid}/curves", params={"max_points": 2}).json()
    assert thin["trials"][str(a)] == [[1, 0.3], [3, 0.4]]
    tl = client.get(f"/api/v1/searches/{sid}/timeline").json()
    assert tl["t0"] == t0 and len(tl["items"]) == 2
    assert tl["items"][0] | {"trial_id": a} == {
        "trial_id": a, "devices": ["cpu:0"], "started_at": t0, "ended_at": t0 + 1, "packed_with": [b],
    }  # fmt: skip
    best = client.get(f"/api/v1/searches/{sid}/best").json()["points"]
    assert best == [[1.0, 0.3], [2.0, 0.5], [2.5, 0.6]]


def test_cluster_reports_devices_pairs_and_gain(client, store):
    sid = running_search(client, store)
    a, b, c = _populate(store, sid)[:3]  # a completed, c running
    store.update_trial(b, status="running")
    store.publish_cluster_view(
        ClusterView(
            at=123.0,
            devices=(
                DevicePlacement("cpu:0", "local", "cpu", 100.0, running=(a, b)),
                DevicePlacement("cpu:1", "local", "cpu", 100.0, parked=(c,)),
            ),
            pairs=(PairRates(b, c, 6.0, 3.0, solo_a=10.0, solo_b=5.0),),
        )
    )
    body = client.get("/api/v1/cluster").json()
    assert body["at"] == 123.0 and body["nodes"] == ["local"]
    assert body["devices"][0]["running"] == [b]  # a has ended since the controller published
    assert body["devices"][1]["parked"] == [c]
    assert body["pairs"] == [{"a": b, "b": c, "rate_a": 6.0, "rate_b": 3.0, "solo_a": 10.0, "solo_b": 5.0, "gain": 1.2}]


def test_metrics_in_prometheus_format(client, store):
    sid = running_search(client, store)
    ids = _populate(store, sid)
    store.update_search(sid, best_metric=0.9, best_trial_id=ids[2])
    now = time.time()
    store.add_rows(
        [LatencyRow(trial_id=ids[0], kind="park", ms=3.0, at=now),
         LatencyRow(trial_id=ids[0], kind="resume", ms=40, at=now)]
        + [QuantumRow(trial_id=ids[2], search_id=sid, devices="cpu:0", started_at=now - 30, ended_at=now - 15, steps=5,
                      rate=1.0, rss_mb=1.0)]
    )  # fmt: skip
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'quanta_trials{state="running"} 1.0' in text
    assert 'quanta_trials{state="completed"} 1.0' in text
    assert 'quanta_searches{state="running"} 1.0' in text
    assert "quanta_quanta_total 1.0" in text
    assert 'quanta_device_busy_fraction{device="cpu:0"} 0.25' in text
    assert 'quanta_mechanism_latency_seconds_bucket{kind="park",le="0.005"} 1.0' in text
    assert 'quanta_mechanism_latency_seconds_bucket{kind="resume",le="0.025"} 0.0' in text
    assert 'quanta_mechanism_latency_seconds_count{kind="resume"} 1.0' in text
    assert f'quanta_search_best_metric{{metric="accuracy",name="lin",search_id="{sid}"}} 0.9' in text


def test_events_stream_changes_as_server_sent_events(client, store, monkeypatch):
    sid = running_search(client, store)
    t = store.add_trial(sid, 0, {"lr": 0.01}, {"lr": 0.01}, time.time())
    baseline_taken = threading.Event()

    class Poller(events_route.Poller):
        def poll(self):
            out = super().poll()
            baseline_taken.set()
            return out

    monkeypatch.setattr(events_route, "Poller", Poller)

    def later():
        assert baseline_taken.wait(10)
        store.add_rows([ReportRow(trial_id=t.id, search_id=sid, step=3, at=time.time(), metrics={"accuracy": 0.5},
                                  objective=0.5)])  # fmt: skip
        store.update_trial(t.id, status="running", metric=0.5, steps=3)
        store.update_search(sid, best_metric=0.5, best_trial_id=t.id)

    writer = threading.Thread(target=later)
    writer.start()
    r = client.get("/api/v1/events", params={"max_seconds": 2})
    writer.join()
    assert r.status_code == 200
    events = list(parse_sse(iter(r.text.split("\n"))))
    kinds = {e.event for e in events}
    assert kinds == {"search", "trial", "report"}, events
    report = next(e for e in events if e.event == "report")
    assert report.data["trial_id"] == t.id and report.data["step"] == 3 and report.id == str(report.data["id"])
    assert next(e for e in events if e.event == "trial").data["metric"] == 0.5
    assert next(e for e in events if e.event == "search").data["best"]["metric"] == 0.5
    # Resuming after a report id replays what came after it.
    r = client.get("/api/v1/events", params={"max_seconds": 0.2}, headers={"Last-Event-ID": "0"})
    assert [e.data["id"] for e in parse_sse(iter(r.text.split("\n"))) if e.event == "report"] == [report.data["id"]]


def test_openapi_documents_the_routes_and_the_spec_body(client):
    doc = client.get("/openapi.json").json()
    assert "/api/v1/searches/{search_id}/trials" in doc["paths"]
    body = doc["paths"]["/api/v1/searches"]["post"]["requestBody"]["content"]
    assert body["application/json"]["schema"] == {"$ref": "#/components/schemas/SearchSpec"}
    assert "SearchSpec" in doc["components"]["schemas"] and "BudgetSpec" in doc["components"]["schemas"]


# ---- with a live controller ----------------------------------------------------------------------


def test_a_posted_search_runs_to_completion_under_the_controller_loop(tmp_path):
    settings = settings_for(tmp_path, delete_wait_s=30)
    app = create_app(settings)
    store = app.state.store
    loop = ControllerThread(store, parse_devices("cpu:2"), tmp_path / "work", tick_s=0.2)
    app.state.controller_state = loop.state
    loop.start()
    try:
        with TestClient(app, headers=AUTH) as c:
            sid = post(c).json()["id"]
            slow = post(c, {**SPEC, "name": "slow", "metric": {"name": "accuracy", "target": 2.0},
                            "budget": {"max_trials": 20, "max_steps": 10_000},
                            "config": {"sleep_s": 0.01}}).json()["id"]  # fmt: skip
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                s = c.get(f"/api/v1/searches/{sid}").json()
                if s["status"] in SEARCH_FINAL:
                    break
                time.sleep(0.3)
            assert s["status"] == "completed", s
            assert c.get("/healthz").json()["controller"] == "running"
            assert s["reached"] and s["best"]["metric"] >= 0.9 and s["seconds_to_target"] is not None
            trials = c.get(f"/api/v1/searches/{sid}/trials").json()["items"]
            assert trials and all(t["status"] in TRIAL_FINAL for t in trials)
            assert sorted(t["number"] for t in trials) == list(range(len(trials)))
            # The best trial's last stretch of computing is measured when its stop reaches it, which
            # may land just after the search turned completed: give it a moment.
            end = time.monotonic() + 15
            while True:
                best = c.get(f"/api/v1/trials/{s['best']['trial_id']}").json()
                if best["quanta"] or time.monotonic() > end:
                    break
                time.sleep(0.2)
            assert best["curve"] and best["quanta"] and best["steps"] > 0
            assert c.get(f"/api/v1/searches/{sid}/best").json()["points"]

            # The other search is running trials: deleting it stops them first, then deletes it.
            while not any(t["status"] == "running" for t in c.get(f"/api/v1/searches/{slow}/trials").json()["items"]):
                time.sleep(0.2)
            slow_trials = [t["id"] for t in c.get(f"/api/v1/searches/{slow}/trials").json()["items"]]
            r = c.delete(f"/api/v1/searches/{slow}")
            assert r.status_code == 204, r.text
            assert c.get(f"/api/v1/searches/{slow}").status_code == 404
            assert [store.trial(t) for t in slow_trials] == [None] * len(slow_trials)
            assert not (tmp_path / "work" / f"search-{slow}").exists()
    finally:
        loop.stop()
    assert loop.state() == "stopped"


def test_healthz_fails_when_the_controller_loop_is_dead(client, tmp_path):
    """The API still answers, but a server whose controller loop died schedules nothing: 503."""
    loop = ControllerThread(client.app.state.store, [], tmp_path)
    done = threading.Thread(target=lambda: None)  # a loop thread that has ended without being stopped
    done.start()
    done.join()
    loop._thread = done  # what a thread killed by an unexpected error looks like from outside
    loop._state = "running"
    assert loop.state() == "failed"
    client.app.state.controller_state = loop.state
    r = TestClient(client.app).get("/healthz")
    assert r.status_code == 503 and r.json() == {"status": "controller not running", "controller": "failed"}
    client.app.state.controller_state = lambda: "running"
    assert TestClient(client.app).get("/healthz").status_code == 200


def test_a_space_hyperopt_would_refuse_is_a_422_naming_the_field(client, store):
    """Colliding labels (`a/b` beside a nested `a: {b: ...}`) used to be stored and then stop the
    controller; now validation refuses them and nothing is stored."""
    space = {"a/b": {"uniform": [0, 1]}, "a": {"b": {"uniform": [0, 1]}}}
    r = post(client, {**SPEC, "space": space})
    assert r.status_code == 422 and "space.a.b" in r.text
    assert store.searches() == []


@pytest.mark.parametrize("bad", ["\u00b2", "1" * 5000, "99999999999999999999", "-1", "1e3", "12 3"])
def test_a_bad_last_event_id_is_a_400(client, bad):
    headers = {"Last-Event-ID": bad.encode()}  # bytes: sent as they are (UTF-8 for the superscript two)
    r = client.get("/api/v1/events", params={"max_seconds": 0.2}, headers=headers)
    assert r.status_code == 400 and "Last-Event-ID" in r.text


def test_a_good_last_event_id_resumes(client):
    r = client.get("/api/v1/events", params={"max_seconds": 0.2}, headers={"Last-Event-ID": "123456789012345678"})
    assert r.status_code == 200


def test_a_body_larger_than_the_limit_is_refused_before_it_is_read(client, store):
    limit = client.app.state.settings.max_spec_bytes
    declared = client.post(
        "/api/v1/searches",
        content=b"{}",
        headers={"content-type": "application/json", "content-length": str(limit + 1)},
    )
    assert declared.status_code == 413

    def chunks():  # no Content-Length (chunked): refused once past the limit
        for _ in range(limit // 65536 + 2):
            yield b" " * 65536

    streamed = client.post("/api/v1/searches", content=chunks(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    assert store.searches() == []


def test_security_headers_and_no_cdn_docs_by_default(client, tmp_path):
    r = TestClient(client.app).get("/")
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert r.headers["x-frame-options"] == "DENY" and r.headers["referrer-policy"] == "no-referrer"
    assert client.get("/api/v1/searches").headers["x-content-type-options"] == "nosniff"
    anonymous = TestClient(client.app)
    assert anonymous.get("/docs").status_code == 404 and anonymous.get("/redoc").status_code == 404
    assert anonymous.get("/openapi.json").status_code == 200
    with TestClient(create_app(settings_for(tmp_path, api_docs=True))) as docs:
        assert docs.get("/docs").status_code == 200


# ---- warm start ----------------------------------------------------------------------------------


def test_warm_start_ids_must_exist_and_have_the_same_space(client):
    earlier = post(client).json()["id"]
    warm = {**SPEC, "search": {"warm_start_from": [earlier], "points_to_evaluate": [{"lr": 0.01}]}}
    r = post(client, warm)
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["search"]["warm_start_from"] == [earlier]
    r = post(client, {**warm, "search": {"warm_start_from": [earlier, 999]}})
    assert r.status_code == 404 and r.json()["detail"] == "search.warm_start_from[1]: search 999 does not exist"
    r = post(client, {**warm, "space": {"lr": {"uniform": [0.001, 0.1]}}, "search": {"warm_start_from": [earlier]}})
    assert r.status_code == 422
    (error,) = r.json()["detail"]
    assert error["loc"] == "search.warm_start_from[0]"
    assert "space.lr: uniform [0.001, 0.1] here, loguniform [0.001, 0.1] there" in error["msg"]
    r = post(client, {**warm, "search": {"points_to_evaluate": [{"lr": 0.5}]}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "search.points_to_evaluate[0].lr"
    assert client.get("/api/v1/searches").json()["total"] == 2  # the refused ones are not stored


# ---- export --------------------------------------------------------------------------------------


def test_trials_export_as_csv_json_and_parquet(client, store):
    import csv
    import io

    import pyarrow.parquet as pq

    sid = running_search(client, store)
    r = client.get(f"/api/v1/searches/{sid}/trials", params={"format": "csv"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert r.text.splitlines() == [r.text.splitlines()[0]] and "params.lr" in r.text  # header only: no trials yet
    for n, lr in enumerate([0.01, 0.02]):
        t = store.add_trial(sid, n, {"lr": lr}, {"lr": [lr]}, 1.0)
        store.update_trial(t.id, status="completed", metric=0.8 + n / 10, steps=40, device_seconds=1.5)
    r = client.get(f"/api/v1/searches/{sid}/trials?format=csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [(float(x["params.lr"]), x["status"], float(x["final_metric"])) for x in rows] == [
        (0.01, "completed", 0.8),
        (0.02, "completed", 0.9),
    ]
    assert "attachment" in r.headers["content-disposition"]
    doc = client.get(f"/api/v1/searches/{sid}/trials?format=json").json()
    assert [t["params.lr"] for t in doc["trials"]] == [0.01, 0.02]
    parquet = client.get(f"/api/v1/searches/{sid}/trials?format=parquet")
    assert pq.read_table(io.BytesIO(parquet.content)).column("params.lr").to_pylist() == [0.01, 0.02]
    assert client.get("/api/v1/searches/999/trials?format=csv").status_code == 404
    assert client.get(f"/api/v1/searches/{sid}/trials?format=xlsx").status_code == 422


# ---- importance and landscape --------------------------------------------------------------------


def test_importance_and_landscape_of_completed_trials(client, store):
    two = {**SPEC, "space": {"lr": {"loguniform": [0.001, 0.1]}, "hidden": {"choice": [8, 16, 32]}}}
    sid = running_search(client, store, two)
    r = client.get(f"/api/v1/searches/{sid}/importance")
    assert r.status_code == 200 and r.json()["params"] == [] and "at least" in r.json()["note"]
    for n in range(24):
        lr, hidden = 0.001 * 100 ** (n / 23), (8, 16, 32)[n % 3]
        t = store.add_trial(sid, n, {"lr": lr, "hidden": hidden}, {}, 1.0)
        store.update_trial(t.id, status="completed", metric=1.0 - abs(lr - 0.03) * 10)  # depends on lr only
    body = client.get(f"/api/v1/searches/{sid}/importance").json()
    assert body["trials_used"] == 24 and body["metric"] == "accuracy"
    assert [p["name"] for p in body["params"]][0] == "lr"
    land = client.get(f"/api/v1/searches/{sid}/landscape", params={"x": "lr", "y": "hidden"}).json()
    assert land["x"]["log"] and land["y"]["labels"] == ["8", "16", "32"]
    assert len(land["z"]) == 3 and len(land["z"][0]) == 20 and len(land["points"]) == 24
    r = client.get(f"/api/v1/searches/{sid}/landscape", params={"x": "depth"})
    assert r.status_code == 422 and "'depth'" in r.json()["detail"]
    assert client.get("/api/v1/searches/999/importance").status_code == 404
