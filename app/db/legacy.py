"""A database written by an earlier Quanta kept the controller's state as key/value rows in a table
`controller_state` ("controller" -> round number, "policy" -> policy state, "cluster" -> published
view, "cluster_cursor" -> distributed event cursor, "delete:<id>" -> deletion requests). Those now
live in typed tables (`controller`, `cluster_view`, `event_cursor`, `search_deletion`).

`import_controller_state` moves the old rows into the new tables once, when a store opens such a
database: the round counter must carry over (node agents ignore a round number they have applied),
and so must the event cursor (events would be handled twice) and pending deletions. Imported rows are
deleted from `controller_state`; the emptied table itself is left in place (drop it at will).

`add_missing_columns` adds the columns a table gained after a database was created (create_all only
creates missing tables): `controller.judge_state`, the judge's state saved beside the policy's;
`search.owner`, the user a search belongs to (searches stored before users existed belong to the first
admin, `FIRST_ADMIN`) and `search.waiting` (why the controller holds it); `report.non_finite`, what a
metric stored as null was (NaN, inf); the token's user, prefix, expiry, revocation and hash scheme
(tokens stored before belong to the first admin and are marked as unkeyed sha256 digests, re-keyed on
first use). `ensure_first_admin` creates that admin's `users` row when it is missing.
`trial.reason` says why a stopped or killed trial ended early.

`add_missing_indexes` adds the unique index on `trial (search_id, number)` to a database made before
it. A database that two controllers once wrote may hold duplicate numbers: the later rows of each
duplicate get fresh numbers after the search's highest (their reports and checkpoints follow them: those
are keyed by trial id), and the search's `trials_created` counts them.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, SQLModel

log = logging.getLogger("quanta.db")

LEGACY_TABLE = "controller_state"


# table -> (column, SQL type and default) added after the table was first created. The defaults are what
# the rows already there get (plain SQL, valid on SQLite and PostgreSQL).
_ADDED_COLUMNS = {
    "controller": [("judge_state", "JSON NOT NULL DEFAULT '{}'")],
    "search": [("owner", "VARCHAR NOT NULL DEFAULT 'admin'"), ("waiting", "VARCHAR")],
    "report": [("non_finite", "JSON")],
    "trial": [("reason", "TEXT")],
    # tokens stored before users: the first admin's, unkeyed sha256 digests (re-keyed on first use)
    "token": [
        ("user_name", "VARCHAR NOT NULL DEFAULT 'admin'"),
        ("prefix", "VARCHAR NOT NULL DEFAULT ''"),
        ("expires_at", "FLOAT"),
        ("revoked_at", "FLOAT"),
        ("scheme", "VARCHAR NOT NULL DEFAULT 'sha256'"),
    ],
}
# indexes a fresh database gets from the model (create_all), for the columns added above
_ADDED_INDEXES = {("search", "owner"): "ix_search_owner", ("token", "user_name"): "ix_token_user_name"}


def add_missing_columns(engine: Engine) -> list[str]:
    """Add the columns of `_ADDED_COLUMNS` a database lacks; returns them as ``table.column``."""
    insp = inspect(engine)
    added = []
    for table, columns in _ADDED_COLUMNS.items():
        if not insp.has_table(table):
            continue
        have = {c["name"] for c in insp.get_columns(table)}
        for name, ddl in columns:
            if name not in have:
                with engine.begin() as conn:
                    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {name} {ddl}"))
                added.append(f"{table}.{name}")
                log.info("database: added column %s.%s", table, name)
            index = _ADDED_INDEXES.get((table, name))
            if index:
                with engine.begin() as conn:
                    conn.execute(text(f"CREATE INDEX IF NOT EXISTS {index} ON {table} ({name})"))
    return added


def ensure_first_admin(engine: Engine, at: float) -> None:
    """Create the first admin's user row (`FIRST_ADMIN`) unless it exists; safe when two processes
    open the same database at once (the name is unique: the second insert is dropped)."""
    from sqlmodel import select

    from app.db.models import FIRST_ADMIN, UserRow

    with Session(engine) as s:
        if s.exec(select(UserRow.id).where(UserRow.name == FIRST_ADMIN)).first() is not None:
            return
        s.add(UserRow(name=FIRST_ADMIN, role="admin", created_at=at))
        try:
            s.commit()
        except IntegrityError:
            s.rollback()


def add_missing_indexes(engine: Engine) -> list[str]:
    """Create the unique trial-number index where it is missing (renumbering duplicates first); returns
    the indexes created."""
    from app.db.models import TRIAL_NUMBER_INDEX

    insp = inspect(engine)
    if not insp.has_table("trial"):
        return []
    if any(ix["name"] == TRIAL_NUMBER_INDEX for ix in insp.get_indexes("trial")):
        return []
    try:
        with engine.begin() as conn:
            renumbered = _renumber_duplicate_trials(conn)
            conn.execute(text(f"CREATE UNIQUE INDEX IF NOT EXISTS {TRIAL_NUMBER_INDEX} ON trial (search_id, number)"))
    except Exception:
        # Another process opening the same database may have created it meanwhile.
        if any(ix["name"] == TRIAL_NUMBER_INDEX for ix in inspect(engine).get_indexes("trial")):
            return []
        raise
    if renumbered:
        log.warning("database: %d trials shared a number with another of their search: renumbered", renumbered)
    log.info("database: added unique index trial(search_id, number)")
    return [TRIAL_NUMBER_INDEX]


def _renumber_duplicate_trials(conn: Any) -> int:
    rows = conn.execute(text("SELECT id, search_id, number FROM trial ORDER BY search_id, number, id")).all()
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
        conn.execute(text("UPDATE trial SET number = :n WHERE id = :id"), {"n": top[search_id], "id": trial_id})
        conn.execute(
            text("UPDATE search SET trials_created = :n WHERE id = :id AND trials_created < :n"),
            {"n": top[search_id] + 1, "id": search_id},
        )
        moved += 1
    return moved


def import_controller_state(engine: Engine) -> int:
    """Move the rows of a legacy `controller_state` table into the typed tables (which must exist).
    Returns how many rows were imported; 0, without writing, when there is no such table or it is empty."""
    if not inspect(engine).has_table(LEGACY_TABLE):
        return 0
    from app.db.cluster import EventCursorRow
    from app.db.models import ClusterView, ClusterViewRow, ControllerRow, SearchDeletionRow

    SQLModel.metadata.create_all(engine, tables=[EventCursorRow.__table__])  # type: ignore[attr-defined]  # SQLModel tables have it at run time
    with Session(engine) as s:
        rows = s.connection().execute(text(f"SELECT key, value FROM {LEGACY_TABLE}")).all()
        if not rows:
            return 0
        state: dict[str, Any] = {k: json.loads(v) if isinstance(v, str) else v for k, v in rows}
        ctl = s.get(ControllerRow, 1) or ControllerRow(id=1)
        if "controller" in state:
            ctl.round_no = max(ctl.round_no, int(state["controller"].get("round_no", 0)))
        if "policy" in state:
            ctl.policy = state["policy"].get("name")
            ctl.policy_state = dict(state["policy"].get("state") or {})
            # gandiva kept the judge's predictions in its own state then: they become the judge's state.
            trials = ctl.policy_state.get("trials")
            if isinstance(trials, dict):
                ctl.judge_state = {k: v["pred"] for k, v in trials.items() if isinstance(v, dict) and v.get("pred")}
        s.add(ctl)
        if "cluster" in state and s.get(ClusterViewRow, 1) is None:
            view = state["cluster"]
            row = ClusterViewRow(
                id=1,
                at=float(view.get("at") or 0.0),
                round_no=int(view.get("round_no") or 0),
                devices=list(view.get("devices") or []),
                pairs=list(view.get("pairs") or []),
                notes=list(view.get("notes") or []),
            )
            s.add(ClusterView.from_row(row).to_row())  # validates the old shape
        cursor = state.get("cluster_cursor") or {}
        for node in sorted({*cursor.get("handled", {}), *cursor.get("returned", {})}):
            if s.get(EventCursorRow, node) is None:
                handled, returned = cursor.get("handled", {}).get(node), cursor.get("returned", {}).get(node)
                s.add(
                    EventCursorRow(
                        node=node,
                        handled=None if handled is None else int(handled),
                        returned=None if returned is None else int(returned),
                    )
                )
        for key in state:
            sid = key.removeprefix("delete:")
            if key.startswith("delete:") and sid.isdigit() and s.get(SearchDeletionRow, int(sid)) is None:
                s.add(SearchDeletionRow(search_id=int(sid), requested_at=float(state[key].get("at") or 0.0)))
        s.connection().execute(text(f"DELETE FROM {LEGACY_TABLE}"))
        try:
            s.commit()
        except IntegrityError:  # another process opening the same database imported them first
            s.rollback()
            return 0
    log.info("imported %d rows of the legacy table %s into typed tables", len(rows), LEGACY_TABLE)
    return len(rows)
