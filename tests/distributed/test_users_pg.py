"""Users, owners and tokens on a real PostgreSQL: a fresh database, and one written before users existed
(its searches and tokens migrate: owner and user become the first admin, the token is re-keyed on first
use)."""

from __future__ import annotations

import psycopg

from quanta.db.errors import Conflict
from quanta.db.models import FIRST_ADMIN
from quanta.db.searches import Owner
from quanta.db.store import Store
from quanta.db.tokens import legacy_digest, visible_prefix
from tests.conftest_services import PostgresServer


def test_users_and_tokens_on_postgresql(postgres: PostgresServer) -> None:
    store = Store(postgres.create_database(), secret=b"pg-secret")
    store.add_user("bob", 1.0, weight=3.0, max_devices=2)
    assert store.user_weights() == {FIRST_ADMIN: 1.0, "bob": 3.0}
    try:
        store.add_user("bob", 2.0)
        raise AssertionError("a second bob was stored")
    except Conflict:
        pass
    sid = store.create_search("s", {}, 1.0, owner="bob").id
    bob = store.user("bob").id
    assert store.search_owner(sid) == Owner(bob, "bob") and store.search_page(0, 10, owner_id=bob)[1] == 1
    new = store.create_token("bob", 1.0, expires_at=100.0)
    assert store.authenticate(new.token, 50.0).name == "bob" and store.authenticate(new.token, 100.0) is None
    other = store.create_token("bob", 1.0)
    store.revoke_token(other.prefix, 2.0)
    assert store.authenticate(other.token, 3.0) is None
    assert store.delete_user("bob", 4.0, force=True) == [sid]
    assert store.search(sid).status == "stopped" and store.tokens("bob", 5.0) == []


def test_a_postgresql_database_from_before_users_migrates(postgres: PostgresServer) -> None:
    url = postgres.create_database()
    token = "qnt_older"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE search (id SERIAL PRIMARY KEY, name VARCHAR NOT NULL, spec JSON NOT NULL, "
            "status VARCHAR NOT NULL, created_at FLOAT NOT NULL, started_at FLOAT, finished_at FLOAT, "
            "best_trial_id INTEGER, best_metric FLOAT, best_params JSON, reached BOOLEAN NOT NULL, "
            "reached_at FLOAT, seconds_to_target FLOAT, trials_created INTEGER NOT NULL, command VARCHAR, error TEXT)"
        )
        conn.execute(
            "INSERT INTO search (name, spec, status, created_at, reached, trials_created) "
            "VALUES ('old', '{}', 'completed', 1.0, false, 0)"
        )
        conn.execute(
            "CREATE TABLE token (id SERIAL PRIMARY KEY, name VARCHAR NOT NULL, token_hash VARCHAR NOT NULL UNIQUE, "
            "created_at FLOAT NOT NULL)"
        )
        conn.execute(
            "INSERT INTO token (name, token_hash, created_at) VALUES ('serve', %s, 1.0)", (legacy_digest(token),)
        )
    store = Store(url, secret=b"pg-secret")
    assert store.search(1).owner == FIRST_ADMIN and store.search_out(1).waiting is None
    assert store.authenticate(token, 2.0).name == FIRST_ADMIN
    assert [(t.user, t.prefix) for t in store.tokens(None, 3.0)] == [(FIRST_ADMIN, visible_prefix(token))]
    Store(url, secret=b"pg-secret")  # reopened: nothing added twice
    assert [u.name for u in store.users()] == [FIRST_ADMIN]
