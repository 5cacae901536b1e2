"""Columns that tables gained before the schema was versioned, added where a database lacks them.

Revision ID: 0002_older_columns
Revises: 0001_baseline
Create Date: 2026-11-29

`controller.judge_state` (the judge's state saved beside the policy's); `search.owner` (searches stored
before users existed belong to the first admin, "admin") and `search.waiting` (why the controller holds
it); `report.non_finite` (what a metric stored as null was: NaN, inf); `trial.reason` (why a stopped or
killed trial ended early); the token's user, prefix, expiry, revocation and hash scheme (tokens stored
before users belong to the first admin and are marked as unkeyed sha256 digests, re-keyed on first use,
app/db/tokens.py). The defaults are what the rows already there get.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

revision = "0002_older_columns"
down_revision = "0001_baseline"
branch_labels = None
depends_on = None

log = logging.getLogger("quanta.db")

# table -> (column, SQL type and default), plain SQL valid on SQLite and PostgreSQL
ADDED = {
    "controller": [("judge_state", "JSON NOT NULL DEFAULT '{}'")],
    "search": [("owner", "VARCHAR NOT NULL DEFAULT 'admin'"), ("waiting", "VARCHAR")],
    "report": [("non_finite", "JSON")],
    "trial": [("reason", "TEXT")],
    "token": [
        ("user_name", "VARCHAR NOT NULL DEFAULT 'admin'"),
        ("prefix", "VARCHAR NOT NULL DEFAULT ''"),
        ("expires_at", "FLOAT"),
        ("revoked_at", "FLOAT"),
        ("scheme", "VARCHAR NOT NULL DEFAULT 'sha256'"),
    ],
}
# the indexes a new database has on two of those columns
INDEXES = {("search", "owner"): "ix_search_owner", ("token", "user_name"): "ix_token_user_name"}


def upgrade() -> None:
    insp = sa.inspect(op.get_bind())
    for table, columns in ADDED.items():
        have = {c["name"] for c in insp.get_columns(table)}
        indexes = {ix["name"] for ix in insp.get_indexes(table)}
        for name, ddl in columns:
            if name not in have:
                op.execute(f"ALTER TABLE {table} ADD COLUMN {name} {ddl}")
                log.info("database: added column %s.%s", table, name)
            index = INDEXES.get((table, name))
            if index and index not in indexes:
                op.create_index(index, table, [name])


def downgrade() -> None:
    raise NotImplementedError("Quanta's migrations go forward only: restore a backup to go back")
