"""The dashboard's parameter charts (importance bars, contour, slices) in a real headless Chromium,
against a real `quanta serve`.

The search is a finished one written into the server's database (40 completed trials whose accuracy
depends almost only on `lr`), so the charts have settled data without training anything: the test is
about what the page draws from /importance and /landscape. A `choice` of numbers (`width`) is drawn on
categorical axes with its options in the spec's order, never as a numeric range. Saves
test-artifacts/dashboard-landscape.png.
"""

from __future__ import annotations

import math
import random
import time

import pytest

from quanta.db.models import SearchRow
from quanta.db.store import Store
from quanta.spec import parse_spec
from tests.e2e.conftest import TOKEN, api_client
from tests.e2e.test_dashboard import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, sync_api

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SPACE = {
    "lr": {"loguniform": [1e-4, 1e-1]},
    "dropout": {"uniform": [0.0, 0.5]},
    "optim": {"choice": [{"name": "adam"}, {"name": "sgd", "momentum": {"uniform": [0.5, 0.99]}}]},
    "width": {"choice": [64, 128, 256]},  # sorted as text these would read 128, 256, 64
}
WIDTHS = ["64", "128", "256"]
N = 40


def _finished_search(db_url: str) -> int:
    spec = parse_spec(
        {
            "name": "landscape",
            "trainable": "tests.trainables:linear",
            "space": SPACE,
            "metric": {"name": "accuracy", "goal": "maximize", "target": 0.99},
        }
    )
    store = Store(db_url)
    now = time.time()
    # Written as finished from the start: a queued row would be picked up and started by the server's controller.
    with store.session() as s:
        row = SearchRow(name=spec.name, spec=spec.model_dump(mode="json"), status="completed", created_at=now - 60)
        s.add(row)
        s.commit()
        sid = row.id
    rng = random.Random(0)
    best = (None, -math.inf)
    for n in range(N):
        lr = 10 ** rng.uniform(-4, -1)
        dropout = rng.uniform(0, 0.5)
        optim = {"name": "adam"} if rng.random() < 0.5 else {"name": "sgd", "momentum": rng.uniform(0.5, 0.99)}
        width = (64, 128, 256)[n % 3]
        acc = 0.95 - 0.2 * (math.log10(lr) + 2) ** 2 - 0.02 * dropout - 0.01 * (width == 64)
        params = {"lr": lr, "dropout": dropout, "optim": optim, "width": width}
        t = store.add_trial(sid, n, params, {}, now - 60 + n)
        store.update_trial(
            t.id,
            status="completed",
            metric=acc,
            best_metric=acc,
            steps=100,
            started_at=now - 60 + n,
            finished_at=now - 50 + n,
        )
        if acc > best[1]:
            best = (t.id, acc)
    store.update_search(
        sid, status="completed", started_at=now - 60, finished_at=now, best_trial_id=best[0], best_metric=best[1]
    )
    return sid


def test_importance_contour_and_slices(server, tmp_path):
    sid = _finished_search(f"sqlite:///{tmp_path}/q.db")
    api = api_client(f"{server}/api/v1", {"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    ranked = [p["name"] for p in api.get(f"/searches/{sid}/importance").json()["params"]]
    assert ranked[0] == "lr", ranked

    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: m.type == "error" and errors.append(f"console: {m.text}"))
            page.goto(f"{server}/?token={TOKEN}#/search/{sid}")

            # Importance: one bar per varying parameter, in the API's order, lr first.
            page.wait_for_selector("#importance svg.importance g.imp-bar")
            bars = page.eval_on_selector_all("#importance g.imp-bar", "gs => gs.map(g => g.dataset.param)")
            assert bars == ranked
            widths = page.eval_on_selector_all(
                "#importance rect.imp-rect", "rs => rs.map(r => +r.getAttribute('width'))"
            )
            assert widths[0] == max(widths) and widths[0] > 3 * widths[1]

            # Contour: the two most important parameters by default, one cell per grid point of /landscape, the
            # trials as dots, in several colour bands.
            page.wait_for_selector("#contour svg.contour rect.cell")
            svg = page.locator("#contour svg.contour")
            assert (svg.get_attribute("data-x"), svg.get_attribute("data-y")) == (ranked[0], ranked[1])
            land = api.get(f"/searches/{sid}/landscape", params={"x": ranked[0], "y": ranked[1]}).json()
            assert page.locator("#contour rect.cell").count() == len(land["z"]) * len(land["z"][0]) >= 40
            both = [p for p in land["points"] if p[0] is not None and p[1] is not None]  # trials having both
            assert page.locator("#contour circle.pt").count() == len(both) > 0
            fills = set(page.eval_on_selector_all("#contour rect.cell", "rs => rs.map(r => r.getAttribute('fill'))"))
            assert len(fills) >= 4  # several bands, not one colour

            # Choosing other axes redraws it from /landscape.
            other = next(n for n in ranked if n not in ("lr", ranked[1]))
            page.select_option("#contour-y", other)
            page.wait_for_function(
                "([y]) => document.querySelector('#contour svg.contour')?.dataset.y === y", arg=[other], timeout=15_000
            )

            # Slices: one plot per varying parameter, most important first, a dot per trial with that parameter.
            page.wait_for_selector("#slices svg.slice")
            slices = page.eval_on_selector_all("#slices svg.slice", "ss => ss.map(s => s.dataset.param)")
            assert slices[0] == "lr" and set(slices) == set(ranked)
            dots = page.eval_on_selector_all(
                '#slices svg.slice[data-param="lr"] circle.pt', "cs => cs.map(c => c.textContent.split(':')[0])"
            )
            assert sorted(dots) == sorted(f"trial {i} (completed)" for i in range(1, N + 1)), dots
            sgd = page.locator('#slices svg.slice[data-param="optim.momentum"] circle.pt').count()
            assert 0 < sgd < N  # only the trials that chose sgd have a momentum

            # A choice of numbers is categorical everywhere: its options, in the spec's order, as labels.
            width_slice = '#slices svg.slice[data-param="width"]'
            assert page.get_attribute(width_slice, "data-kind") == "categorical"
            assert page.locator(f"{width_slice} text.xtick").all_text_contents() == WIDTHS
            assert page.get_attribute('#slices svg.slice[data-param="lr"]', "data-kind") == "numeric"
            axis = '#parcoords g.paxis[data-param="width"]'
            assert page.get_attribute(axis, "data-kind") == "categorical"
            assert page.locator(f"{axis} text.tick").all_text_contents() == WIDTHS
            assert page.get_attribute('#parcoords g.paxis[data-param="lr"]', "data-kind") == "log"
            page.select_option("#contour-x", "width")
            page.select_option("#contour-y", "lr")
            page.wait_for_function(
                "() => document.querySelector('#contour svg.contour')?.dataset.x === 'width'"
                " && document.querySelector('#contour svg.contour')?.dataset.y === 'lr'",
                timeout=15_000,
            )
            svg = page.locator("#contour svg.contour")
            assert (svg.get_attribute("data-x-kind"), svg.get_attribute("data-y-kind")) == ("categorical", "numeric")
            assert page.locator("#contour text.xtick").all_text_contents() == WIDTHS
            land = api.get(f"/searches/{sid}/landscape", params={"x": "width", "y": "lr"}).json()
            assert page.locator("#contour rect.cell").count() == 3 * len(land["z"])

            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.locator("#importance").scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "dashboard-landscape.png"), full_page=True)
        finally:
            browser.close()
    assert not errors, errors
