"""Ids of users, searches, trials, reports and tokens are never re-used.

Revision ID: 0006_ids_never_reused
Revises: 0005_owner_ids
Create Date: 2026-11-29

SQLite hands out the highest rowid plus one, so deleting the newest search gave its id to the next one
(with its URL, its checkpoint directory and another user's bookmarks); a table declared AUTOINCREMENT
never goes back (SQLite keeps the highest id in `sqlite_sequence`). SQLite cannot add that to a table, so
these tables are rebuilt (a copy with every row and index, then a rename), and each one's sequence is
set to the highest id any table still mentions, so that an id deleted before the upgrade but still named
elsewhere (a trial's node events, a search's quanta) is not handed out either. PostgreSQL's serial
columns draw from sequences, which never go back: nothing to do there.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_ids_never_reused"
down_revision = "0005_owner_ids"
branch_labels = None
depends_on = None

# table -> the (table, column) pairs that hold its ids
TABLES = {
    "users": [("search", "owner_id"), ("token", "user_id")],
    "search": [
        ("trial", "search_id"),
        ("report", "search_id"),
        ("quantum", "search_id"),
        ("warm_start", "search_id"),
        ("search_deletion", "search_id"),
    ],
    "trial": [
        ("search", "best_trial_id"),
        ("report", "trial_id"),
        ("quantum", "trial_id"),
        ("latency", "trial_id"),
        ("pair", "trial_a"),
        ("pair", "trial_b"),
        ("assignment", "trial_id"),
        ("node_event", "trial_id"),
        ("applied", "trial_id"),
    ],
    "report": [],
    "token": [],
}


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "sqlite":
        return
    for table, mentions in TABLES.items():
        with op.batch_alter_table(table, recreate="always", table_kwargs={"sqlite_autoincrement": True}):
            pass
        top = max(
            conn.execute(sa.text(f"SELECT coalesce(max({column}), 0) FROM {other}")).scalar_one()
            for other, column in [(table, "id"), *mentions]
        )
        if not top:
            continue
        conn.execute(sa.text("DELETE FROM sqlite_sequence WHERE name = :t"), {"t": table})
        conn.execute(sa.text("INSERT INTO sqlite_sequence (name, seq) VALUES (:t, :n)"), {"t": table, "n": top})


def downgrade() -> None:
    raise NotImplementedError("Quanta's migrations go forward only: restore a backup to go back")
