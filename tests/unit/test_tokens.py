"""API tokens at rest and in use (app/db/tokens.py, app/db/secret.py): keyed hashes under the server
secret, expiry, revocation by id or prefix, re-keying of an older database's unkeyed digests, deleting a
user, and the private modes of the database and secret files."""

from __future__ import annotations

import hashlib
import stat

import pytest
from sqlalchemy import create_engine, text

from quanta.db.errors import Conflict
from quanta.db.models import FIRST_ADMIN, TokenRow
from quanta.db.secret import ENV, secret_path, server_secret
from quanta.db.store import Store
from quanta.db.tokens import keyed_digest, legacy_digest, visible_prefix
from quanta.status import SearchStatus


@pytest.fixture
def no_env_secret(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


@pytest.fixture
def store(tmp_path, no_env_secret) -> Store:
    return Store(f"sqlite:///{tmp_path / 'q.db'}")


def _rows(store: Store) -> list[TokenRow]:
    from sqlmodel import select

    with store.session() as s:
        return list(s.exec(select(TokenRow).order_by(TokenRow.id)))


def test_a_token_is_stored_as_a_keyed_hash_and_names_its_user(store):
    store.add_user("bob", 1.0)
    new = store.create_token("bob", 2.0, name="laptop")
    assert new.token.startswith("qnt_") and new.prefix == new.token[:10] and new.user == "bob" and new.active
    [row] = _rows(store)
    assert row.token_hash == keyed_digest(store.token_secret(), new.token)
    assert row.token_hash != hashlib.sha256(new.token.encode()).hexdigest()  # not the unkeyed digest
    assert new.token not in {row.token_hash, row.prefix, row.name}
    assert store.authenticate(new.token, 3.0).name == "bob"
    assert store.authenticate(new.token + "x", 3.0) is None and store.authenticate("", 3.0) is None
    # Another secret (a copy of the database elsewhere) makes the stored hashes useless.
    other = Store(store.url, secret=b"another secret")
    assert other.authenticate(new.token, 3.0) is None
    with pytest.raises(KeyError):
        store.create_token("nobody", 2.0)
    assert len(_rows(store)) == 1  # nothing stored for the unknown user


def test_expiry_and_revocation(store):
    store.add_user("bob", 0.0)
    short = store.create_token("bob", 100.0, expires_at=160.0)
    keep = store.create_token("bob", 100.0)
    assert store.authenticate(short.token, 159.9).name == "bob"
    assert store.authenticate(short.token, 160.0) is None  # expired
    listed = {t.id: t for t in store.tokens("bob", 200.0)}
    assert not listed[short.id].active and listed[short.id].revoked_at is None and listed[keep.id].active
    assert store.revoke_token(str(keep.id), 201.0).revoked_at == 201.0
    assert store.authenticate(keep.token, 202.0) is None
    assert store.revoke_token(str(keep.id), 300.0).revoked_at == 201.0  # revoking again changes nothing
    third = store.create_token("bob", 400.0)
    assert store.revoke_token(third.prefix[:8], 401.0).id == third.id  # by prefix
    fourth = store.create_token("bob", 500.0)
    assert store.revoke_token(fourth.token, 501.0).id == fourth.id  # by the token itself
    with pytest.raises(KeyError):
        store.revoke_token("qnt_doesnotexist", 1.0)
    with pytest.raises(KeyError):
        store.revoke_token("99999", 1.0)
    with pytest.raises(KeyError):
        store.revoke_token("qnt_", 1.0)  # too short to be a prefix


def test_a_prefix_that_matches_several_tokens_revokes_none(store):
    a, b = store.create_token(FIRST_ADMIN, 0.0), store.create_token(FIRST_ADMIN, 0.0)
    with store.session() as s:  # the shown characters are random: make two collide on purpose
        s.execute(text("UPDATE token SET prefix = 'qnt_same' || id"))
        s.commit()
    with pytest.raises(Conflict, match="matches 2 tokens"):
        store.revoke_token("qnt_same", 1.0)
    assert store.authenticate(a.token, 2.0) is not None and store.authenticate(b.token, 2.0) is not None
    assert store.revoke_token(f"qnt_same{b.id}", 3.0).id == b.id


def test_a_token_whose_user_is_deleted_stops_working_and_deleting_checks_searches(store):
    store.add_user("bob", 0.0)
    tok = store.create_token("bob", 0.0)
    queued = store.create_search("q", {}, 1.0, owner="bob")
    running = store.create_search("r", {}, 1.0, owner="bob")
    store.update_search(running.id, status=SearchStatus.RUNNING, started_at=2.0)
    done = store.create_search("d", {}, 1.0, owner="bob")
    store.update_search(done.id, status=SearchStatus.COMPLETED)
    with pytest.raises(Conflict, match="active searches"):
        store.delete_user("bob", 3.0)
    assert store.user("bob") is not None and store.authenticate(tok.token, 3.0) is not None  # nothing changed
    assert store.search(queued.id).status == SearchStatus.QUEUED
    assert sorted(store.delete_user("bob", 4.0, force=True)) == [queued.id, running.id]
    assert store.user("bob") is None and store.authenticate(tok.token, 5.0) is None
    assert store.tokens("bob", 5.0) == []
    assert store.search(queued.id).status == SearchStatus.STOPPED  # never started: stopped at once
    assert store.search(running.id).command == "stop"  # the controller stops it at its next tick
    assert store.search(done.id).status == SearchStatus.COMPLETED and store.search(done.id).owner == "bob"
    with pytest.raises(KeyError):
        store.delete_user("bob", 6.0)
    with pytest.raises(Conflict, match="first admin"):
        store.delete_user(FIRST_ADMIN, 6.0)
    with pytest.raises(Conflict, match="first admin"):
        store.update_user(FIRST_ADMIN, role="member")


def test_an_older_databases_unkeyed_token_keeps_working_and_is_rekeyed_on_first_use(tmp_path, no_env_secret):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    token = "qnt_from-an-older-quanta"
    with create_engine(url).begin() as c:  # the token table as it was: name, unkeyed sha256, created_at
        c.execute(text("CREATE TABLE token (id INTEGER PRIMARY KEY, name VARCHAR NOT NULL, "
                       "token_hash VARCHAR NOT NULL UNIQUE, created_at FLOAT NOT NULL)"))  # fmt: skip
        c.execute(text("INSERT INTO token VALUES (1, 'serve', :h, 1.0)"), {"h": legacy_digest(token)})
    store = Store(url)
    [row] = _rows(store)
    assert (row.user_name, row.scheme, row.prefix) == (FIRST_ADMIN, "sha256", "")
    assert store.authenticate(token, 2.0).name == FIRST_ADMIN
    [row] = _rows(store)
    assert row.scheme == "hmac" and row.token_hash == keyed_digest(store.token_secret(), token)
    assert row.prefix == visible_prefix(token) == token[:6]  # a quarter of a short token at most
    assert store.authenticate(token, 3.0).name == FIRST_ADMIN  # by its keyed hash now
    # A token given again (QUANTA_TOKEN at each start) whose unkeyed digest is stored is re-keyed, not doubled.
    # (Its row as the migrations leave an older database's: the first admin's, by name and by id.)
    other_old = "qnt_also-older"
    with store.session() as s:
        s.execute(
            text("INSERT INTO token (name, token_hash, created_at, user_name, user_id, prefix, scheme) "
                 "VALUES ('env', :h, 1.0, 'admin', (SELECT id FROM users WHERE name = 'admin'), '', 'sha256')"),
            {"h": legacy_digest(other_old)},
        )  # fmt: skip
        s.commit()
    again = store.add_token(FIRST_ADMIN, other_old, 4.0, name="QUANTA_TOKEN")
    assert again.scheme == "hmac" and again.name == "env" and again.prefix == visible_prefix(other_old)
    assert [r.scheme for r in _rows(store)] == ["hmac", "hmac"]
    assert store.authenticate(other_old, 5.0).name == FIRST_ADMIN
    assert store.authenticate("qnt_other", 3.0) is None
    # An unkeyed digest is honoured only for rows marked as such: a keyed row's sha256 twin is not.
    fresh = store.create_token(FIRST_ADMIN, 4.0)
    with store.session() as s:
        s.execute(
            text("UPDATE token SET token_hash = :h WHERE id = :i"), {"h": legacy_digest(fresh.token), "i": fresh.id}
        )
        s.commit()
    assert store.authenticate(fresh.token, 5.0) is None


def test_the_secret_comes_from_the_environment_or_a_private_file_beside_the_database(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    url = f"sqlite:///{tmp_path / 'db' / 'q.db'}"
    assert secret_path(url) == tmp_path / "db" / "q.db.secret"
    Store(url)  # opening a database writes no secret: only tokens need one
    assert not secret_path(url).exists()
    first = server_secret(url)
    assert len(first) == 64 and stat.S_IMODE(secret_path(url).stat().st_mode) == 0o600
    assert server_secret(url) == first  # created once
    monkeypatch.setenv(ENV, "from-env")
    assert server_secret(url) == b"from-env"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert secret_path("postgresql://u@h/db") == tmp_path / "state" / "quanta" / "secret"


def test_a_new_sqlite_database_file_is_private(tmp_path, no_env_secret):
    path = tmp_path / "fresh.db"
    store = Store(f"sqlite:///{path}")
    store.create_token(FIRST_ADMIN, 1.0)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    wal = tmp_path / "fresh.db-wal"
    if wal.exists():  # SQLite gives its log the database file's mode
        assert stat.S_IMODE(wal.stat().st_mode) & 0o077 == 0


def test_a_tokens_visible_prefix_is_at_most_a_quarter_of_it_and_ten_characters(store):
    from quanta.db.tokens import SHOWN

    assert visible_prefix("qnt_" + "a" * 43) == "qnt_aaaaaa" and SHOWN == 10  # 36 of a made token's 256 bits
    for n in (8, 16, 20, 32, 40, 100):
        token = "t" * n
        assert len(visible_prefix(token)) == min(SHOWN, n // 4)
    short = "sixteen-chars-ab"  # stored before tokens had a minimum length: shown 4 characters, not 12
    row = store.add_token(FIRST_ADMIN, short, 1.0, name="QUANTA_TOKEN")
    assert row.prefix == "sixt" and [t.prefix for t in store.tokens(FIRST_ADMIN, 2.0)] == ["sixt"]
    made = store.create_token(FIRST_ADMIN, 3.0)
    assert store.revoke_token(made.token[:14], 4.0).id == made.id  # more of it than the prefix holds


def test_a_new_quanta_token_revokes_the_one_it_replaces(store):
    from quanta.api.auth import ensure_token

    old, new = "o" * 40, "n" * 40
    ensure_token(store, old)
    other = store.create_token(FIRST_ADMIN, 1.0, name="laptop")
    ensure_token(store, old)  # the same one at the next start: nothing changes
    assert store.authenticate(old, 2.0) is not None
    ensure_token(store, new)  # an operator replaced it (or it was shorter than the minimum)
    assert store.authenticate(old, 3.0) is None and store.authenticate(new, 3.0).name == FIRST_ADMIN
    assert store.authenticate(other.token, 3.0) is not None  # other tokens of the admin are left alone
