"""Issue 12 item 6: one controller per database. A leader lease (a PostgreSQL advisory lock, a file lock
for SQLite) refuses a second controller or makes it wait; queued searches are claimed by a conditional
update; a trial number is unique in its search, also in databases made before the constraint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from quanta.controller import Controller
from quanta.db.lease import ControllerLease, LeaseHeld
from quanta.db.migrate import upgrade
from quanta.db.models import TRIAL_NUMBER_INDEX
from quanta.db.store import Store
from quanta.sim.runtime import SimRuntime
from quanta.spec import parse_spec
from tests.conftest_services import PostgresServer, postgres_fixture

ROOT = Path(__file__).resolve().parents[2]

SPEC = {
    "name": "two-controllers",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"uniform": [0.001, 0.1]}},
    "metric": {"name": "loss", "goal": "minimize"},
    "budget": {"max_trials": 2, "max_steps": 10},
    "parallelism": 2,
}


postgres = pytest.fixture(scope="module", name="postgres")(postgres_fixture)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'quanta.db'}"
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.create_database()


def test_a_second_controller_is_refused_until_the_first_has_gone(db_url: str) -> None:
    first = ControllerLease(db_url)
    first.acquire()
    try:
        assert first.held()
        second = ControllerLease(db_url)
        with pytest.raises(LeaseHeld, match="another controller runs on database") as info:
            second.acquire()
        assert f"pid {os.getpid()}" in str(info.value)  # the holder is named
        assert not second.held()
    finally:
        first.release()
    second.acquire()  # the first has gone: the lease is free
    assert second.held()
    second.release()


def test_a_standby_takes_over_when_the_leader_goes(db_url: str) -> None:
    leader = ControllerLease(db_url)
    leader.acquire()
    standby = ControllerLease(db_url)
    got = threading.Event()

    def wait() -> None:
        standby.acquire(30.0, every_s=0.1)
        got.set()

    waiting = threading.Thread(target=wait)
    waiting.start()
    time.sleep(0.5)
    assert not got.is_set(), "the standby took the lease while the leader held it"
    leader.release()
    waiting.join(30)
    assert got.is_set() and standby.held()
    standby.release()


def test_a_lost_postgres_lease_is_taken_again_or_refused(postgres: PostgresServer) -> None:
    """The advisory lock lives as long as its connection: a dropped connection loses it. `ensure()` takes
    it again when it is free, and raises when another controller took it meanwhile."""
    url = postgres.create_database()
    lease = ControllerLease(url)
    lease.acquire()
    admin = create_engine(url.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT")

    def drop_lease_connection() -> None:
        with admin.connect() as conn:
            killed = conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name LIKE 'quanta-controller%' AND pid <> pg_backend_pid()"
                )
            ).all()
        assert killed, "no lease connection found"

    drop_lease_connection()
    assert not lease.held()
    lease.ensure()  # free: taken again
    assert lease.held()
    drop_lease_connection()
    other = ControllerLease(url)
    other.acquire()  # another controller was quicker
    with pytest.raises(LeaseHeld):
        lease.ensure()
    other.release()
    admin.dispose()


def test_only_one_store_claims_a_queued_search(db_url: str) -> None:
    a, b = Store(db_url), Store(db_url)
    row = a.create_search("s", parse_spec(SPEC).model_dump(mode="json"), 0.0)
    assert row.id is not None
    assert a.claim_search(row.id, 1.0) is True
    assert b.claim_search(row.id, 2.0) is False
    assert a.claim_search(row.id, 3.0) is False
    got = b.search(row.id)
    assert got is not None and got.status == "running" and got.started_at == 1.0


def test_two_controllers_without_the_lease_start_a_search_once(db_url: str) -> None:
    """What the issue saw (4 trial rows numbered 0, 0, 1, 1 for max_trials 2) cannot happen: the claim
    gives the queued search to one controller only."""
    store = Store(db_url)
    sid = store.create_search("s", parse_spec(SPEC).model_dump(mode="json"), 0.0).id
    one = Controller(Store(db_url), SimRuntime(1, 2, max_per_device=1))
    two = Controller(Store(db_url), SimRuntime(1, 2, max_per_device=1))
    one.book.sync(0.0)
    two.book.sync(0.0)
    assert sid is not None
    assert [t.number for t in store.trials(sid)] == [0, 1]
    assert one.search(sid) is not None and two.search(sid) is None


def test_a_duplicate_trial_number_is_refused(db_url: str) -> None:
    store = Store(db_url)
    sid = store.create_search("s", parse_spec(SPEC).model_dump(mode="json"), 0.0).id
    assert sid is not None
    store.add_trial(sid, 0, {}, {}, 0.0)
    with pytest.raises(IntegrityError):
        store.add_trial(sid, 0, {}, {}, 1.0)
    assert [t.number for t in store.trials(sid)] == [0]


def test_an_old_database_gets_the_index_and_its_duplicates_renumbered(db_url: str) -> None:
    """A database made before the constraint, holding the duplicates two controllers wrote: the tables of
    the last release without revisions (the first revision's), unversioned, without the index."""
    engine = create_engine(_sa(db_url))
    upgrade(engine, "0001_baseline")
    spec = json.dumps(parse_spec(SPEC).model_dump(mode="json"))
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE alembic_version"))
        conn.execute(text(f"DROP INDEX {TRIAL_NUMBER_INDEX}"))
        sid = conn.execute(
            text("INSERT INTO search (name, spec, status, created_at, reached, trials_created, owner) "
                 "VALUES ('s', :spec, 'running', 0, false, 2, 'admin') RETURNING id"), {"spec": spec},
        ).scalar_one()  # fmt: skip
        for number in (0, 0, 1, 1):
            conn.execute(
                text("INSERT INTO trial (search_id, number, params, vals, status, steps, device_seconds, retries, "
                     "devices, created_at, priority) VALUES (:s, :n, '{}', '{}', 'queued', 0, 0, 0, '', 0, 0)"),
                {"s": sid, "n": number},
            )  # fmt: skip
    engine.dispose()
    assert TRIAL_NUMBER_INDEX not in {ix["name"] for ix in inspect(create_engine(_sa(db_url))).get_indexes("trial")}

    reopened = Store(db_url)
    assert TRIAL_NUMBER_INDEX in {ix["name"] for ix in inspect(reopened.engine).get_indexes("trial")}
    trials = reopened.trials(sid)  # type: ignore[arg-type]
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]
    by_id = sorted(trials, key=lambda t: t.id or 0)
    assert [t.number for t in by_id] == [0, 2, 1, 3]  # the first of each pair keeps its number
    search = reopened.search(sid)  # type: ignore[arg-type]
    assert search is not None and search.trials_created == 4
    with pytest.raises(IntegrityError):
        reopened.add_trial(sid, 3, {}, {}, 0.0)  # type: ignore[arg-type]


def _sa(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


def test_quanta_run_refuses_a_database_another_controller_holds(tmp_path: Path) -> None:
    """`quanta run` in the folder where `quanta serve` runs used to be a second controller on its
    database; now it stops with a clear message and writes nothing."""
    db = tmp_path / "quanta.db"
    Store(f"sqlite:///{db}")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**SPEC, "config": {"steps": 10}}))
    with ControllerLease(f"sqlite:///{db}"):
        out = subprocess.run(
            [sys.executable, "-m", "quanta.cli", "run", str(spec), "--db", f"sqlite:///{db}", "--devices", "cpu:1"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert out.returncode == 2, out.stdout + out.stderr
    said = " ".join(out.stderr.split())  # the console wraps long lines
    assert "another controller runs on database" in said and "one controller per database" in said, said
    assert Store(f"sqlite:///{db}").searches() == []
