"""Lineage: a trial's parent and the step it forked at, its own step budget, fork requests and config changes.

Revision ID: 0009_lineage
Revises: 0008_search_health
Create Date: 2026-11-29

Adds `trial.parent_id` (indexed), `trial.fork_step` and `trial.max_steps` (all null for the trials
already stored: none of them was forked), and the tables `fork` (users' fork requests, the controller
carries them out) and `config_change` (a trial's mutable parameters changed at a step). The columns are
added in place on both databases (a rebuild of `trial` would have to carry its AUTOINCREMENT over).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_lineage"
down_revision = "0008_search_health"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("trial", sa.Column("parent_id", sa.Integer(), nullable=True))
    op.add_column("trial", sa.Column("fork_step", sa.Integer(), nullable=True))
    op.add_column("trial", sa.Column("max_steps", sa.Integer(), nullable=True))
    op.create_index("ix_trial_parent_id", "trial", ["parent_id"], unique=False)

    op.create_table(
        "fork",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("search_id", sa.Integer(), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=False),
        sa.Column("child_id", sa.Integer(), nullable=True),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("requested_at", sa.Float(), nullable=False),
        sa.Column("requested_by", sa.Integer(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_fork_parent_id", "fork", ["parent_id"], unique=False)
    op.create_index("ix_fork_search_id", "fork", ["search_id"], unique=False)
    op.create_index("ix_fork_status", "fork", ["status"], unique=False)

    op.create_table(
        "config_change",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("search_id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.Column("cause", sa.String(), nullable=False),
        sa.Column("source_id", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_config_change_search_id", "config_change", ["search_id"], unique=False)
    op.create_index("ix_config_change_trial_id", "config_change", ["trial_id"], unique=False)


def downgrade() -> None:
    raise NotImplementedError("Quanta's migrations go forward only: restore a backup to go back")
