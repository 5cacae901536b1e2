"""The dashboard's search page in a real headless Chromium against a real `quanta serve`: its trials tile
counts parked trials apart from running ones while a search runs, its progress bar moves before any
trial has ended, and a metric that is never reported shows as a warning. Saves
test-artifacts/dashboard-counts.png."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import ARTIFACTS, TOKEN, api_client, new_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Successive halving on two devices: trials run to a rung at 10 steps and wait there, parked.
PARKING = {
    "name": "parking",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"loguniform": [0.003, 0.1]}},
    "metric": {"name": "accuracy", "target": 2.0},
    "budget": {"max_trials": 12, "max_steps": 270},
    "parallelism": 6,
    "scheduler": {"policy": "asha", "min_steps": 10, "eta": 3},
    "config": {"report_every": 5, "sleep_s": 0.02},
}
TYPO = {
    "name": "typo",
    "trainable": "tests.trainables:chatty",  # reports `accuracy`
    "space": {"x": {"uniform": [0, 1]}},
    "metric": {"name": "acc"},
    "budget": {"max_trials": 20, "max_steps": 40},
    "parallelism": 2,
}


def test_search_page_counts_parked_trials_and_warns_about_a_missing_metric(module_server, browser):
    api = api_client(f"{module_server.url}/api/v1", module_server.headers, timeout=15)
    errors: list[str] = []
    r = api.post("/searches", json=PARKING)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    page = new_page(browser, errors, TOKEN, f"#/search/{sid}", module_server.url)
    try:
        page.wait_for_selector("#trial-counts:has-text('parked')", timeout=60_000)
        # The bar counts trials ended or judged at a rung: it moves while trials wait at their rung.
        moved = "() => +(document.querySelector('.stat .progress .ptext')?.textContent.split('/')[0] ?? 0) > 0"
        page.wait_for_function(moved, timeout=60_000)
        page.screenshot(path=str(ARTIFACTS / "dashboard-counts.png"), full_page=True)
    finally:
        assert api.post(f"/searches/{sid}/stop").status_code == 202
    page.wait_for_selector(".search-head .badge:text-is('stopped')", timeout=30_000)
    page.wait_for_selector("#trial-counts:has-text('stopped')")
    assert "parked" not in page.text_content("#trial-counts")

    r = api.post("/searches", json=TYPO)
    assert r.status_code == 201, r.text
    page.goto(f"{module_server.url}/#/search/{r.json()['id']}")
    page.wait_for_selector(".search-head .badge:text-is('failed')", timeout=60_000)
    warning = page.text_content("#search-warning")
    assert warning is not None and "metric 'acc' has not been reported" in warning and "'accuracy'" in warning
    assert "metric 'acc' was never reported" in (page.text_content("#search-error") or "")
    assert not errors, errors
