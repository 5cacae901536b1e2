"""A search's tags, notes and resume in the dashboard, in a real headless Chromium against one real
`quanta serve`: tags and notes are written on the search's page (a bad tag is refused, naming the field,
and nothing changes), a tag's chip opens the list of the searches with that tag, an ended search goes on
with more trials from its page, and a viewer sees the tags and notes with no control to change them.
Saves test-artifacts/dashboard-tags.png."""

from __future__ import annotations

import time

import httpx
import pytest

from quanta.db.store import Store
from tests.e2e.conftest import ARTIFACTS, TOKEN, api_client, new_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SPEC = {
    "name": "tagged",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"loguniform": [1e-3, 3e-2]}},
    "metric": {"name": "accuracy", "goal": "maximize", "target": 1.5},
    "budget": {"max_trials": 2, "max_steps": 60, "max_seconds": 120},
    "parallelism": 2,
    "search": {"algorithm": "random"},
    "config": {"report_every": 10},
}


def _until(api: httpx.Client, sid: int, cond, timeout: float = 90) -> dict:  # noqa: ANN001
    end = time.monotonic() + timeout
    while True:
        s = api.get(f"/searches/{sid}").json()
        if cond(s):
            return s
        assert time.monotonic() < end, s
        time.sleep(0.3)


@pytest.fixture(scope="module")
def ended(module_server):
    """(api client, the id of a completed search, the id of another one)."""
    api = api_client(f"{module_server.url}/api/v1", module_server.headers, timeout=15)
    sid = api.post("/searches", json=SPEC).json()["id"]
    other = api.post("/searches", json={**SPEC, "name": "untagged"}).json()["id"]
    for s in (sid, other):
        _until(api, s, lambda d: d["status"] == "completed")
    yield api, sid, other
    api.close()


def test_tags_and_notes_are_written_on_the_page_and_a_tag_lists_its_searches(module_server, browser, ended):
    api, sid, other = ended
    errors: list[str] = []
    page = new_page(browser, errors, TOKEN, f"#/search/{sid}", module_server.url)
    page.click("#info-edit")
    page.fill("#tags-input", "bad!tag")
    page.click("#info-save")
    page.wait_for_selector("#info-error:not([hidden])")
    assert "tags" in page.text_content("#info-error")
    assert api.get(f"/searches/{sid}").json()["tags"] == []  # refused whole
    assert [e for e in errors if "422" not in e] == []  # the browser notes the refusal itself
    errors.clear()

    page.fill("#tags-input", "baseline, lr-sweep baseline")
    page.fill("#notes-input", "the first try: warm-up too short?")
    page.click("#info-save")
    page.wait_for_selector('#search-tags a.tag[data-tag="lr-sweep"]')
    assert page.eval_on_selector_all("#search-tags a.tag", "as => as.map(a => a.textContent)") == [
        "baseline",
        "lr-sweep",
    ]
    assert page.text_content("#search-notes") == "the first try: warm-up too short?"
    assert page.is_hidden("#info-editor") and page.is_visible("#search-info")
    got = api.get(f"/searches/{sid}").json()
    assert (got["tags"], got["notes"]) == (["baseline", "lr-sweep"], "the first try: warm-up too short?")
    (ARTIFACTS / "dashboard-tags.png").parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-tags.png"))

    # A tag's chip: the list of the searches with it, each showing its tags and a mark for its notes.
    page.click('#search-tags a.tag[data-tag="baseline"]')
    page.wait_for_url("**/#/tag/baseline")
    page.wait_for_selector(f'#searches tr[data-search-id="{sid}"]')
    rows = page.eval_on_selector_all("#searches tbody tr[data-search-id]", "rs => rs.map(r => +r.dataset.searchId)")
    assert rows == [sid] and other not in rows
    chips = page.locator(f'#searches tr[data-search-id="{sid}"] td.tags a.tag').all_text_contents()
    assert chips == ["baseline", "lr-sweep"]
    assert page.get_attribute(f'#searches tr[data-search-id="{sid}"] .notes-mark', "title").startswith("the first")
    page.fill("#tag-filter", "")
    page.press("#tag-filter", "Enter")
    page.wait_for_selector(f'#searches tr[data-search-id="{other}"]')
    assert not errors, errors


def test_an_ended_search_goes_on_with_more_trials_from_its_page(module_server, browser, ended):
    api, sid, _ = ended
    errors: list[str] = []
    page = new_page(browser, errors, TOKEN, f"#/search/{sid}", module_server.url)
    page.wait_for_selector('#search-name:text-is("tagged")')
    page.click('button[data-action="more"]')
    page.fill("#more-trials", "1")
    page.click("#more-go")
    s = _until(api, sid, lambda d: d["spec"]["budget"]["max_trials"] == 3)
    s = _until(api, sid, lambda d: d["status"] == "completed" and d["progress"]["trials_done"] == 3)
    assert s["progress"]["max_trials"] == 3
    trials = api.get(f"/searches/{sid}/trials").json()["items"]
    assert [t["number"] for t in trials] == [0, 1, 2] and len({t["params"]["lr"] for t in trials}) == 3
    page.wait_for_selector('#trial-counts:has-text("3 completed")')
    assert not errors, errors


def test_a_viewer_reads_tags_and_notes_and_has_no_controls(module_server, browser, ended):
    api, sid, _ = ended
    api.patch(f"/searches/{sid}", json={"tags": ["shared"], "notes": "for the team"})
    store = Store(module_server.db_url)
    if store.user("vera") is None:
        store.add_user("vera", time.time(), role="viewer")
    token = store.create_token("vera", time.time()).token
    errors: list[str] = []
    page = new_page(browser, errors, token, f"#/search/{sid}", module_server.url)
    page.wait_for_selector('#search-tags a.tag[data-tag="shared"]')
    assert page.text_content("#search-notes") == "for the team"
    assert (
        page.locator("#info-edit").count() == 0
        and page.locator("#search-head [data-action], .actions [data-action]").count() == 0
    )
    assert not errors, errors
