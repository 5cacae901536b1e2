"""A search's warning and its trials' counts.

Revision ID: 0008_search_health
Revises: 0007_report_attempts
Create Date: 2026-11-30

`search.warning`: what the controller warns about while the search runs (its metric never reported).
`search.trial_counts`: how its trials stand (queued, running, parked, and the final states), as the
controller last stored them. Both are empty for the searches stored before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_search_health"
down_revision = "0007_report_attempts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("search", sa.Column("warning", sa.Text(), nullable=True))
    op.add_column("search", sa.Column("trial_counts", sa.JSON(), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("Quanta's migrations go forward only: restore a backup to go back")
