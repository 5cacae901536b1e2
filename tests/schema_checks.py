"""Checks the migration tests share on SQLite and PostgreSQL (tests/unit/test_migrations.py,
tests/distributed/test_migrations_pg.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, text
from sqlmodel import SQLModel

from quanta.db.engine import make_engine
from quanta.db.migrate import upgrade
from quanta.db.models import ReportRow
from quanta.db.public.searches import SearchPatch
from quanta.db.store import Store


def schema_differences(engine: Engine) -> list:
    """What Alembic's autogenerate finds between the database and the models (nothing: they agree)."""
    with engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)


def upgrade_at_once(open_engine: Callable[[], Engine], processes: int = 2) -> list[list[str]]:
    """`upgrade` run by `processes` threads at once, each on an engine of its own (as separate processes
    would be); the revisions each applied. Raises the first error any of them met."""
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(upgrade(open_engine()))
        except BaseException as exc:  # noqa: BLE001  # raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(processes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return results


def assert_ids_never_reused(store: Store) -> None:
    """Delete the newest search (with its trial and report) and user (with their token), make new ones:
    every new id is higher than the deleted one (SQLite without AUTOINCREMENT gave the same ids again)."""
    carol = store.add_user("carol", 1.0).id
    token = store.create_token("carol", 1.0)
    first = store.create_search("a", {}, 1.0, owner="carol")
    newest = store.create_search("b", {}, 2.0, owner="carol")
    trial = store.add_trial(newest.id, 0, {}, {}, 2.0)
    store.add_rows([ReportRow(trial_id=trial.id, search_id=newest.id, step=1, at=2.0, metrics={}, objective=0.5)])
    report = store.search_reports(newest.id)[0]
    store.delete_search(newest.id)
    store.delete_user("carol", 3.0, force=True)
    assert store.add_user("dave", 4.0).id > carol
    again = store.create_search("c", {}, 4.0, owner="dave")
    assert again.id > newest.id > first.id
    t2 = store.add_trial(again.id, 0, {}, {}, 4.0)
    store.add_rows([ReportRow(trial_id=t2.id, search_id=again.id, step=1, at=4.0, metrics={}, objective=0.5)])
    assert t2.id > trial.id and store.search_reports(again.id)[0].id > report.id
    assert store.create_token("dave", 5.0).id > token.id


def assert_reports_deduplicated_on_upgrade(url: str) -> None:
    """A database at the revision before report attempts, holding a step its trial reported twice (a
    trial that ran steps again after a restart) and another reported once, is upgraded: the first stored
    of each (trial, step) is kept, every kept row is of attempt 0, and from then on a report is stored
    once per (trial, step, attempt): the same one written again merges, a later attempt's is a row of its
    own, and the curves show each step once."""
    engine = make_engine(url)
    upgrade(engine, "0006_ids_never_reused")
    with engine.begin() as c:
        c.execute(text("INSERT INTO search (name, spec, status, created_at, reached, trials_created, owner) "
                       "VALUES ('s', '{}', 'running', 1, false, 1, 'admin')"))  # fmt: skip
        c.execute(text("INSERT INTO trial (search_id, number, params, vals, status, steps, device_seconds, "
                       "retries, devices, created_at, priority) "
                       "VALUES (1, 0, '{}', '{}', 'running', 20, 0, 0, '', 1, 0)"))  # fmt: skip
        for step, at, value in ((0, 1.0, 0.1), (10, 2.0, 0.2), (0, 3.0, 0.15), (10, 4.0, 0.25), (20, 5.0, 0.3)):
            c.execute(
                text("INSERT INTO report (trial_id, search_id, step, at, metrics, objective) "
                     "VALUES (1, 1, :step, :at, :m, :v)"),
                {"step": step, "at": at, "m": f'{{"acc": {value}}}', "v": value},
            )  # fmt: skip
    assert "0007_report_attempts" in upgrade(engine)
    store = Store(url, secret=b"s")
    assert schema_differences(store.engine) == []
    kept = [(r.step, r.attempt, r.at, r.objective) for r in store.reports(1)]
    assert kept == [(0, 0, 1.0, 0.1), (10, 0, 2.0, 0.2), (20, 0, 5.0, 0.3)]
    again = ReportRow(trial_id=1, search_id=1, step=20, at=5.0, metrics={"acc": 0.3}, objective=0.3)
    store.add_rows([again])  # the same report written again: nothing new
    rerun = ReportRow(trial_id=1, search_id=1, step=20, attempt=1, at=6.0, metrics={"acc": 0.4}, objective=0.4)
    store.add_rows([rerun])  # the step run again by the trial's next attempt
    assert [(r.step, r.attempt) for r in store.reports(1)] == [(0, 0), (10, 0), (20, 0), (20, 1)]
    assert store.curves(1, 100).trials["1"] == [(0, 0.1), (10, 0.2), (20, 0.4)]


def assert_tags_and_notes_on_upgrade(url: str) -> None:
    """A database at the revision before tags and notes, holding two searches, is upgraded: they have no
    tags, no notes and no idle time; tags and notes set then are read back, and the list filters by a
    tag exactly (not by a part of one, nor by another case)."""
    engine = make_engine(url)
    upgrade(engine, "0009_lineage")
    with engine.begin() as c:
        for name in ("a", "b"):
            c.execute(text("INSERT INTO search (name, spec, status, created_at, reached, trials_created, owner) "
                           "VALUES (:n, '{}', 'completed', 1, false, 0, 'admin')"), {"n": name})  # fmt: skip
    assert upgrade(engine) == ["0010_search_tags_notes"]
    store = Store(url, secret=b"s")
    assert schema_differences(store.engine) == []
    a, b = (store.search_out(i) for i in (1, 2))
    assert (a.tags, a.notes, store.search(1).idle_seconds) == ([], None, 0.0)
    store.patch_search(1, SearchPatch(tags=["bert", "lr-sweep", "bert"], notes="first try"))
    store.patch_search(2, SearchPatch(tags=["bert-large"]))
    assert (store.search_out(1).tags, store.search_out(1).notes) == (["bert", "lr-sweep"], "first try")
    assert store.search_out(2).tags == ["bert-large"] and store.search_out(2).notes is None
    assert [(s.id, s.tags) for s in store.search_page(0, 10, tag="bert")[0]] == [(1, ["bert", "lr-sweep"])]
    assert store.search_page(0, 10, tag="bert")[1] == 1
    assert store.search_page(0, 10, tag="BERT")[1] == 0 and store.search_page(0, 10, tag="ber")[1] == 0
    assert store.search_page(0, 10, tag="bert-large", status="completed")[1] == 1
    store.patch_search(1, SearchPatch(notes=""))  # tags left out stay; empty notes go
    assert (store.search_out(1).tags, store.search_out(1).notes) == (["bert", "lr-sweep"], None)
