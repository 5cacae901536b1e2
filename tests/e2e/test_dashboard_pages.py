"""The dashboard's trial page, trial table, compare page and cluster panel in a real headless Chromium,
against one real `quanta serve` for the module.

Two small real searches run to the end first (`tests.e2e.trainables:chatty`, which writes to its log,
and `tests.trainables:linear`): the trial page shows a real trial's curve, config, quanta and log; the
trial table sorts by any column and filters; the compare page draws both searches' best-so-far curves
and their specs side by side; the "Cluster now" panel shows while a search runs and goes when it ends.
Saves test-artifacts/dashboard-trial.png and dashboard-compare.png.
"""

from __future__ import annotations

import time

import httpx
import pytest

from quanta.db.export import flatten
from quanta.db.store import Store
from tests.e2e.conftest import ARTIFACTS, TOKEN, api_client, canvas_ink, new_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FINAL = ("completed", "stopped", "failed")


def _spec(
    name: str, trainable: str, space: dict, *, max_trials: int, max_steps: int, policy: str = "timeslice"
) -> dict:
    return {
        "name": name,
        "trainable": trainable,
        "space": space,
        "metric": {"name": "accuracy", "goal": "maximize", "target": 0.999},
        "budget": {"max_trials": max_trials, "max_steps": max_steps, "max_seconds": 120, "stop_on_target": False},
        "parallelism": 3,
        "search": {"algorithm": "random", "n_startup": 1},
        # Time-slicing with short quanta: a trial runs in several quanta, parked in between.
        "scheduler": {"policy": policy, "quantum_s": 0.3},
        "seed": 3,
        "config": {"report_every": 10},
    }


SPACE_A = {
    "lr": {"loguniform": [1e-4, 3e-2]},
    "hidden": {"choice": [8, 16, 32]},
    "optim": {"choice": [{"name": "adam"}, {"name": "adam-ish", "momentum": {"uniform": [0.5, 0.99]}}]},
}
SPACE_B = {"lr": {"loguniform": [1e-3, 3e-2]}}


@pytest.fixture(scope="module")
def searches(module_server):
    """Two finished searches: (api client, id of A with 5 chatty trials, id of B with 3 linear trials)."""
    api = api_client(f"{module_server.url}/api/v1", module_server.headers, timeout=15)
    a = api.post(
        "/searches", json=_spec("pages-a", "tests.e2e.trainables:chatty", SPACE_A, max_trials=5, max_steps=150)
    )
    assert a.status_code == 201, a.text
    b = api.post("/searches", json=_spec("pages-b", "tests.trainables:linear", SPACE_B, max_trials=3, max_steps=100))
    assert b.status_code == 201, b.text
    ids = (a.json()["id"], b.json()["id"])
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        states = [api.get(f"/searches/{i}").json()["status"] for i in ids]
        if all(s in FINAL for s in states):
            break
        time.sleep(0.5)
    assert states == ["completed", "completed"], (states, module_server.log()[-3000:])
    yield api, *ids
    api.close()


ROWS = "#trials tbody tr[data-trial-id]"


def _shown(page) -> list[int]:
    """The trial ids of the table's rows, top to bottom."""
    return [int(x) for x in page.eval_on_selector_all(ROWS, "rs => rs.map(r => r.dataset.trialId)")]


def _wait_rows(page, n: int) -> None:
    page.wait_for_function("([sel, n]) => document.querySelectorAll(sel).length === n", arg=[ROWS, n])


def _trials(api: httpx.Client, sid: int) -> list[dict]:
    return api.get(f"/searches/{sid}/trials", params={"limit": 100}).json()["items"]


RULES = """async () => {
  const tt = await import('/static/js/trialtable.js');
  const sp = await import('/static/js/space.js');
  const t = (id, status, metric, params, more = {}) => ({
    id, number: id - 1, status, metric, best_metric: metric, steps: 10, device_seconds: id, retries: 0,
    params, error: null, reason: null, ...more,
  });
  const trials = [
    t(1, "completed", 0.5, { lr: 0.1, optim: { name: "sgd", momentum: 0.9 } }),
    t(2, "killed", null, { lr: 0.01, optim: { name: "adam" } }, { reason: "curve fit: P(reach) 0.01" }),
    t(3, "failed", 0.7, { lr: 0.001, optim: { name: "adam" } }, { error: "ValueError: boom" }),
  ];
  const cols = tt.columnsFor(trials, "accuracy");
  const ids = (text) => {
    const f = tt.parseFilter(text, cols, "accuracy");
    return f.error ? f.error : trials.filter(f.test).map((x) => x.id);
  };
  const sorted = (key) => tt.sortTrials(trials, cols, key).map((x) => x.id);
  const space = { lr: { loguniform: [1e-4, 1] }, h: { choice: [8, 16, 32] }, c: 3,
    o: { choice: [{ name: "adam" }, { name: "sgd", m: { uniform: [0, 1] } }] } };
  return {
    filters: ["lr<0.05", "optim.name=ADAM", "status!=killed", "accuracy>=0.6", "boom", "optim.momentum>0",
              "lr<0.05 adam", "lr<", "lr<abc"].map(ids),
    unknown: ids("zz=1"),
    sorts: ["-metric", "metric", "param:optim.name", "-device_s"].map(sorted),
    dims: Object.fromEntries(sp.dimensions(space)),
    cats: sp.categories({ kind: "categorical", options: [8, 16, 32] }, [32, 8, 64, 9, null]),
  };
}"""


def test_filter_sort_and_axis_rules(module_server, browser):
    """The trial table's filter and sort rules and the spec's axes, as the page's own modules compute them."""
    errors: list[str] = []
    page = new_page(browser, errors, TOKEN, "", module_server.url)
    page.wait_for_selector("#searches")
    got = page.evaluate(RULES)
    assert got["filters"] == [
        [2, 3], [2, 3], [1, 3], [3], [3], [1], [2, 3], "'lr<': a value must follow <", "'lr<abc': < needs a number"
    ]  # fmt: skip
    assert got["unknown"].startswith("no column named 'zz' (columns: id, number, status, metric, best,")
    assert got["sorts"] == [[3, 1, 2], [1, 3, 2], [2, 3, 1], [3, 2, 1]]  # no metric: last either way
    assert got["dims"] == {
        "lr": {"kind": "numeric", "log": True},
        "h": {"kind": "categorical", "options": [8, 16, 32]},
        "c": {"kind": "categorical", "options": [3]},
        "o.name": {"kind": "categorical", "options": ["adam", "sgd"]},
        "o.m": {"kind": "numeric", "log": False},
    }
    assert got["cats"] == [8, 16, 32, 9, 64]  # the spec's order, then the others in numeric order
    assert not errors, errors


def test_trial_page_shows_curve_config_quanta_and_log(module_server, browser, searches):
    api, sid, _ = searches
    best = api.get(f"/searches/{sid}").json()["best"]["trial_id"]
    detail = api.get(f"/trials/{best}").json()
    reports = [p for p in detail["curve"] if p["metrics"].get("accuracy") is not None]
    assert len(reports) >= 5 and detail["quanta"], detail
    errors: list[str] = []
    # A link written as `/?search=<id>` opens the search's page.
    page = new_page(browser, errors, TOKEN, f"&search={sid}", module_server.url)
    page.wait_for_url(f"**/#/search/{sid}")

    # From the search page's table: a trial's id opens its page.
    page.click(f'#trials tr[data-trial-id="{best}"] a.trial-link')
    page.wait_for_url(f"**/#/trial/{best}")
    page.wait_for_selector("#trial-curve canvas")
    assert page.text_content("#trial-name") == f"Trial {best}"
    assert page.locator("#trial-search").text_content() == "pages-a"
    assert "best of its search" in page.text_content(".search-head")

    # The curve: one point per report of the objective, drawn.
    assert int(page.get_attribute("#trial-curve", "data-points")) == len(reports)
    assert canvas_ink(page, "#trial-curve canvas") > 500
    # Any reported metric can be drawn instead of the objective.
    assert set(page.eval_on_selector_all("#trial-metric option", "os => os.map(o => o.value)")) == {"accuracy", "loss"}
    page.select_option("#trial-metric", "loss")
    page.wait_for_function("() => document.querySelector('#trial-curve .u-legend')?.textContent.includes('loss')")

    # The config: every parameter with its exact value.
    shown = {
        r.get_attribute("data-param"): r.locator("td.value").text_content()
        for r in page.locator("#trial-config tr[data-param]").all()
    }
    want = flatten(detail["params"])
    assert set(shown) == set(want), shown
    for k, v in want.items():
        assert (float(shown[k]) == v) if isinstance(v, float) else shown[k] == str(v), (k, shown[k], v)

    # The quanta: one row per measured stretch, with its devices.
    rows = page.locator("#trial-quanta tbody tr")
    assert rows.count() == len(detail["quanta"])
    assert rows.first.locator("td").nth(1).text_content() == ", ".join(detail["quanta"][0]["devices"])

    # The log: what the trainable wrote to stdout and stderr.
    page.wait_for_function("() => document.querySelector('#trial-log')?.textContent.includes('chatty: steps done')")
    log = page.text_content("#trial-log")
    assert f"chatty: starting with lr={detail['params']['lr']!r}" in log
    assert "chatty: a line on stderr" in log

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-trial.png"), full_page=True)

    # Another user's trial is a missing one.
    store = Store(module_server.db_url)
    store.add_user("eve", time.time())
    eve = store.create_token("eve", time.time()).token
    other = new_page(browser, errors, eve, f"#/trial/{best}", module_server.url)
    other.wait_for_selector(f"text=Trial {best} does not exist.")
    errors[:] = [e for e in errors if "404" not in e]  # the browser logs the refused fetch itself
    assert not errors, errors


def test_trial_table_sorts_by_any_column_and_filters(module_server, browser, searches):
    api, sid, _ = searches
    trials = _trials(api, sid)
    errors: list[str] = []
    page = new_page(browser, errors, TOKEN, f"#/search/{sid}", module_server.url)
    page.wait_for_selector(ROWS)
    assert _shown(page) == sorted((t["id"] for t in trials), reverse=True)  # newest first

    # A parameter is a column: a click sorts by it (descending), another click ascending.
    page.click('#trials th[data-sort="param:lr"]')
    page.wait_for_selector('#trials th.active[data-sort="param:lr"]')
    by_lr = [t["id"] for t in sorted(trials, key=lambda t: t["params"]["lr"])]
    assert _shown(page) == by_lr[::-1]
    page.click('#trials th[data-sort="param:lr"]')
    page.wait_for_function("() => document.querySelector('#trials th.active')?.textContent.endsWith('▲')")
    assert _shown(page) == by_lr

    # Device time, a column the API cannot sort by.
    page.click('#trials th[data-sort="device_s"]')
    page.wait_for_selector('#trials th.active[data-sort="device_s"]')
    assert _shown(page) == [t["id"] for t in sorted(trials, key=lambda t: (-t["device_seconds"], t["id"]))]

    # The filter box: a comparison on a parameter, a word, and a term it cannot use.
    median = sorted(t["params"]["lr"] for t in trials)[len(trials) // 2]
    page.fill("#trial-filter", f"lr<{median!r}")
    want = sorted((t["id"] for t in trials if t["params"]["lr"] < median), key=by_lr.index)
    _wait_rows(page, len(want))
    assert sorted(_shown(page)) == sorted(want) and 0 < len(want) < len(trials)
    assert page.text_content("#trial-count").endswith(f"{len(want)} matching, {len(trials)} trials")

    hidden8 = [t["id"] for t in trials if t["params"]["hidden"] == 8]
    page.fill("#trial-filter", "hidden=8")
    _wait_rows(page, len(hidden8))
    assert sorted(_shown(page)) == sorted(hidden8)

    page.fill("#trial-filter", "nosuch<1")
    page.wait_for_selector("#trials td.empty:text-is('No trial matches.')")
    assert "no column named 'nosuch'" in page.text_content("#trial-filter-error")

    # The status box counts each state apart and narrows to one.
    page.fill("#trial-filter", "")
    options = page.eval_on_selector_all("#trial-status option", "os => os.map(o => o.textContent)")
    assert options == [f"every status ({len(trials)})", f"completed ({len(trials)})"], options
    page.select_option("#trial-status", "completed")
    _wait_rows(page, len(trials))
    assert not errors, errors


def test_compare_draws_two_searches_side_by_side(module_server, browser, searches):
    api, a, b = searches
    errors: list[str] = []
    page = new_page(browser, errors, TOKEN, "", module_server.url)
    page.wait_for_selector(f'#searches tr[data-search-id="{b}"]')
    assert page.is_disabled("#compare-btn")
    page.check(f'#searches tr[data-search-id="{a}"] input.pick')
    page.check(f'#searches tr[data-search-id="{b}"] input.pick')
    page.click("#compare-btn")
    page.wait_for_url(f"**/#/compare/{a},{b}")

    # Both best-so-far curves on one chart.
    page.wait_for_selector("#compare-best canvas")
    assert page.get_attribute("#compare-best", "data-series") == "2"
    assert canvas_ink(page, "#compare-best canvas") > 500
    legend = page.text_content("#compare-best .u-legend")
    assert f"pages-a (#{a})" in legend and f"pages-b (#{b})" in legend

    # Side by side: a column per search; rows that differ marked, rows that agree not.
    heads = page.eval_on_selector_all("#compare-config th.run", "ths => ths.map(t => +t.dataset.searchId)")
    assert heads == [a, b]
    best = {s: api.get(f"/searches/{s}").json()["best"] for s in (a, b)}
    cells = page.locator('#compare-config tr[data-row="result:best trial"] td').all_text_contents()
    assert cells == [str(best[a]["trial_id"]), str(best[b]["trial_id"])]
    assert page.locator('#compare-config tr.differs[data-row="spec:budget.max_trials"]').count() == 1
    assert page.locator('#compare-config tr[data-row="spec:metric.name"]:not(.differs)').count() == 1
    hidden = page.locator('#compare-config tr[data-row="spec:space.hidden.choice"] td').all_text_contents()
    assert hidden == ["[8,16,32]", "—"]  # a field one spec has and the other not
    page.check("#compare-diff")
    page.wait_for_selector('#compare-config tr[data-row="spec:metric.name"]', state="detached")

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-compare.png"), full_page=True)
    assert not errors, errors


def test_cluster_panel_shows_while_a_search_runs_and_goes_when_it_ends(module_server, browser, searches):
    api, done, _ = searches
    errors: list[str] = []
    page = new_page(browser, errors, TOKEN, f"#/search/{done}", module_server.url)
    page.wait_for_selector("#trials tbody tr[data-trial-id]")
    page.wait_for_selector("#search-name:text-is('pages-a')")
    assert not page.locator("section.panel h3:text-is('Cluster')").is_visible()
    assert not page.locator("#cluster").is_visible()

    long = _spec("pages-long", "tests.trainables:linear", SPACE_B, max_trials=1, max_steps=100_000, policy="fifo")
    r = api.post("/searches", json=long)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    steps = "#trial-steps"
    try:
        page.goto(f"{module_server.url}/#/search/{sid}")
        page.wait_for_selector(".search-head .badge:text-is('running')", timeout=30_000)
        page.wait_for_selector("#cluster-panel h3:text-is('Cluster')")
        page.wait_for_selector("#cluster td:text-is('cpu:0')")

        # The running trial's page follows it live: its steps grow, and it can be stopped from there.
        tid = page.locator(ROWS).first.get_attribute("data-trial-id")
        trial = new_page(browser, errors, TOKEN, f"#/trial/{tid}", module_server.url)
        trial.wait_for_selector(".search-head .badge:text-is('running')", timeout=30_000)
        assert trial.is_visible("button[data-action=stop]")
        first = int(trial.text_content(steps))
        trial.wait_for_function("([sel, n]) => +document.querySelector(sel)?.textContent > n", arg=[steps, first])
    finally:
        assert api.post(f"/searches/{sid}/stop").status_code == 202
    # The pages follow the search to its end, and the cluster panel goes with it.
    page.wait_for_selector(".search-head .badge:text-is('stopped')", timeout=30_000)
    page.wait_for_selector("#cluster-panel", state="hidden")
    trial.wait_for_selector(".search-head .badge:text-is('stopped')", timeout=30_000)
    assert not trial.is_visible("button[data-action=stop]")
    assert not errors, errors
