"""Users' shares of device time through the API (`GET /api/v1/shares`): the figures from stored quanta
and the share layer's accounts (exact, on rows written here), a member seeing only their own row, a bad
window a 422 naming the field; and live, two users' searches on `cpu:2` under a running controller
loop (with the share knobs `quanta serve` passes) each get about half the device time with rho about 1."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from quanta.api.main import create_app
from quanta.db.models import ClusterView, QuantumRow
from quanta.db.secret import ENV
from quanta.db.store import Store
from quanta.devices import parse_devices
from quanta.executor.policy.knobs import ShareKnobs
from quanta.executor.policy.types import DeviceView
from quanta.service import ControllerThread
from quanta.spec import parse_spec
from tests.integration.test_api import SPEC, TOKEN, settings_for
from tests.integration.test_shares_live import spec as long_spec


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(autouse=True)
def _secret_beside_the_database(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


def _quantum(search_id: int, devices: str, started: float, ended: float, packed: str = "") -> QuantumRow:
    return QuantumRow(
        trial_id=search_id * 100, search_id=search_id, devices=devices, started_at=started, ended_at=ended,
        steps=10, rate=1.0, rss_mb=10.0, packed_with=packed,
    )  # fmt: skip


def test_shares_report_stored_device_time_and_the_share_layers_accounts(tmp_path):
    app = create_app(settings_for(tmp_path))
    store: Store = app.state.store
    now = time.time()
    store.add_user("ann", now, weight=2.0)
    store.add_user("bob", now)
    bob = store.create_token("bob", now).token
    stored = parse_spec(SPEC).model_dump(mode="json")
    a = store.create_search("a", stored, now, "ann").id
    b = store.create_search("b", stored, now, "bob").id
    assert a is not None and b is not None
    store.add_rows(
        [
            _quantum(a, "cpu:0", now - 100, now - 40),  # 60 device-seconds
            _quantum(a, "cpu:1", now - 400, now - 250),  # 50 of its 150 s fall inside the last 300 s
            _quantum(a, "cpu:0", now - 900, now - 800),  # before the window: not counted
            _quantum(b, "cpu:0,cpu:1", now - 30, now - 10),  # 20 s on 2 devices: 40
            _quantum(b, "cpu:1", now - 20, now - 10, packed="7"),  # 10 s sharing its device with one other: 5
        ]
    )
    users = {
        "ann": {"used": 100.0, "fair": 150.0, "ideal": 200.0, "used_rate": 1.0, "fair_rate": 1.5, "ideal_rate": 2.0},
        "bob": {"used": 50.0, "fair": 40.0, "ideal": 25.0, "used_rate": 1.0, "fair_rate": 0.5, "ideal_rate": 0.5},
    }
    store.save_policy_state("share", {"share": {"at": now - 1, "window_s": 600.0, "users": users}, "groups": {}})
    store.publish_cluster_view(ClusterView.idle(now, (DeviceView("cpu:0", "local"), DeviceView("cpu:1", "local"))))

    with TestClient(app, headers=bearer(TOKEN)) as c:
        r = c.get("/api/v1/shares", params={"window_s": 300})
        late = time.time() - now  # the request's window starts up to this much after now - 300
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["devices"] == 2 and out["window_s"] == 300
        assert out["accounts_at"] == pytest.approx(now - 1) and out["accounts_window_s"] == 600.0
        rows = {u["name"]: u for u in out["users"]}
        assert set(rows) == {"admin", "ann", "bob"}  # every user, also one without device time
        ann, bob_row = rows["ann"], rows["bob"]
        assert 110.0 - late - 0.01 <= ann["device_s"] <= 110.0 + 0.01  # 50 s of the clipped quantum, less the delay
        assert bob_row["device_s"] == pytest.approx(45.0, abs=0.01)
        total = ann["device_s"] + bob_row["device_s"]
        assert ann["share"] == pytest.approx(ann["device_s"] / total, abs=1e-3)
        assert bob_row["share"] == pytest.approx(45 / total, abs=1e-3)
        assert ann["weight"] == 2.0 and bob_row["weight"] == 1.0
        assert (ann["devices"], ann["fair_devices"], ann["rho"]) == (1.0, 1.5, 2.0)  # ideal 200 / used 100
        assert (bob_row["used_s"], bob_row["fair_s"], bob_row["ideal_s"], bob_row["rho"]) == (50.0, 40.0, 25.0, 0.5)
        assert rows["admin"]["device_s"] == 0.0 and rows["admin"]["rho"] is None and rows["admin"]["devices"] is None

        # A member sees their own figures only (their share is still of everyone's device time).
        # Ann's clipped quantum shrinks by the time passed since `now`, so Bob's share grows with it.
        mine = c.get("/api/v1/shares", params={"window_s": 300}, headers=bearer(bob)).json()
        late = time.time() - now
        assert [u["name"] for u in mine["users"]] == ["bob"]
        assert 45 / 155 - 1e-3 <= mine["users"][0]["share"] <= 45 / (155 - late) + 1e-3

        # A window that is not a positive number of seconds up to a week: 422 naming it.
        for bad in (0, -5, 10 * 86_400):
            r = c.get("/api/v1/shares", params={"window_s": bad})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "window_s", r.text
        assert c.get("/api/v1/shares", headers=bearer("no-such-token")).status_code == 401


def test_before_any_plan_shares_have_no_accounts(tmp_path):
    app = create_app(settings_for(tmp_path))
    with TestClient(app, headers=bearer(TOKEN)) as c:
        out = c.get("/api/v1/shares").json()
    assert out["accounts_at"] is None and out["devices"] == 0 and out["window_s"] == 300
    assert out["users"] == [
        {"name": "admin", "weight": 1.0, "device_s": 0.0, "share": None, "devices": None, "fair_devices": None,
         "used_s": None, "fair_s": None, "ideal_s": None, "rho": None}
    ]  # fmt: skip


def test_two_users_searching_at_once_each_get_half_the_devices_live(tmp_path):
    """ann and bob each post a two-trial search through the API on `cpu:2` with a running controller
    loop: over the last seconds each had about half the device time, one device each, rho about 1."""
    app = create_app(settings_for(tmp_path))
    store: Store = app.state.store
    knobs = ShareKnobs(window_s=120.0)  # as `quanta serve --share-window-s 120` passes it
    loop = ControllerThread(store, parse_devices("cpu:2"), tmp_path / "work", tick_s=0.2, share=knobs)
    app.state.controller_state = loop.state
    loop.start()
    try:
        with TestClient(app, headers=bearer(TOKEN)) as c:
            tokens = {}
            for name in ("ann", "bob"):
                assert c.post("/api/v1/users", json={"name": name}).status_code == 201
                tokens[name] = bearer(c.post(f"/api/v1/users/{name}/tokens", json={}).json()["token"])
            ids = {
                name: c.post("/api/v1/searches", json=long_spec(name), headers=tokens[name]).json()["id"]
                for name in ("ann", "bob")
            }

            def both_running() -> bool:
                shares = {u["name"]: u for u in c.get("/api/v1/shares", params={"window_s": 2}).json()["users"]}
                return all((shares[n]["devices"] or 0) > 0 and (shares[n]["device_s"] or 0) > 0 for n in ids)

            deadline = time.monotonic() + 60
            while not both_running():
                assert time.monotonic() < deadline, c.get("/api/v1/shares").json()
                time.sleep(0.2)
            time.sleep(5.0)
            out = c.get("/api/v1/shares", params={"window_s": 4}).json()
            rows = {u["name"]: u for u in out["users"]}
            for name in ids:
                u = rows[name]
                assert 0.35 <= u["share"] <= 0.65, out
                assert u["devices"] == 1.0 and u["fair_devices"] == 1.0, out
                assert 0.7 <= u["rho"] <= 1.4, out
            assert out["devices"] == 2 and out["accounts_at"] is not None and out["accounts_window_s"] == 120.0
            assert [u["name"] for u in c.get("/api/v1/shares", headers=tokens["ann"]).json()["users"]] == ["ann"]
            for name, sid in ids.items():
                assert c.post(f"/api/v1/searches/{sid}/stop", headers=tokens[name]).status_code == 202
    finally:
        loop.stop()
