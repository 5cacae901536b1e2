"""The schema's migrations on SQLite (PostgreSQL: tests/distributed/test_migrations_pg.py): a database
written by the last release without revisions is upgraded with every row kept; the revisions build
exactly the tables the models declare; two processes upgrading at once migrate once; a failed upgrade
leaves the database as it was; ids are never re-used; reports stored twice are de-duplicated, the first
stored kept, and a report is stored once per (trial, step, attempt); `quanta db upgrade` and `quanta db
current`."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, text

from quanta.db.cluster import DbCluster
from quanta.db.migrate import (
    UnknownRevision,
    alembic_config,
    current_revision,
    head_revision,
    revisions_between,
    upgrade,
)
from quanta.db.models import FIRST_ADMIN
from quanta.db.store import Store
from tests.data.make_release_db import BOB_TOKEN, CAROL_TOKEN, SECRET, T0
from tests.schema_checks import (
    assert_ids_never_reused,
    assert_reports_deduplicated_on_upgrade,
    assert_tags_and_notes_on_upgrade,
    schema_differences,
    upgrade_at_once,
)

DATA = Path(__file__).resolve().parents[1] / "data"
RELEASE_DB = DATA / "release-before-migrations.db"


def release_copy(tmp_path: Path) -> str:
    path = tmp_path / "release.db"
    shutil.copy(RELEASE_DB, path)
    path.chmod(0o600)
    return f"sqlite:///{path}"


def sqlite_schema(url: str) -> list[tuple]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return sorted(conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall(), key=str)


def row_counts(url: str) -> dict[str, int]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {n: conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}


def test_a_database_of_the_previous_release_is_upgraded_with_every_row(tmp_path):
    url = release_copy(tmp_path)
    assert current_revision(create_engine(url)) is None  # unversioned, as that release left it
    store = Store(url, secret=SECRET)
    assert current_revision(store.engine) == head_revision()
    searches = {s.name: s for s in store.searches()}
    assert sorted(searches) == ["bob-search", "carol-again", "carol-search"]
    users = {u.name: u for u in store.users()}
    assert sorted(users) == sorted([FIRST_ADMIN, "bob", "carol"]) and users["bob"].weight == 2.0
    bob = searches["bob-search"]
    assert (bob.status, bob.owner, bob.best_metric) == ("completed", "bob", 0.91)
    trials = store.trials(bob.id)
    assert [(t.number, t.status, t.steps) for t in trials] == [(n, "completed", 20) for n in range(3)]
    assert [[r.step for r in store.reports(t.id)] for t in trials] == [[5, 10, 20]] * 3
    assert len(store.search_reports(bob.id)) == 9
    assert store.curves(bob.id, 100).trials[str(trials[0].id)][-1] == (20, 1.0)
    assert len(store.quanta(bob.id)) == 3 and len(store.latencies("park")) == 3 and len(store.pairs()) == 1
    # tokens still authenticate, and each belongs to its user by id
    assert store.authenticate(BOB_TOKEN, T0 + 100).name == "bob"
    assert store.authenticate(CAROL_TOKEN, T0 + 100).id == users["carol"].id
    assert [t.name for t in store.tokens("bob", T0 + 100)] == ["laptop"]
    # ownership by id: the deleted carol's search has no owner any more; the new carol's is hers
    assert bob.owner_id == users["bob"].id
    assert (searches["carol-search"].owner, searches["carol-search"].owner_id) == ("carol", None)
    assert searches["carol-again"].owner_id == users["carol"].id
    assert store.search_page(0, 10, owner_id=users["carol"].id)[1] == 1
    # the controller's state, a warm start, a pending deletion and distributed mode's tables
    assert store.round_no() == 17 and store.policy_state() == {"rungs": {"1": [1, 2]}}
    assert store.judge_state() == {"1": {"at": 20}} and store.cluster_view().devices[0].running == (1,)
    assert store.warm_start(searches["carol-again"].id) == [{"params": {"lr": 0.02}, "objective": 0.85}]
    assert store.pending_deletes() == [bob.id]
    cluster = DbCluster(engine=store.engine)
    assert [n.name for n in cluster.nodes()] == ["node-a"]
    assert cluster.load_cursor() == {"handled": {"node-a": 3}, "returned": {"node-a": 4}}
    # the upgraded schema is the models' schema, and the ids go on from the highest
    assert schema_differences(store.engine) == []
    newest = max(s.id for s in store.searches())
    assert store.create_search("after", {}, T0 + 200, owner="bob").id == newest + 1
    # reopened: nothing runs again
    assert upgrade(store.engine) == [] and len(Store(url, secret=SECRET).searches()) == 4


def test_the_revisions_build_exactly_the_tables_the_models_declare(tmp_path):
    """From an empty database through every revision (what a database of the previous release goes
    through) and by the shortcut an empty database takes (the models' tables, stamped): the same schema."""
    through = create_engine(f"sqlite:///{tmp_path / 'through.db'}")
    with through.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    assert current_revision(through) == head_revision() and schema_differences(through) == []
    url = f"sqlite:///{tmp_path / 'new.db'}"
    assert upgrade(url)[-1] == head_revision() and schema_differences(create_engine(url)) == []

    # what compare_metadata does not look at: the tables whose ids SQLite never re-uses
    def shape(u: str) -> list[tuple]:
        return sorted((kind, name, "AUTOINCREMENT" in (sql or "")) for kind, name, sql in sqlite_schema(u))

    assert shape(url) == shape(str(through.url))
    autoincrement = {name for _, name, autoinc in shape(url) if autoinc}
    assert autoincrement == {"users", "search", "trial", "report", "token", "fork", "config_change"}


def test_a_legacy_key_value_database_is_imported_by_its_revision_and_the_table_dropped(tmp_path):
    """The oldest layout: the controller's state as key/value rows, beside nothing else."""
    url = f"sqlite:///{tmp_path / 'kv.db'}"
    with create_engine(url).begin() as c:
        c.execute(text("CREATE TABLE controller_state (key VARCHAR PRIMARY KEY, value JSON NOT NULL)"))
        c.execute(text("""INSERT INTO controller_state VALUES ('controller', '{"round_no": 8}')"""))
        c.execute(text("""INSERT INTO controller_state VALUES ('delete:3', '{"at": 2.0}')"""))
    applied = upgrade(url)
    assert applied[0] == "0001_baseline" and "0004_controller_state" in applied and applied[-1] == head_revision()
    store = Store(url)
    assert store.round_no() == 8 and store.pending_deletes() == [3]
    assert "controller_state" not in row_counts(url) and schema_differences(store.engine) == []


def test_two_processes_opening_an_old_database_at_once_migrate_it_once(tmp_path):
    url = release_copy(tmp_path)
    before = row_counts(url)
    results = upgrade_at_once(lambda: create_engine(url, connect_args={"timeout": 30}))
    every = len(revisions_between(None, head_revision()))
    assert sorted(map(len, results)) == [0, every]  # one applied every revision; the other found them done
    after = row_counts(url)
    assert all(after[t] == n for t, n in before.items()) and after["alembic_version"] == 1


def test_a_failed_upgrade_leaves_the_database_as_it_was(tmp_path):
    url = release_copy(tmp_path)
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        conn.execute("CREATE INDEX ix_search_owner_id ON users (name)")  # the name a later revision needs
    schema, counts = sqlite_schema(url), row_counts(url)
    with pytest.raises(Exception, match="ix_search_owner_id"):
        Store(url, secret=SECRET)
    assert sqlite_schema(url) == schema and row_counts(url) == counts  # not half-migrated
    assert current_revision(create_engine(url)) is None


def test_a_database_a_newer_release_migrated_is_refused_with_the_reason(tmp_path):
    url = f"sqlite:///{tmp_path / 'newer.db'}"
    upgrade(url)
    with create_engine(url).begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = '0099_from_the_future'"))
    with pytest.raises(UnknownRevision, match="0099_from_the_future.*newer release"):
        Store(url)


def test_ids_are_never_reused_after_the_newest_row_is_deleted(tmp_path):
    """SQLite re-used the highest freed rowid: a deleted newest search's id went to the next search (and
    its trials', reports' and tokens' ids likewise; a deleted user's id to the next user)."""
    assert_ids_never_reused(Store(f"sqlite:///{tmp_path / 'q.db'}", secret=b"s"))


def test_reports_a_step_repeated_are_deduplicated_by_the_upgrade_keeping_the_first_stored(tmp_path):
    assert_reports_deduplicated_on_upgrade(f"sqlite:///{tmp_path / 'q.db'}")


def test_searches_get_tags_and_notes_by_the_upgrade_and_filter_by_tag(tmp_path):
    assert_tags_and_notes_on_upgrade(f"sqlite:///{tmp_path / 'q.db'}")


def test_quanta_db_upgrade_and_current(tmp_path):
    from typer.testing import CliRunner

    from quanta.cli import app as quanta

    url = release_copy(tmp_path)

    def run(*args: str, db: str = url):  # noqa: ANN202
        return CliRunner().invoke(quanta, ["db", *args, "--db", db])

    behind = run("current")
    assert behind.exit_code == 1 and "unversioned" in behind.stdout and head_revision() in behind.stdout
    done = run("upgrade")
    assert done.exit_code == 0 and "0001_baseline" in done.stdout and head_revision() in done.stdout
    now = run("current")
    assert now.exit_code == 0 and now.stdout.startswith(head_revision())
    assert "nothing to do" in run("upgrade").stdout
    missing = run("current", db=f"sqlite:///{tmp_path / 'none.db'}")
    assert missing.exit_code == 2 and "no database file" in missing.stderr
    assert not (tmp_path / "none.db").exists()
