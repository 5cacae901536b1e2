"""The dashboard's users' shares (GET /shares) in a real headless Chromium, against a real `quanta serve`.

Two users' finished searches, their quanta and the share layer's accounts are written into the server's
database (nothing trains: the test is about what the page shows from /shares). An admin sees every
user's row with its weight, device share and rho (a rho above 1.3 marked); a member sees their own row
only. Saves test-artifacts/dashboard-shares.png.
"""

from __future__ import annotations

import time

import pytest

from quanta.db.models import QuantumRow, SearchRow
from quanta.db.store import Store
from quanta.spec import parse_spec
from tests.e2e.conftest import TOKEN
from tests.e2e.test_dashboard import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, sync_api

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _history(db_url: str) -> str:
    """ann (weight 2) and bob each with a finished search and device time in the last minutes, the share
    layer's accounts (ann rho 2, bob 0.5); returns bob's token."""
    store = Store(db_url)
    now = time.time()
    store.add_user("ann", now, weight=2.0)
    store.add_user("bob", now)
    spec = parse_spec(
        {"name": "s", "trainable": "tests.trainables:linear", "space": {"lr": {"choice": [0.1]}},
         "metric": {"name": "accuracy", "target": 0.9}}
    ).model_dump(mode="json")  # fmt: skip
    ids = {}
    with store.session() as s:  # finished from the start: a queued row would be started by the server
        for owner in ("ann", "bob"):
            row = SearchRow(name=owner, spec=spec, status="completed", created_at=now - 200, owner=owner)
            row.owner_id = store.user(owner).id
            s.add(row)
            s.commit()
            ids[owner] = row.id
    store.add_rows(
        [
            QuantumRow(trial_id=1, search_id=ids["ann"], devices="cpu:0", started_at=now - 120, ended_at=now - 30,
                       steps=1, rate=1.0, rss_mb=1.0),
            QuantumRow(trial_id=2, search_id=ids["bob"], devices="cpu:1", started_at=now - 60, ended_at=now - 30,
                       steps=1, rate=1.0, rss_mb=1.0),
        ]
    )  # fmt: skip
    users = {
        "ann": {"used": 100.0, "fair": 150.0, "ideal": 200.0, "used_rate": 1.0, "fair_rate": 1.5, "ideal_rate": 2.0},
        "bob": {"used": 50.0, "fair": 40.0, "ideal": 25.0, "used_rate": 1.0, "fair_rate": 0.5, "ideal_rate": 0.5},
    }
    store.save_policy_state("share", {"share": {"at": now, "window_s": 600.0, "users": users}, "groups": {}})
    return store.create_token("bob", now).token


def test_admin_sees_every_users_share_and_a_member_their_own(server, tmp_path):
    bob = _history(f"sqlite:///{tmp_path}/q.db")
    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: m.type == "error" and errors.append(f"console: {m.text}"))
            page.goto(f"{server}/?token={TOKEN}")
            page.wait_for_selector('#shares tr[data-user="bob"]')
            rows = {
                r.get_attribute("data-user"): r.locator("td").all_text_contents()
                for r in page.locator("#shares tbody tr[data-user]").all()
            }
            assert set(rows) == {"admin", "ann", "bob"}, rows
            assert rows["ann"][1] == "2" and rows["ann"][4] == "2" and rows["bob"][4] == "0.5"
            assert rows["ann"][3].startswith("75%") and rows["bob"][3].startswith("25%"), rows  # 90 s of 120
            assert rows["ann"][2] == "1 / 1.5" and rows["admin"][4] == "—"
            assert page.locator('#shares tr[data-user="ann"] td.rho-behind').count() == 1
            assert page.locator('#shares tr[data-user="bob"] td.rho-behind').count() == 0
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "dashboard-shares.png"), full_page=True)

            member = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            member.on("pageerror", lambda e: errors.append(str(e)))
            member.goto(f"{server}/?token={bob}")
            member.wait_for_selector('#shares tr[data-user="bob"]')
            assert member.locator("#shares tbody tr").count() == 1
            assert "Your share" in member.locator("section.panel h3").all_text_contents()
        finally:
            browser.close()
    assert not errors, errors
