"""The controller's state kept as key/value rows (`controller_state`) moves into the typed tables.

Revision ID: 0004_controller_state
Revises: 0003_trial_numbers
Create Date: 2026-11-29

An early Quanta kept the controller's state in `controller_state`: "controller" -> round number,
"policy" -> policy state, "cluster" -> published view, "cluster_cursor" -> distributed event cursor,
"delete:<id>" -> deletion requests. They now live in `controller`, `cluster_view`, `event_cursor` and
`search_deletion`. The round counter must carry over (node agents ignore a round number they have
applied), and so must the event cursor (events would be handled twice) and pending deletions. What a
typed table already holds wins, but for the round number (the higher one) and the policy's state. The
old table is dropped afterwards (a release that imported it left it empty).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0004_controller_state"
down_revision = "0003_trial_numbers"
branch_labels = None
depends_on = None

log = logging.getLogger("quanta.db")

LEGACY = "controller_state"

controller = sa.table(
    "controller",
    sa.column("id", sa.Integer),
    sa.column("round_no", sa.Integer),
    sa.column("policy", sa.String),
    sa.column("policy_state", sa.JSON),
    sa.column("judge_state", sa.JSON),
)
cluster_view = sa.table(
    "cluster_view",
    sa.column("id", sa.Integer),
    sa.column("at", sa.Float),
    sa.column("round_no", sa.Integer),
    sa.column("devices", sa.JSON),
    sa.column("pairs", sa.JSON),
    sa.column("notes", sa.JSON),
)
event_cursor = sa.table(
    "event_cursor", sa.column("node", sa.String), sa.column("handled", sa.Integer), sa.column("returned", sa.Integer)
)
search_deletion = sa.table("search_deletion", sa.column("search_id", sa.Integer), sa.column("requested_at", sa.Float))


def upgrade() -> None:
    conn = op.get_bind()
    if not sa.inspect(conn).has_table(LEGACY):
        return
    rows = conn.execute(sa.text(f"SELECT key, value FROM {LEGACY}")).all()
    state: dict[str, Any] = {k: json.loads(v) if isinstance(v, str) else v for k, v in rows}
    if state:
        _import(conn, state)
        log.info("imported %d rows of the legacy table %s into typed tables", len(rows), LEGACY)
    op.drop_table(LEGACY)


def _import(conn: sa.Connection, state: dict[str, Any]) -> None:
    old = conn.execute(sa.select(controller).where(controller.c.id == 1)).mappings().first()
    values = dict(old) if old else {"id": 1, "round_no": 0, "policy": None, "policy_state": {}, "judge_state": {}}
    if "controller" in state:
        values["round_no"] = max(values["round_no"], int(state["controller"].get("round_no", 0)))
    if "policy" in state:
        values["policy"] = state["policy"].get("name")
        values["policy_state"] = dict(state["policy"].get("state") or {})
        # gandiva kept the judge's predictions in its own state then: they become the judge's state.
        trials = values["policy_state"].get("trials")
        if isinstance(trials, dict):
            values["judge_state"] = {k: v["pred"] for k, v in trials.items() if isinstance(v, dict) and v.get("pred")}
    if old:
        conn.execute(controller.update().where(controller.c.id == 1).values(**values))
    else:
        conn.execute(controller.insert().values(**values))
    has_view = conn.execute(sa.select(cluster_view.c.id).where(cluster_view.c.id == 1)).first() is not None
    if "cluster" in state and not has_view:
        view = state["cluster"]
        conn.execute(
            cluster_view.insert().values(
                id=1,
                at=float(view.get("at") or 0.0),
                round_no=int(view.get("round_no") or 0),
                devices=list(view.get("devices") or []),
                pairs=list(view.get("pairs") or []),
                notes=list(view.get("notes") or []),
            )
        )
    cursor = state.get("cluster_cursor") or {}
    handled, returned = cursor.get("handled", {}), cursor.get("returned", {})
    have = set(conn.execute(sa.select(event_cursor.c.node)).scalars())
    for node in sorted({*handled, *returned} - have):
        h, r = handled.get(node), returned.get(node)
        conn.execute(
            event_cursor.insert().values(
                node=node, handled=None if h is None else int(h), returned=None if r is None else int(r)
            )
        )
    pending = set(conn.execute(sa.select(search_deletion.c.search_id)).scalars())
    for key, value in state.items():
        sid = key.removeprefix("delete:")
        if key.startswith("delete:") and sid.isdigit() and int(sid) not in pending:
            at = float(value.get("at") or 0.0)
            conn.execute(search_deletion.insert().values(search_id=int(sid), requested_at=at))


def downgrade() -> None:
    raise NotImplementedError("Quanta's migrations go forward only: restore a backup to go back")
