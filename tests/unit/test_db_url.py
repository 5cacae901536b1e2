"""The one parser of database URLs (`quanta.db.url`): a SQLite URL's file without its query, in-memory
databases told apart from files and from other databases, and passwords masked in what is printed."""

from __future__ import annotations

import pytest

from quanta.db.engine import sqlite_path
from quanta.db.url import redact, sqlite_file


@pytest.mark.parametrize(
    ("url", "file"),
    [
        ("sqlite:///q.db", "q.db"),
        ("sqlite:////abs/q.db", "/abs/q.db"),
        ("sqlite:///q.db?timeout=5", "q.db"),
        ("sqlite://", ""),
        ("sqlite:///:memory:", ""),
        ("sqlite:///file::memory:?cache=shared", ""),
        ("postgresql://u:p@h/db", None),
    ],
)
def test_a_sqlite_urls_file_is_read_without_its_query(url, file):
    assert sqlite_file(url) == file
    assert sqlite_path(url) == (file or None)  # the engine's view: a file, or nothing to create


def test_a_password_is_masked_and_a_url_without_one_is_unchanged():
    assert redact("postgresql://quanta:s3cret@db:5432/quanta") == "postgresql://quanta:***@db:5432/quanta"
    assert redact("postgresql+psycopg://quanta@db/quanta") == "postgresql+psycopg://quanta@db/quanta"
    assert redact("sqlite:///q.db") == "sqlite:///q.db"
