"""The dashboard's lineage of a population (js/lineage.js) in a real headless Chromium, against a real
`quanta serve`.

A finished search is written into the server's database (nothing trains): four members, one of which
took another's state at step 20 (an exploit), one whose values were set while it ran, and a fork of a
member at step 30. The search page draws the population as a tree over steps: a row per trial, its line
from where it started, a new stretch at its exploit with an edge from its source at that step, and the
fork's edge from its parent at the fork step; a click on a row opens the trial. The exploiting trial's
page marks its change on its learning curve, with the new values. A search without mutable parameters
or forks has no population panel. Saves test-artifacts/dashboard-lineage.png.
"""

from __future__ import annotations

import time

import pytest

from quanta.db.models import ReportRow, SearchRow
from quanta.db.store import Store
from quanta.spec import parse_spec
from tests.e2e.conftest import ARTIFACTS, canvas_ink, new_page
from tests.integration.test_pareto import finished_search

pytestmark = [pytest.mark.browser, pytest.mark.slow]

STEPS = 40
SPEC = {
    "name": "population",
    "trainable": "tests.trainables:mutable_sgd",
    "space": {"lr": {"loguniform": [0.001, 1.0], "mutable": True}},
    "metric": {"name": "loss", "goal": "minimize"},
    "budget": {"max_trials": 4, "max_steps": STEPS},
    "scheduler": {"policy": "pbt", "population": 4, "interval_steps": 10},
}


@pytest.fixture(scope="module")
def live(module_server):
    return module_server


def population(store: Store) -> tuple[int, list[int], int]:
    """The finished search: (search id, the four members' ids, the fork's trial id)."""
    now = time.time()
    with store.session() as s:
        row = SearchRow(
            name="population",
            spec=parse_spec(SPEC).model_dump(mode="json"),
            status="completed",
            created_at=now - 100,
            started_at=now - 100,
            finished_at=now,
            owner_id=1,
        )
        s.add(row)
        s.commit()
        sid = row.id
    assert sid is not None
    members = []
    for n in range(4):
        lr = 0.01 * (n + 1)
        t = store.add_trial(sid, n, {"lr": lr}, {"lr": [lr]}, now - 100)
        store.update_trial(t.id, status="completed", steps=STEPS, metric=1.0 - 0.1 * n, started_at=now - 100)
        store.add_rows(
            [
                ReportRow(
                    trial_id=t.id, search_id=sid, step=k, at=now - 100 + k, metrics={"loss": 1.0 - 0.01 * k - 0.1 * n}
                )
                for k in range(STEPS)
            ]
        )
        members.append(t.id)
    a, b, c, _ = members
    store.record_config_change(b, 20, now - 70, {"lr": 0.012}, {"lr": 0.012}, "exploit", source_id=a, restored=True)
    store.update_trial(b, steps=STEPS)  # it went on from there to its end
    store.record_config_change(c, 25, now - 60, {"lr": 0.05}, {"lr": 0.05}, "set")
    req = store.add_fork_request(a, {"lr": 0.002}, 5, now - 50)
    child = store.start_fork(req.id, 4, {"lr": 0.002}, {"lr": [0.002]}, 35, now - 50)
    store.finish_fork(req.id, 30, now - 49, 35)
    store.update_trial(child.id, status="completed", steps=35, metric=0.5)
    store.add_rows(
        [
            ReportRow(trial_id=child.id, search_id=sid, step=k, at=now - 40 + k, metrics={"loss": 0.5})
            for k in range(30, 35)
        ]
    )
    return sid, members, child.id


def test_the_population_is_a_tree_over_steps_and_a_trials_curve_marks_its_changes(live, browser):
    store = Store(live.db_url)
    sid, (a, b, c, d), child = population(store)
    errors: list[str] = []
    page = new_page(browser, errors, live.token, f"#/search/{sid}", live.url)

    page.wait_for_selector("#lineage-panel:not([hidden]) svg.lineage-tree g.lineage-trial")
    rows = page.eval_on_selector_all("#lineage g.lineage-trial", "gs => gs.map(g => +g.dataset.trialId)")
    assert rows == [a, b, c, d, child]
    edges = page.eval_on_selector_all(
        "#lineage path.edge", "es => es.map(e => [e.dataset.cause, +e.dataset.from, +e.dataset.to, +e.dataset.step])"
    )
    assert sorted(edges) == [["exploit", a, b, 20], ["fork", a, child, 30]]
    # The exploiting member's line: its own stretch to step 20, then the one it took over from there.
    segs = page.eval_on_selector_all(
        f'#lineage g.lineage-trial[data-trial-id="{b}"] line.seg', "ls => ls.map(l => [+l.dataset.from, +l.dataset.to])"
    )
    assert segs == [[0, 20], [20, STEPS]]
    x = page.eval_on_selector_all(
        f'#lineage g.lineage-trial[data-trial-id="{b}"] line.seg', "ls => ls.map(l => +l.getAttribute('x1'))"
    )
    edge_end = page.eval_on_selector(
        "#lineage path.edge-exploit", "e => +e.getAttribute('d').trim().split(' ').pop().split(',')[0]"
    )
    assert x[1] == pytest.approx(edge_end, abs=0.2) and x[1] > x[0]
    # The fork starts at its fork step; the values set while it ran are a mark on its line.
    fork_seg = page.eval_on_selector(
        f'#lineage g.lineage-trial[data-trial-id="{child}"] line.seg', "l => +l.dataset.from"
    )
    assert fork_seg == 30
    marks = page.eval_on_selector_all(
        "#lineage circle.change", "cs => cs.map(c => [c.dataset.cause, +c.dataset.step, c.textContent])"
    )
    assert sorted(m[:2] for m in marks) == [["exploit", 20], ["fork", 30], ["set", 25]]
    assert any("exploit of trial" in m[2] and "lr 0.012" in m[2] for m in marks)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator("#lineage-panel").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "dashboard-lineage.png"), full_page=True)

    # A click on a row opens its trial: the exploit is marked on its curve at step 20, with its values.
    page.locator(f'#lineage g.lineage-trial[data-trial-id="{b}"] rect.hit').click(
        position={"x": 400, "y": 2}
    )  # beside its line
    page.wait_for_function("(id) => location.hash === `#/trial/${id}`", arg=b, timeout=10_000)
    page.wait_for_selector("#trial-curve .change-mark")
    mark = page.locator("#trial-curve .change-mark")
    assert (
        mark.count() == 1 and mark.get_attribute("data-step") == "20" and mark.get_attribute("data-cause") == "exploit"
    )
    assert "lr 0.012" in mark.inner_text() and f"exploit of trial {a}" in (mark.get_attribute("title") or "")
    # Placed at step 20 of the curve's x axis (0 to 39): about half way across the plot.
    where = page.evaluate(
        """() => {
            const m = document.querySelector('#trial-curve .change-mark');
            const over = m.parentElement.getBoundingClientRect();
            return (m.getBoundingClientRect().left - over.left) / over.width;
        }"""
    )
    assert 0.4 < where < 0.6, where
    assert canvas_ink(page, "#trial-curve canvas") > 200
    assert f"exploit of trial {a}" in page.locator("#trial-changes").inner_text()

    # The fork's page says where it came from.
    page.goto(f"{live.url}/#/trial/{child}")
    page.wait_for_selector("#trial-parent")
    assert f"trial {a} at step 30" in page.locator("#trial-parent").inner_text()
    page.wait_for_selector("#trial-curve .change-mark[data-cause='fork']")
    page.context.close()
    assert not errors, errors


def test_a_search_without_mutable_parameters_or_forks_has_no_population_panel(live, browser):
    store = Store(live.db_url)
    sid, _ = finished_search(store)
    errors: list[str] = []
    page = new_page(browser, errors, live.token, f"#/search/{sid}", live.url)
    page.wait_for_selector("#trials-panel table")
    page.wait_for_function("() => document.querySelector('#chart-curves[data-series]') !== null")
    assert page.locator("#lineage-panel").is_hidden()
    page.context.close()
    assert not errors, errors
