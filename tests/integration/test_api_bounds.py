"""One member cannot break the service for others, through the real API (FastAPI's TestClient on a
temporary SQLite database): a spec nested too deeply or too wide is a 422 naming the field and nothing is
stored; a search stored before those bounds still lists and reads; the list carries no specs; a CSV
export is safe to open in a spreadsheet; dotted parameter names are refused and an older search's are
exported apart; a trainable must be a function; importance is fitted once per set of finished trials."""

from __future__ import annotations

import csv
import io
import time

import pytest
from fastapi.testclient import TestClient

from quanta.api.main import create_app
from quanta.db.public.readable import NESTED_TOO_DEEPLY
from quanta.db.store import Store
from quanta.spec import MAX_DEPTH, MAX_OPTIONS, MAX_PARAMETERS, parse_spec
from tests.integration.test_api import AUTH, SPEC, post, running_search, settings_for


@pytest.fixture
def client(tmp_path):
    with TestClient(create_app(settings_for(tmp_path)), headers=AUTH) as c:
        yield c


@pytest.fixture
def store(client) -> Store:
    return client.app.state.store


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def _stored(store: Store, spec: dict) -> int:
    """A search inserted as an older version may have stored it, past today's checks."""
    return store.create_search(spec["name"], spec, time.time()).id


# ---- nesting ---------------------------------------------------------------------------------------


def test_a_spec_nested_too_deeply_is_refused_naming_the_field_and_nothing_is_stored(client):
    for field, spec in (
        ("config.deep", {**SPEC, "config": {"deep": _nested(254)}}),  # stored and then broke every list
        ("config.deep", {**SPEC, "config": {"deep": _nested(900)}}),  # a 500 before anything was stored
        ("space.lr", {**SPEC, "space": {"lr": {"choice": [_nested(100)]}}}),
    ):
        r = post(client, spec)
        assert r.status_code == 422, (field, r.status_code, r.text[:200])
        [error] = r.json()["detail"]
        assert error["loc"].startswith(field) and error["msg"] == f"nested more than {MAX_DEPTH} levels deep"
    yaml_text = "name: y\ntrainable: tests.trainables:linear\nmetric: {name: accuracy}\n"
    yaml_text += "space: {lr: {uniform: [0, 1]}}\nconfig: {deep: " + "[" * 300 + "1" + "]" * 300 + "}\n"
    r = client.post("/api/v1/searches", content=yaml_text, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"].startswith("config.deep")
    assert client.get("/api/v1/searches").json() == {"items": [], "total": 0}
    ok = {**SPEC, "config": {"report_every": 5, "layers": [[64, 64], [32]]}}  # nesting a real spec has
    assert post(client, ok).status_code == 201


def test_a_search_stored_too_deep_still_lists_reads_exports_and_fails_alone(client, store):
    deep = _stored(store, {**SPEC, "name": "deep", "config": {"deep": _nested(254)}})
    fine = post(client, SPEC).json()["id"]
    r = client.get("/api/v1/searches")
    assert r.status_code == 200 and [s["id"] for s in r.json()["items"]] == [fine, deep]
    r = client.get(f"/api/v1/searches/{deep}")
    assert r.status_code == 200
    shown = r.json()["spec"]["config"]["deep"]
    for _ in range(MAX_DEPTH - 2):  # the spec and config are the first two levels, lists the rest
        assert isinstance(shown, list)
        [shown] = shown
    assert shown == NESTED_TOO_DEEPLY
    assert r.json()["metric"]["name"] is None  # its spec no longer parses: shown, not used
    assert client.get(f"/api/v1/searches/{deep}/trials", params={"format": "csv"}).status_code == 200
    assert client.get(f"/api/v1/searches/{deep}/importance").status_code == 200
    assert client.delete(f"/api/v1/searches/{deep}").status_code == 204
    assert client.get(f"/api/v1/searches/{fine}").status_code == 200


# ---- width -------------------------------------------------------------------------------------------


def test_a_space_too_wide_is_refused_naming_the_field(client):
    wide = {f"p{i}": {"uniform": [0, 1]} for i in range(MAX_PARAMETERS + 1)}
    r = post(client, {**SPEC, "space": wide})
    assert r.status_code == 422
    assert r.json()["detail"] == [
        {"loc": "space", "msg": f"{MAX_PARAMETERS + 1} parameters; a search space has at most {MAX_PARAMETERS}"}
    ]
    constants = {f"c{i}": i for i in range(MAX_PARAMETERS)}  # constants are parameters too (columns)
    assert post(client, {**SPEC, "space": {**constants, "lr": {"uniform": [0, 1]}}}).status_code == 422
    options = {"c": {"choice": list(range(MAX_OPTIONS + 1))}}
    r = post(client, {**SPEC, "space": options})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "space" and "choice options" in r.text
    assert client.get("/api/v1/searches").json()["total"] == 0
    at_the_bound = {f"p{i}": {"uniform": [0, 1]} for i in range(MAX_PARAMETERS)}
    assert post(client, {**SPEC, "space": at_the_bound}).status_code == 201


def test_a_stored_wide_search_keeps_its_space():
    """The width bound is for new specs: a search stored wider still parses (its searcher runs off the tick)."""
    wide = {**SPEC, "space": {f"p{i}": {"uniform": [0, 1]} for i in range(MAX_PARAMETERS * 2)}}
    assert len(parse_spec(wide, stored=True).space) == MAX_PARAMETERS * 2


# ---- the list ----------------------------------------------------------------------------------------


def test_the_search_list_carries_no_specs_and_one_search_has_its_spec(client):
    big = {**SPEC, "config": {"notes": "x" * 200_000}}  # a large spec (within the body cap)
    ids = [post(client, big).json()["id"] for _ in range(5)]
    r = client.get("/api/v1/searches")
    assert r.status_code == 200 and len(r.content) < 10_000, len(r.content)  # 1 MB with specs
    for item in r.json()["items"]:
        assert "spec" not in item
        # what the dashboard's list draws (app/api/static/js/app.js: the searches table)
        for key in ("id", "name", "owner", "status", "waiting", "reached", "best", "progress", "metric",
                    "created_at", "started_at", "finished_at", "policy"):  # fmt: skip
            assert key in item, key
    one = client.get(f"/api/v1/searches/{ids[0]}").json()
    assert one["spec"]["config"]["notes"] == "x" * 200_000 and one["spec"]["trainable"] == SPEC["trainable"]


# ---- export ------------------------------------------------------------------------------------------


def test_csv_cells_a_spreadsheet_would_run_are_escaped(client, store):
    evil = ["=cmd|' /C calc'!A0", "+SUM(1,1)", "-2+3", "@SUM(A1)", "\tx", "\rx", "＝1+1", "plain", "a,=b"]
    sid = running_search(client, store, {**SPEC, "space": {"act": {"choice": evil}, "lr": {"uniform": [-1, 1]}}})
    for n, value in enumerate(evil):
        t = store.add_trial(sid, n, {"act": value, "lr": -0.5}, {}, 1.0)
        store.update_trial(t.id, status="failed", error='=HYPERLINK("http://x")')
    r = client.get(f"/api/v1/searches/{sid}/trials", params={"format": "csv"})
    rows = list(csv.DictReader(io.StringIO(r.text)))
    got = [row["params.act"] for row in rows]
    assert got == ["'" + v if v[0] in "=+-@\t\r＝" else v for v in evil]
    assert {row["error"] for row in rows} == {'\'=HYPERLINK("http://x")'}
    assert {row["params.lr"] for row in rows} == {"-0.5"}  # a number is no formula: written as it is
    # JSON is data, not a sheet: values as stored
    assert [t["params.act"] for t in client.get(f"/api/v1/searches/{sid}/trials?format=json").json()["trials"]] == evil


def test_dotted_parameter_names_are_refused_and_an_older_searchs_are_exported_apart(client, store):
    r = post(client, {**SPEC, "space": {"a.b": {"uniform": [0, 1]}, "a": {"b": {"uniform": [0, 1]}}}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "space.a.b" and "'.'" in r.text
    older = {**SPEC, "name": "older", "space": {"a.b": {"uniform": [0, 1]}, "a": {"b": {"uniform": [0, 1]}}}}
    sid = _stored(store, older)
    t = store.add_trial(sid, 0, {"a.b": 0.25, "a": {"b": 0.75}}, {}, 1.0)
    store.update_trial(t.id, status="completed", metric=0.5)
    doc = client.get(f"/api/v1/searches/{sid}/trials", params={"format": "json"}).json()
    assert doc["columns"][-2:] == ["params.a\\.b", "params.a.b"]
    [row] = doc["trials"]
    assert (row["params.a\\.b"], row["params.a.b"]) == (0.25, 0.75)  # both values, neither lost


# ---- trainables --------------------------------------------------------------------------------------


def test_a_trainable_that_is_not_a_function_is_refused(client):
    r = post(client, {**SPEC, "trainable": "examples.digits:np"})
    assert r.status_code == 422
    [error] = r.json()["detail"]
    assert error["loc"] == "trainable" and "is the module numpy, not a function" in error["msg"]
    assert client.get("/api/v1/searches").json()["total"] == 0
    assert post(client, {**SPEC, "trainable": "examples.digits:train"}).status_code == 201


# ---- importance ----------------------------------------------------------------------------------------


def test_importance_is_fitted_once_per_set_of_finished_trials(client, store, monkeypatch):
    import quanta.db.analysis as analysis

    fits: list[int] = []
    real = analysis.importance

    def counted(space, trials, **kw):  # noqa: ANN001, ANN202
        fits.append(len(trials))
        return real(space, trials, **kw)

    monkeypatch.setattr(analysis, "importance", counted)
    two = {**SPEC, "space": {"lr": {"loguniform": [0.001, 0.1]}, "hidden": {"choice": [8, 16, 32]}}}
    sid = running_search(client, store, two)
    for n in range(8):
        t = store.add_trial(sid, n, {"lr": 0.001 * 1.5**n, "hidden": (8, 16, 32)[n % 3]}, {}, 1.0)
        store.update_trial(t.id, status="completed", metric=n / 10)
    first = client.get(f"/api/v1/searches/{sid}/importance").json()
    for _ in range(3):  # the dashboard asks after every trial event
        assert client.get(f"/api/v1/searches/{sid}/importance").json() == first
    assert fits == [8]
    running = store.add_trial(sid, 8, {"lr": 0.01, "hidden": 8}, {}, 1.0)  # not finished: nothing to refit
    client.get(f"/api/v1/searches/{sid}/importance")
    assert fits == [8]
    store.update_trial(running.id, status="completed", metric=0.05)
    assert client.get(f"/api/v1/searches/{sid}/importance").json()["trials_used"] == 9
    assert fits == [8, 9]
