"""Resuming and tagging searches on a real PostgreSQL (SQLite: tests/unit/test_store_contract.py): a
resume's budget is raised once per request, also by requests at once (the row is locked first), and the
list filters on a tag exactly (PostgreSQL's own JSON functions)."""

from __future__ import annotations

from quanta.db.store import Store
from tests.conftest_services import PostgresServer
from tests.lifecycle_checks import assert_resumes_raise_the_budget_once_each, assert_tags_filter_exactly


def test_resumes_raise_the_budget_once_each_on_postgresql(postgres: PostgresServer) -> None:
    assert_resumes_raise_the_budget_once_each(Store(postgres.create_database(), secret=b"pg"))


def test_tags_filter_exactly_on_postgresql(postgres: PostgresServer) -> None:
    assert_tags_filter_exactly(Store(postgres.create_database(), secret=b"pg"))
