"""The dashboard's trade-offs of a multi-objective search (js/pareto.js) in a real headless Chromium, against
a real `quanta serve`.

The searches are finished ones written into the server's database with their reports (nothing trains):
with two objectives the page draws every point, the front as a step line and the infeasible point grey, and
a click on a point opens its trial; with three, parallel coordinates of the objectives; the hypervolume
over time is a chart; a single-objective search's page has no trade-offs panel. Saves
test-artifacts/dashboard-pareto.png.
"""

from __future__ import annotations

import time

import pytest

from quanta.db.models import ReportRow
from quanta.db.store import Store
from tests.e2e.conftest import ARTIFACTS, canvas_ink, new_page
from tests.integration.test_pareto import MO, TRIALS, finished_search

pytestmark = [pytest.mark.browser, pytest.mark.slow]

THREE = {
    **MO,
    "name": "three",
    "metrics": [*MO["metrics"], {"name": "size", "goal": "minimize"}],
    "reference": {"acc": 0.0, "lat": 10.0, "size": 10.0},
}


@pytest.fixture(scope="module")
def live(module_server):
    return module_server


def _three_objective_search(store: Store) -> int:
    sid, ids = finished_search(store, THREE)  # TRIALS report no size: no point yet
    rows = []
    for n, (tid, (_, reports)) in enumerate(zip(ids, TRIALS, strict=True)):
        step, metrics = reports[-1]
        rows.append(
            ReportRow(
                trial_id=tid,
                search_id=sid,
                step=step + 1,
                at=time.time() - 50 + n,
                metrics={**metrics, "size": 1.0 + n},
            )
        )
    store.add_rows(rows)
    return sid


def test_trade_offs_scatter_front_hypervolume_and_a_click_to_the_trial(live, browser):
    store = Store(live.db_url)
    sid, (a, b, d, e) = finished_search(store)
    body = live.get(f"/api/v1/searches/{sid}/pareto").json()
    errors: list[str] = []
    page = new_page(browser, errors, live.token, f"#/search/{sid}", live.url)

    # Every point, each of its kind; the infeasible one grey; the front on top, as a step line.
    page.wait_for_selector("#pareto svg.pareto-scatter circle.pt")
    svg = page.locator("#pareto svg.pareto-scatter")
    assert (svg.get_attribute("data-x"), svg.get_attribute("data-y")) == ("acc", "lat")
    kinds = page.eval_on_selector_all("#pareto circle.pt", "cs => cs.map(c => [+c.dataset.trialId, c.dataset.kind])")
    assert sorted(kinds) == sorted([p["trial_id"], p["kind"]] for p in body["points"])
    assert sorted(k for _, k in kinds) == ["dominated", "dominated", "front", "front", "infeasible"]
    grey = page.locator("#pareto circle.kind-infeasible")
    assert (
        grey.count() == 1 and grey.get_attribute("fill") == "#c4c8cf" and grey.get_attribute("data-trial-id") == str(e)
    )
    line = page.locator("#pareto path.front-line").get_attribute("d")
    assert line is not None and line.count("L") == 2  # two front points: one step between them
    info = page.locator("#pareto-info").inner_text()
    assert "trials: 2 on the front, 1 dominated, 1 infeasible" in info and "reference: acc 0, lat 10" in info

    # The hypervolume over time: a drawn chart with the API's changes.
    assert page.locator("#hv-panel").is_visible()
    page.wait_for_selector("#chart-hv[data-series] canvas")
    assert int(page.locator("#chart-hv").get_attribute("data-points")) >= len(body["hypervolume_curve"])
    assert canvas_ink(page, "#chart-hv canvas") > 200

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator("#pareto-panel").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "dashboard-pareto.png"), full_page=True)

    # Importance is of one objective at a time: both are offered.
    page.wait_for_selector("#importance-pick:not([hidden])")
    assert page.eval_on_selector_all("#importance-objective option", "os => os.map(o => o.value)") == ["acc", "lat"]
    page.select_option("#importance-objective", "lat")
    page.wait_for_function("() => document.querySelector('#importance-objective').value === 'lat'")

    # A click on a front point opens its trial.
    page.locator(f'#pareto circle.kind-front[data-trial-id="{a}"]').click()
    page.wait_for_function("(id) => location.hash === `#/trial/${id}`", arg=a, timeout=10_000)
    page.context.close()
    assert not errors, errors


def test_three_objectives_are_parallel_coordinates_and_one_objective_has_no_trade_offs(live, browser):
    store = Store(live.db_url)
    sid = _three_objective_search(store)
    errors: list[str] = []
    page = new_page(browser, errors, live.token, f"#/search/{sid}", live.url)
    page.wait_for_selector("#pareto svg.pareto-lines path.pline")
    axes = page.eval_on_selector_all("#pareto g.paxis", "gs => gs.map(g => g.dataset.param)")
    assert axes == ["acc", "lat", "size"]
    body = live.get(f"/api/v1/searches/{sid}/pareto").json()
    assert page.locator("#pareto path.pline").count() == len(body["points"]) == 4
    assert page.locator("#pareto path.pline.kind-front").count() == len(body["front"]) > 0

    single = {k: v for k, v in MO.items() if k not in ("metrics", "constraints", "reference")}
    one, _ = finished_search(store, {**single, "name": "one", "metric": {"name": "acc"}})
    page.goto(f"{live.url}/#/search/{one}")
    page.wait_for_function("() => document.querySelector('#search-name')?.textContent === 'one'", timeout=10_000)
    page.wait_for_selector("#chart-best[data-series]")
    assert page.locator("#pareto-panel").is_hidden() and page.locator("#hv-panel").is_hidden()
    page.context.close()
    assert not errors, errors
