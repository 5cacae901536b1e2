"""A search's tags and notes, and the time it spent ended before it was resumed.

Revision ID: 0010_search_tags_notes
Revises: 0009_lineage
Create Date: 2026-11-30

`search.tags` (a JSON list of short labels, `[]` for every search stored before) and `search.notes`
(free text, null) are what a user writes about a search (`PATCH /searches/{id}`). `search.idle_seconds`
is how long a search that ended was left ended before it was resumed (0 for every search stored before):
its time budget counts the time it ran, not those gaps.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_search_tags_notes"
down_revision = "0009_lineage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ADD COLUMN in place on both (SQLite needs the defaults for NOT NULL columns; the table keeps its
    # AUTOINCREMENT, which a rebuild would have to carry over).
    op.add_column("search", sa.Column("tags", sa.JSON(), nullable=False, server_default="[]"))
    op.add_column("search", sa.Column("notes", sa.Text(), nullable=True))
    op.add_column("search", sa.Column("idle_seconds", sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    raise NotImplementedError("Quanta's migrations go forward only: restore a backup to go back")
