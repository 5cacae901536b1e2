"""The dashboard in a real headless Chromium, against a real `quanta serve`.

Starts `python -m quanta.cli serve` on a free port with a temporary SQLite database and two CPU devices,
posts a small search (tests.trainables:linear, a target it reaches) and one whose name is an HTML
injection attempt, then drives the page with Playwright (Debian's /usr/bin/chromium; no browser
download). Checks the token form, the searches list, live updates while the search runs, the charts
(canvas pixels and series counts), the Gantt and parallel coordinates, the sortable trial table, and
that user-provided strings are shown as text. Saves test-artifacts/dashboard.png.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

# the `server` fixture is in conftest.py
from tests.e2e.conftest import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, TOKEN, api_client
from tests.e2e.conftest import canvas_ink as _canvas_ink

pytestmark = [pytest.mark.browser, pytest.mark.slow]

EVIL = "<img src=x onerror=alert(1)>"

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="Python Playwright is missing (pip install playwright)")


def _spec(name: str, *, max_trials: int, max_steps: int, parallelism: int) -> dict:
    return {
        "name": name,
        "trainable": "tests.trainables:linear",
        "space": {
            "lr": {"loguniform": [1e-4, 3e-2]},
            "hidden": {"choice": [8, 16, 32]},
            # A nested choice: the dashboard flattens it to optim.name / optim.momentum.
            "optim": {"choice": [{"name": "adam"}, {"name": "adam-ish", "momentum": {"uniform": [0.5, 0.99]}}]},
        },
        "metric": {"name": "accuracy", "goal": "maximize", "target": 0.9},
        "budget": {"max_trials": max_trials, "max_steps": max_steps, "max_seconds": 120, "stop_on_target": False},
        "parallelism": parallelism,
        "search": {"algorithm": "random", "n_startup": 1},
        # Gandiva: short quanta, early feedback (kills hopeless trials) and packing, so the page has
        # killed curves and packed stretches to draw. The assertions do not depend on either.
        "scheduler": {"policy": "gandiva", "quantum_s": 0.5},
        "seed": 1,
        "config": {"report_every": 10, "sleep_s": 0.002},
    }


def test_dashboard(server, tmp_path):
    t_start = time.monotonic()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    api = api_client(f"{server}/api/v1", headers, timeout=10)
    r = api.post("/searches", json=_spec("e2e-linear", max_trials=6, max_steps=1000, parallelism=4))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    r = api.post("/searches", json=_spec(EVIL, max_trials=1, max_steps=20, parallelism=1))
    assert r.status_code == 201, r.text
    evil_id = r.json()["id"]

    dialogs: list[str] = []
    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            ctx = browser.new_context(viewport={"width": 1400, "height": 900})
            page = ctx.new_page()
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on("pageerror", lambda e: errors.append(str(e)))

            # Without a token the page asks for one; a wrong one is refused, the right one opens the list.
            page.goto(server + "/")
            page.wait_for_selector("#token-form")
            page.fill("#token-input", "wrong-token")
            page.click("#token-form button[type=submit]")
            page.wait_for_selector("text=That token was refused.")
            page.close()

            # `/?token=...` stores the token in localStorage and drops it from the address bar.
            page = ctx.new_page()
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on("pageerror", lambda e: errors.append(str(e)))
            # From here on no request may fail (no 404 for a static file, no 401, no script error).
            page.on("console", lambda m: m.type == "error" and errors.append(f"console: {m.text}"))
            page.goto(f"{server}/?token={TOKEN}")
            page.wait_for_selector(f'#searches tr[data-search-id="{sid}"]')
            assert "token=" not in page.url
            assert page.evaluate("localStorage.getItem('quanta.token')") == TOKEN

            # The signed-in user is shown; an admin (QUANTA_TOKEN's user) gets a per-user filter.
            page.wait_for_selector("#whoami:not([hidden])")
            assert page.text_content("#whoami") == "admin (admin)"
            page.wait_for_selector("#owner-filter option[value=admin]", state="attached")
            assert page.is_visible("#owner-filter")
            page.select_option("#owner-filter", "admin")
            page.wait_for_selector(f'#searches tr[data-search-id="{sid}"] td.owner:text-is("admin")')
            page.select_option("#owner-filter", "")

            # The malicious name is shown as text, never parsed as HTML.
            evil_link = page.locator(f'#searches tr[data-search-id="{evil_id}"] a.search-link')
            assert evil_link.text_content() == EVIL
            assert page.locator("img").count() == 0

            # The live event stream is connected.
            page.wait_for_selector(".conn-live", timeout=15_000)

            # Open the search from the list while it is (probably) still running: the page must follow it
            # live to the end, without a reload.
            page.click(f'#searches tr[data-search-id="{sid}"] a.search-link')
            page.wait_for_url(f"**/#/search/{sid}")
            page.wait_for_selector("#trials tbody tr[data-trial-id]", timeout=60_000)

            deadline = time.monotonic() + 150
            final = None
            while time.monotonic() < deadline:
                final = api.get(f"/searches/{sid}").json()
                if final["status"] in ("completed", "stopped", "failed"):
                    break
                time.sleep(0.5)
            assert final and final["status"] == "completed", final
            assert final["reached"], final
            trials = api.get(f"/searches/{sid}/trials", params={"limit": 100}).json()
            n_trials = trials["total"]
            assert n_trials >= 2
            with_metric = [t for t in trials["items"] if t["best_metric"] is not None]
            best_id = final["best"]["trial_id"]

            # Live updates (SSE, debounced refetch) bring the page to the final state.
            page.wait_for_function(
                """([n]) => document.querySelectorAll('#trials tbody tr[data-trial-id]').length === n
                        && document.querySelector('.search-head .badge')?.textContent === 'completed'""",
                arg=[n_trials],
                timeout=30_000,
            )
            page.wait_for_function(
                "([n]) => document.querySelector('#chart-curves')?.dataset.series === String(n)",
                arg=[len(with_metric)],
                timeout=15_000,
            )
            assert page.locator("#search-name").text_content() == "e2e-linear"

            # Charts are drawn: uPlot canvases with painted pixels, one curve per trial with reports.
            assert int(page.locator("#chart-best").get_attribute("data-series")) >= 1
            assert int(page.locator("#chart-best").get_attribute("data-points")) >= 2
            assert _canvas_ink(page, "#chart-best canvas") > 500
            assert _canvas_ink(page, "#chart-curves canvas") > 500

            # Gantt: quanta on the devices, trial ids labelled; parallel coordinates: one line a trial.
            page.wait_for_selector("#gantt svg g.quantum")
            lanes = page.locator("#gantt .lane-label").all_text_contents()
            assert "cpu:0" in lanes and "cpu:1" in lanes, lanes
            ids = page.eval_on_selector_all("#gantt g.quantum", "gs => gs.map(g => g.dataset.trialId)")
            gantt_trials = {int(x) for x in ids}
            assert gantt_trials and gantt_trials <= {t["id"] for t in trials["items"]}
            assert page.locator("#parcoords path.pline").count() == len(with_metric)
            assert page.locator("#parcoords path.pline.best").count() == 1
            axis_names = page.locator("#parcoords .aname").all_text_contents()
            assert "lr" in axis_names and "accuracy" in axis_names, axis_names

            # Trial table: the best row is marked; sorting by metric (descending) puts the best metric first.
            assert page.locator(f'#trials tr.best[data-trial-id="{best_id}"]').count() == 1
            page.click('#trials th[data-sort="metric"]')
            page.wait_for_selector('#trials th.active[data-sort="metric"]')
            first = page.locator("#trials tbody tr[data-trial-id]").first.get_attribute("data-trial-id")
            by_metric = api.get(f"/searches/{sid}/trials", params={"sort": "-metric", "limit": 1}).json()["items"][0]
            assert int(first) == by_metric["id"]

            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

            # The malicious search's own page: the name is the heading's text, nothing is injected.
            page.goto(f"{server}/#/search/{evil_id}")
            page.wait_for_function(
                "([s]) => document.querySelector('#search-name')?.textContent === s", arg=[EVIL], timeout=15_000
            )
            page.wait_for_selector("#trials tbody tr[data-trial-id]")
            page.wait_for_selector("#chart-curves canvas")
            assert page.locator("img").count() == 0
            assert EVIL in page.locator("pre.spec").text_content()
            page.screenshot(path=str(ARTIFACTS / "dashboard-escaping.png"), full_page=True)
        finally:
            browser.close()
    assert not dialogs, f"a script ran: {dialogs}"
    assert not errors, errors
    print(f"browser test took {time.monotonic() - t_start:.1f} s")
