"""The schema as the last release without versioned migrations left it (commit 7af90f3).

Revision ID: 0001_baseline
Revises:
Create Date: 2026-11-29

On an empty database it creates every table. On a database that release (or an earlier one) wrote,
which has no `alembic_version`, it creates only the tables missing there (distributed mode's tables, for
one, were created by the first `DbCluster` only) and leaves existing ones and their rows as they are: the
next revisions bring those up to this shape.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_baseline"
down_revision = None
branch_labels = None
depends_on = None


def _tables() -> list[tuple[str, list[sa.schema.SchemaItem], list[tuple[str, list[str], bool]]]]:
    """(table, columns and constraints, [(index, columns, unique)]) in creation order."""
    s, i, f, js, b, tx = sa.String, sa.Integer, sa.Float, sa.JSON, sa.Boolean, sa.Text

    def c(name: str, type_: type[sa.types.TypeEngine], null: bool = False) -> sa.Column:
        return sa.Column(name, type_(), nullable=null)

    return [
        ("users", [c("id", i), c("name", s), c("role", s), c("weight", f), c("max_alive_trials", i),
                   c("max_devices", i), c("created_at", f), sa.PrimaryKeyConstraint("id")],
         [("ix_users_name", ["name"], True)]),
        ("search", [c("id", i), c("name", s), c("spec", js), c("status", s), c("created_at", f),
                    c("started_at", f, True), c("finished_at", f, True), c("best_trial_id", i, True),
                    c("best_metric", f, True), c("best_params", js, True), c("reached", b),
                    c("reached_at", f, True), c("seconds_to_target", f, True), c("trials_created", i),
                    c("command", s, True), c("error", tx, True), c("owner", s), c("waiting", s, True),
                    sa.PrimaryKeyConstraint("id")],
         [("ix_search_command", ["command"], False), ("ix_search_owner", ["owner"], False),
          ("ix_search_status", ["status"], False)]),
        ("trial", [c("id", i), c("search_id", i), c("number", i), c("params", js), c("vals", js), c("status", s),
                   c("steps", i), c("metric", f, True), c("best_metric", f, True), c("device_seconds", f),
                   c("retries", i), c("devices", s), c("checkpoint_step", i, True), c("error", tx, True),
                   c("reason", tx, True), c("created_at", f), c("started_at", f, True), c("finished_at", f, True),
                   c("priority", f), c("p_reach", f, True), c("command", s, True),
                   sa.ForeignKeyConstraint(["search_id"], ["search.id"]), sa.PrimaryKeyConstraint("id")],
         [("ix_trial_command", ["command"], False), ("ix_trial_search_id", ["search_id"], False),
          ("ix_trial_status", ["status"], False), ("uq_trial_search_number", ["search_id", "number"], True)]),
        ("report", [c("id", i), c("trial_id", i), c("search_id", i), c("step", i), c("at", f), c("metrics", js),
                    c("objective", f, True), c("non_finite", js, True),
                    sa.ForeignKeyConstraint(["trial_id"], ["trial.id"]), sa.PrimaryKeyConstraint("id")],
         [("ix_report_search_id", ["search_id"], False), ("ix_report_trial_id", ["trial_id"], False)]),
        ("quantum", [c("id", i), c("trial_id", i), c("search_id", i), c("devices", s), c("started_at", f),
                     c("ended_at", f), c("steps", i), c("rate", f), c("rss_mb", f), c("packed_with", s),
                     sa.PrimaryKeyConstraint("id")],
         [("ix_quantum_search_id", ["search_id"], False), ("ix_quantum_trial_id", ["trial_id"], False)]),
        ("latency", [c("id", i), c("trial_id", i), c("kind", s), c("ms", f), c("at", f),
                     sa.PrimaryKeyConstraint("id")],
         [("ix_latency_kind", ["kind"], False), ("ix_latency_trial_id", ["trial_id"], False)]),
        ("pair", [c("id", i), c("trial_a", i), c("trial_b", i), c("rate_a", f), c("rate_b", f), c("at", f),
                  sa.PrimaryKeyConstraint("id")],
         [("ix_pair_trial_a", ["trial_a"], False), ("ix_pair_trial_b", ["trial_b"], False)]),
        ("intent", [c("id", i), c("round_no", i), c("at", f), c("actions", js), sa.PrimaryKeyConstraint("id")],
         [("ix_intent_round_no", ["round_no"], False)]),
        ("controller", [c("id", i), c("round_no", i), c("policy", s, True), c("policy_state", js),
                        c("judge_state", js), sa.PrimaryKeyConstraint("id")], []),
        ("cluster_view", [c("id", i), c("at", f), c("round_no", i), c("devices", js), c("pairs", js),
                          c("notes", js), sa.PrimaryKeyConstraint("id")], []),
        ("warm_start", [c("search_id", i), c("items", js), sa.PrimaryKeyConstraint("search_id")], []),
        ("search_deletion", [c("search_id", i), c("requested_at", f), sa.PrimaryKeyConstraint("search_id")], []),
        ("token", [c("id", i), c("name", s), c("token_hash", s), c("created_at", f), c("user_name", s),
                   c("prefix", s), c("expires_at", f, True), c("revoked_at", f, True), c("scheme", s),
                   sa.PrimaryKeyConstraint("id")],
         [("ix_token_token_hash", ["token_hash"], True), ("ix_token_user_name", ["user_name"], False)]),
        # distributed mode (app/db/cluster.py)
        ("node", [c("name", s), c("incarnation", s), c("devices", js), c("beat", i), c("heartbeat_at", f),
                  c("started_at", f), c("residency", js), c("seq", i), c("status", s),
                  sa.PrimaryKeyConstraint("name")], []),
        ("node_event", [c("id", i), c("node", s), c("seq", i), c("epoch", i), c("trial_id", i), c("kind", s),
                        c("data", js), sa.PrimaryKeyConstraint("id"),
                        sa.UniqueConstraint("node", "seq", name="uq_node_event_seq")],
         [("ix_node_event_node", ["node"], False), ("ix_node_event_trial_id", ["trial_id"], False)]),
        ("assignment", [c("trial_id", i), c("node", s), c("epoch", i), c("at", f),
                        sa.PrimaryKeyConstraint("trial_id")], []),
        ("event_cursor", [c("node", s), c("handled", i, True), c("returned", i, True),
                          sa.PrimaryKeyConstraint("node")], []),
        ("applied", [c("id", i), c("node", s), c("trial_id", i), c("round_no", i), c("at", f),
                     sa.PrimaryKeyConstraint("id"),
                     sa.UniqueConstraint("node", "trial_id", "round_no", name="uq_applied")], []),
    ]  # fmt: skip


def upgrade() -> None:
    have = set(sa.inspect(op.get_bind()).get_table_names())
    for name, items, indexes in _tables():
        if name in have:
            continue
        op.create_table(name, *items)
        for index, columns, unique in indexes:
            op.create_index(index, name, columns, unique=unique)


def downgrade() -> None:
    raise NotImplementedError("Quanta's migrations go forward only: restore a backup to go back")
