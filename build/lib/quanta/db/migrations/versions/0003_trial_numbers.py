"""A trial's number is unique in its search: the index `uq_trial_search_number`, where it is missing.

Revision ID: 0003_trial_numbers
Revises: 0002_older_columns
Create Date: 2026-11-29

A database that two controllers once wrote may hold duplicate numbers: the later rows of each duplicate
get fresh numbers after the search's highest (their reports and checkpoints follow them: those are keyed
by trial id), and the search's `trials_created` counts them.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

revision = "0003_trial_numbers"
down_revision = "0002_older_columns"
branch_labels = None
depends_on = None

log = logging.getLogger("quanta.db")

INDEX = "uq_trial_search_number"


def upgrade() -> None:
    conn = op.get_bind()
    if any(ix["name"] == INDEX for ix in sa.inspect(conn).get_indexes("trial")):
        return
    rows = conn.execute(sa.text("SELECT id, search_id, number FROM trial ORDER BY search_id, number, id")).all()
    top: dict[int, int] = {}
    for _, search_id, number in rows:
        top[search_id] = max(top.get(search_id, -1), number)
    seen: set[tuple[int, int]] = set()
    moved = 0
    for trial_id, search_id, number in rows:
        if (search_id, number) not in seen:
            seen.add((search_id, number))
            continue
        top[search_id] += 1
        conn.execute(sa.text("UPDATE trial SET number = :n WHERE id = :id"), {"n": top[search_id], "id": trial_id})
        conn.execute(
            sa.text("UPDATE search SET trials_created = :n WHERE id = :id AND trials_created < :n"),
            {"n": top[search_id] + 1, "id": search_id},
        )
        moved += 1
    if moved:
        log.warning("database: %d trials shared a number with another of their search: renumbered", moved)
    op.create_index(INDEX, "trial", ["search_id", "number"], unique=True)


def downgrade() -> None:
    raise NotImplementedError("Quanta's migrations go forward only: restore a backup to go back")
