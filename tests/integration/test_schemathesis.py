"""Property-based requests generated from /openapi.json (schemathesis): no input makes the API answer
with a 5xx. Bounded: a few examples per operation, over a temporary SQLite database holding one search
with trials, reports and quanta (so some generated ids exist)."""

from __future__ import annotations

import time

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from sqlalchemy import text

from quanta.api.main import create_app
from quanta.api.settings import Settings
from quanta.db.models import QuantumRow, ReportRow

TOKEN = "schemathesis-token-0123456789abcdef"


def make_app(tmp_path):
    app = create_app(
        Settings(
            db_url=f"sqlite:///{tmp_path / 'st.db'}",
            token=TOKEN,
            trainable_allowlist="tests.,examples.",
            delete_wait_s=0.1,
            events_max_s=0.15,
            events_poll_s=0.1,
        )
    )
    store = app.state.store
    store.add_user("bob", time.time())  # a member for the user routes' generated requests to find
    now = time.time()
    row = store.create_search("seed", {"name": "seed", "metric": {"name": "accuracy", "goal": "maximize"}}, now)
    store.update_search(row.id, status="running", started_at=now)
    for n in range(3):
        t = store.add_trial(row.id, n, {"lr": 0.1}, {"lr": 0.1}, now)
        store.update_trial(t.id, status="running", metric=0.5, steps=3)
        store.add_rows(
            [
                ReportRow(trial_id=t.id, search_id=row.id, step=3, at=now, metrics={"accuracy": 0.5}, objective=0.5),
                QuantumRow(trial_id=t.id, search_id=row.id, devices="cpu:0", started_at=now, ended_at=now + 1,
                           steps=3, rate=3.0, rss_mb=1.0),
            ]
        )  # fmt: skip
    return app


def test_no_input_makes_the_api_answer_5xx(tmp_path, monkeypatch):
    """Every operation of the OpenAPI schema, a few valid and a few invalid generated requests each
    (schemathesis's pytest plugin is not used: its lazy fixtures do not run under pytest 9)."""
    # schemathesis keeps its cache under ./.schemathesis: run in the test's directory, not the checkout.
    monkeypatch.chdir(tmp_path)
    app = make_app(tmp_path)
    store = app.state.store
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    failures: list[str] = []
    calls = 0
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(mode))
            @settings(
                max_examples=8,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def check(case):
                nonlocal calls
                calls += 1
                response = case.call(headers=headers)
                if response.status_code >= 500:
                    failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text}")
                if case.method == "DELETE" and case.formatted_path.startswith("/api/v1/tokens/"):
                    # A generated id may be the admin token's own: keep it valid, or every later call is a 401.
                    with store.session() as s:
                        s.execute(text("UPDATE token SET revoked_at = NULL"))
                        s.commit()

            try:
                check()
            except Unsatisfiable:  # nothing to negate (e.g. GET /healthz takes no input)
                assert mode is GenerationMode.NEGATIVE
    assert not failures, "\n".join(failures)
    assert calls >= 8 * len(operations)
