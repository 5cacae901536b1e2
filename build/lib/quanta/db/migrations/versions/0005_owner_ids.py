"""Searches and tokens belong to a user by id, not by name.

Revision ID: 0005_owner_ids
Revises: 0004_controller_state
Create Date: 2026-11-29

A name can be given to a new user once the first of that name is deleted; an id is never given twice
(0006). `search.owner_id` and `token.user_id` are filled from the names stored so far, matching only the
user who existed when the row was written: a search or token older than the current user of its name
was the deleted namesake's, and keeps no owner (no member can own it; an admin still sees it). Rows of
the first admin ("admin", who cannot be deleted) are theirs whatever their age: searches and tokens from
before users existed were given that name. The names stay in `search.owner` and `token.user_name`, for
display. The first admin's row is created here when missing, so that those rows find it.
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0005_owner_ids"
down_revision = "0004_controller_state"
branch_labels = None
depends_on = None

FIRST_ADMIN = "admin"


def upgrade() -> None:
    conn = op.get_bind()
    if conn.execute(sa.text("SELECT id FROM users WHERE name = :n"), {"n": FIRST_ADMIN}).first() is None:
        conn.execute(
            sa.text(
                "INSERT INTO users (name, role, weight, max_alive_trials, max_devices, created_at) "
                "VALUES (:n, 'admin', 1.0, 0, 0, :at)"
            ),
            {"n": FIRST_ADMIN, "at": time.time()},
        )
    op.add_column("search", sa.Column("owner_id", sa.Integer(), nullable=True))
    op.create_index("ix_search_owner_id", "search", ["owner_id"])
    op.add_column("token", sa.Column("user_id", sa.Integer(), nullable=True))
    op.create_index("ix_token_user_id", "token", ["user_id"])
    for table, id_column, name_column in (("search", "owner_id", "owner"), ("token", "user_id", "user_name")):
        conn.execute(
            sa.text(
                f"UPDATE {table} SET {id_column} = (SELECT u.id FROM users u WHERE u.name = {table}.{name_column} "
                f"AND (u.name = :admin OR u.created_at <= {table}.created_at))"
            ),
            {"admin": FIRST_ADMIN},
        )


def downgrade() -> None:
    raise NotImplementedError("Quanta's migrations go forward only: restore a backup to go back")
