"""The schema's migrations on a real PostgreSQL (SQLite: tests/unit/test_migrations.py): a new database
gets exactly the models' tables; one written before revisions existed is brought to the newest with its
rows, its key/value controller state and its owners by id, by two processes at once without harm; ids
are never re-used (sequences)."""

from __future__ import annotations

import threading

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, text
from sqlmodel import SQLModel

from app.db.engine import make_engine
from app.db.migrate import current_revision, head_revision, upgrade
from app.db.models import ReportRow
from app.db.store import Store
from tests.conftest_services import PostgresServer


def schema_differences(engine: Engine) -> list:
    with engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)


def test_a_new_postgresql_database_gets_the_models_tables_and_never_reuses_ids(postgres: PostgresServer) -> None:
    store = Store(postgres.create_database(), secret=b"pg")
    assert current_revision(store.engine) == head_revision() and schema_differences(store.engine) == []
    carol = store.add_user("carol", 1.0).id
    token = store.create_token("carol", 1.0)
    newest = store.create_search("b", {}, 2.0, owner="carol")
    trial = store.add_trial(newest.id, 0, {}, {}, 2.0)
    store.add_rows([ReportRow(trial_id=trial.id, search_id=newest.id, step=1, at=2.0, metrics={}, objective=0.5)])
    report = store.search_reports(newest.id)[0]
    store.delete_search(newest.id)
    store.delete_user("carol", 3.0, force=True)
    assert store.add_user("dave", 4.0).id > carol
    again = store.create_search("c", {}, 4.0, owner="dave")
    t2 = store.add_trial(again.id, 0, {}, {}, 4.0)
    store.add_rows([ReportRow(trial_id=t2.id, search_id=again.id, step=1, at=4.0, metrics={}, objective=0.5)])
    assert again.id > newest.id and t2.id > trial.id and store.search_reports(again.id)[0].id > report.id
    assert store.create_token("dave", 5.0).id > token.id


def test_a_postgresql_database_written_before_revisions_is_upgraded_by_two_processes_at_once(
    postgres: PostgresServer,
) -> None:
    url = postgres.create_database()
    engine = make_engine(url)
    # The previous release's schema (the first revision's tables), unversioned, with its rows: a search of
    # a deleted carol and one of the carol who has the name now, and the key/value controller state.
    upgrade(engine, "0001_baseline")
    with engine.begin() as c:
        c.execute(text("DROP TABLE alembic_version"))
        c.execute(text("INSERT INTO users (name, role, weight, max_alive_trials, max_devices, created_at) "
                       "VALUES ('admin', 'admin', 1, 0, 0, 1), ('carol', 'member', 1, 0, 0, 50)"))  # fmt: skip
        for name, at in (("old carol's", 10.0), ("new carol's", 60.0)):
            c.execute(
                text("INSERT INTO search (name, spec, status, created_at, reached, trials_created, owner) "
                     "VALUES (:n, '{}', 'completed', :at, false, 0, 'carol')"), {"n": name, "at": at},
            )  # fmt: skip
        c.execute(text("CREATE TABLE controller_state (key VARCHAR PRIMARY KEY, value JSON NOT NULL)"))
        c.execute(text("""INSERT INTO controller_state VALUES ('controller', '{"round_no": 41}')"""))
    assert current_revision(engine) is None
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            results.append(upgrade(make_engine(url)))
        except BaseException as exc:  # noqa: BLE001  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and sorted(map(len, results)) == [0, 6]  # every revision, once
    store = Store(url, secret=b"pg")
    assert schema_differences(store.engine) == [] and store.round_no() == 41
    owners = {s.name: s.owner_id for s in store.searches()}
    assert owners == {"old carol's": None, "new carol's": store.user("carol").id}
    with store.engine.connect() as c:
        assert not c.execute(text("SELECT to_regclass('controller_state')")).scalar()
