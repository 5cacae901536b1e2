"""The schema's migrations on a real PostgreSQL (SQLite: tests/unit/test_migrations.py): a new database
gets exactly the models' tables; one written before revisions existed is brought to the newest with its
rows, its key/value controller state and its owners by id, by two processes at once without harm; ids
are never re-used (sequences); reports stored twice are de-duplicated by the upgrade."""

from __future__ import annotations

from sqlalchemy import text

from quanta.db.engine import make_engine
from quanta.db.migrate import current_revision, head_revision, revisions_between, upgrade
from quanta.db.store import Store
from tests.conftest_services import PostgresServer
from tests.schema_checks import (
    assert_ids_never_reused,
    assert_reports_deduplicated_on_upgrade,
    assert_tags_and_notes_on_upgrade,
    schema_differences,
    upgrade_at_once,
)


def test_a_new_postgresql_database_gets_the_models_tables_and_never_reuses_ids(postgres: PostgresServer) -> None:
    store = Store(postgres.create_database(), secret=b"pg")
    assert current_revision(store.engine) == head_revision() and schema_differences(store.engine) == []
    assert_ids_never_reused(store)


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
    results = upgrade_at_once(lambda: make_engine(url))
    assert sorted(map(len, results)) == [0, len(revisions_between(None, head_revision()))]  # every revision, once
    store = Store(url, secret=b"pg")
    assert schema_differences(store.engine) == [] and store.round_no() == 41
    owners = {s.name: s.owner_id for s in store.searches()}
    assert owners == {"old carol's": None, "new carol's": store.user("carol").id}
    with store.engine.connect() as c:
        assert not c.execute(text("SELECT to_regclass('controller_state')")).scalar()


def test_reports_of_a_step_repeated_are_deduplicated_by_the_upgrade(postgres: PostgresServer) -> None:
    assert_reports_deduplicated_on_upgrade(postgres.create_database())


def test_searches_get_tags_and_notes_by_the_upgrade_and_filter_by_tag(postgres: PostgresServer) -> None:
    assert_tags_and_notes_on_upgrade(postgres.create_database())
