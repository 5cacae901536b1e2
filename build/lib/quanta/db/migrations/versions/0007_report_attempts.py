"""A report is stored once: the column `report.attempt` and the unique index on (trial, step, attempt).

Revision ID: 0007_report_attempts
Revises: 0006_ids_never_reused
Create Date: 2026-11-29

Before it, a trial that ran steps again after a restart (from an older checkpoint, or from the start when
it had none) stored those steps again, and readers showed them twice. Every row already stored is of
attempt 0 (which process made it was not recorded), so of the rows sharing a (trial, step) the first
stored is kept and the others are deleted before the index is made.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

revision = "0007_report_attempts"
down_revision = "0006_ids_never_reused"
branch_labels = None
depends_on = None

log = logging.getLogger("quanta.db")

INDEX = "uq_report_trial_step_attempt"


def upgrade() -> None:
    conn = op.get_bind()
    # ADD COLUMN in place on both (SQLite needs the default for a NOT NULL column; the table keeps its
    # AUTOINCREMENT, which a rebuild would have to carry over).
    op.add_column("report", sa.Column("attempt", sa.Integer(), nullable=False, server_default="0"))
    gone = conn.execute(
        sa.text(
            "DELETE FROM report WHERE EXISTS (SELECT 1 FROM report AS earlier WHERE earlier.trial_id = "
            "report.trial_id AND earlier.step = report.step AND earlier.id < report.id)"
        )
    ).rowcount
    if gone:
        log.warning("database: %d reports repeated a step their trial had reported: the first stored kept", gone)
    op.create_index(INDEX, "report", ["trial_id", "step", "attempt"], unique=True)


def downgrade() -> None:
    raise NotImplementedError("Quanta's migrations go forward only: restore a backup to go back")
