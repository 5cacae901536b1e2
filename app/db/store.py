"""`Store`: every read and write the controller and the API make, over SQLModel (the API's queries,
returning read models, are the `SearchQueries`, `TrialQueries` and `MonitoringQueries` parts, in
`quanta.db.searches`, `quanta.db.trials` and `quanta.db.monitoring`).

SQLite by default (a file in the working directory), PostgreSQL by URL. Each method is one short
transaction, so a crash between two calls leaves the database consistent, and a failed call leaves
nothing half-written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Table, bindparam, delete, insert, or_, tuple_, update
from sqlmodel import Session, col, select

from quanta.db.engine import DEFAULT_URL, make_engine
from quanta.db.lineage import LineageQueries
from quanta.db.migrate import upgrade
from quanta.db.models import (
    FIRST_ADMIN,
    ClusterView,
    ClusterViewRow,
    ConfigChangeRow,
    ControllerRow,
    ForkRow,
    IntentRow,
    LatencyRow,
    PairRow,
    QuantumRow,
    ReportRow,
    SearchDeletionRow,
    SearchRow,
    TrialRow,
    UserRow,
    WarmStartRow,
)
from quanta.db.monitoring import MonitoringQueries
from quanta.db.protocol import PolicyRecord, TrialFigures
from quanta.db.reports import fold_batch, merge_report, report_key
from quanta.db.searches import SearchQueries
from quanta.db.secret import server_secret
from quanta.db.shares import ShareQueries
from quanta.db.tokens import TokenQueries
from quanta.db.trials import TrialQueries
from quanta.db.users import UserQueries, ensure_first_admin
from quanta.status import SearchStatus

# Stored report keys are looked up this many at a time (three bound values each: SQLite allows 32766).
_KEYS_PER_QUERY = 500


class Store(SearchQueries, TrialQueries, MonitoringQueries, UserQueries, TokenQueries, ShareQueries, LineageQueries):
    """The database. The controller's reads and writes are below; the readers' (API) queries come from
    `SearchQueries` (searches), `TrialQueries` (trials, their reports and curves) and `MonitoringQueries`
    (health, metrics, the cluster), the users from `UserQueries`, the API tokens from `TokenQueries`, the
    users' shares of device time from `ShareQueries`, forks and lineage from `LineageQueries`."""

    # Quantum, latency and pair rows are kept (the dashboard and benchmarks read them); the controller
    # builds them only for a store that keeps them (`MemoryStore(keep_measurements=False)` does not).
    keep_measurements = True

    def __init__(self, url: str = DEFAULT_URL, *, secret: bytes | None = None):
        """`secret`: what tokens are hashed with (default: `quanta.db.secret.server_secret(url)`, read or
        created the first time a token is checked or stored)."""
        self.url = url
        self._secret = secret
        self.engine = make_engine(url)
        upgrade(self.engine)  # the schema at its newest revision (app/db/migrate.py)
        ensure_first_admin(self.engine, time.time())
        self._on_created: list[Callable[[], None]] = []

    def on_search_created(self, fn: Callable[[], None]) -> None:
        """Call `fn()` whenever this store has created a search (after the commit, in the creating
        thread): a controller loop of the same process (`quanta serve`'s) wakes on it and starts the
        search at once instead of at its next tick. Searches created through another process or store
        object are seen at the tick as before."""
        self._on_created.append(fn)

    def session(self) -> Session:
        return Session(self.engine, expire_on_commit=False)

    def token_secret(self) -> bytes:
        if self._secret is None:
            self._secret = server_secret(self.url)
        return self._secret

    # ---- searches ------------------------------------------------------------------------------

    def create_search(
        self, name: str, spec: dict[str, Any], at: float, owner: str = FIRST_ADMIN, *, owner_id: int | None = None
    ) -> SearchRow:
        """A queued search belonging to user `owner_id` named `owner` (the API passes the caller's id;
        without one, the user who has that name now, or nobody when none has)."""
        with self.session() as s:
            if owner_id is None:
                owner_id = s.exec(select(UserRow.id).where(UserRow.name == owner)).first()
            row = SearchRow(
                name=name, spec=spec, status=SearchStatus.QUEUED, created_at=at, owner=owner, owner_id=owner_id
            )
            s.add(row)
            s.commit()
            s.refresh(row)
        for fn in self._on_created:
            fn()
        return row

    def search(self, search_id: int) -> SearchRow | None:
        with self.session() as s:
            return s.get(SearchRow, search_id)

    def searches(self, statuses: Sequence[str] | None = None) -> list[SearchRow]:
        with self.session() as s:
            q = select(SearchRow).order_by(col(SearchRow.id))
            if statuses:
                q = q.where(col(SearchRow.status).in_(statuses))
            return list(s.exec(q))

    def update_search(self, search_id: int, **fields: Any) -> SearchRow:
        with self.session() as s:
            row = s.get(SearchRow, search_id)
            if row is None:
                raise KeyError(f"search {search_id} not found")
            for k, v in fields.items():
                setattr(row, k, v)
            s.add(row)
            s.commit()
            s.refresh(row)
            return row

    def claim_search(self, search_id: int, at: float) -> bool:
        """Mark a queued search running (started at `at`, no pending command) if it still is queued: one
        conditional UPDATE, so of two controllers (or a controller and a DELETE) exactly one wins. True
        when this call claimed it."""
        with self.session() as s:
            res = s.execute(
                update(SearchRow)
                .where(col(SearchRow.id) == search_id, col(SearchRow.status) == SearchStatus.QUEUED)
                .values(status=SearchStatus.RUNNING, started_at=at, command=None)
            )
            s.commit()
            return res.rowcount == 1  # type: ignore[attr-defined]  # an UPDATE returns a CursorResult

    def searches_needing_controller(self) -> list[SearchRow]:
        """Searches the controller must act on: newly queued ones and those with a pending command."""
        with self.session() as s:
            q = select(SearchRow).where(
                (col(SearchRow.status) == SearchStatus.QUEUED) | (col(SearchRow.command).is_not(None))
            )
            return list(s.exec(q.order_by(col(SearchRow.id))))

    def trials_with_commands(self) -> list[TrialRow]:
        with self.session() as s:
            return list(s.exec(select(TrialRow).where(col(TrialRow.command).is_not(None))))

    # ---- trials --------------------------------------------------------------------------------

    def add_trial(self, search_id: int, number: int, params: dict, vals: dict, at: float) -> TrialRow:
        """Insert the trial and bump the search's created counter in one transaction."""
        with self.session() as s:
            row = TrialRow(search_id=search_id, number=number, params=params, vals=vals, created_at=at)
            s.add(row)
            search = s.get(SearchRow, search_id)
            if search is not None:
                search.trials_created = max(search.trials_created, number + 1)
                s.add(search)
            s.commit()
            s.refresh(row)
            return row

    def trial(self, trial_id: int) -> TrialRow | None:
        with self.session() as s:
            return s.get(TrialRow, trial_id)

    def trials(self, search_id: int) -> list[TrialRow]:
        with self.session() as s:
            q = select(TrialRow).where(TrialRow.search_id == search_id).order_by(col(TrialRow.number))
            return list(s.exec(q))

    def update_trial(self, trial_id: int, **fields: Any) -> None:
        with self.session() as s:
            row = s.get(TrialRow, trial_id)
            if row is None:
                raise KeyError(f"trial {trial_id} not found")
            for k, v in fields.items():
                setattr(row, k, v)
            s.add(row)
            s.commit()

    def update_progress(self, rows: Sequence[tuple[int, int, float]]) -> None:
        """(trial id, steps, device seconds) of resident trials, in one transaction: one UPDATE by primary
        key for them all (rows of trials no longer stored are skipped), not a read and a write per trial."""
        if not rows:
            return
        with self.session() as s:
            _update_trials(s, ("steps", "device_seconds"), rows)
            s.commit()

    # ---- measurements --------------------------------------------------------------------------

    def add_rows(
        self,
        rows: Iterable[ReportRow | QuantumRow | LatencyRow | PairRow],
        trials: Sequence[TrialFigures] = (),
        searches: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> None:
        """Store the rows, each of `trials`' (id, metric, best metric, steps) and each of `searches`' fields
        (search id -> column values), in one transaction (trials and searches no longer stored are skipped).
        Reports are stored once per (trial, step, attempt) (see `ReportRow`): one whose key is stored
        already, or repeats one before it in `rows`, is merged into that row
        (`quanta.db.reports.merge_report`) instead of added, so writing the same report again is a no-op."""
        rows = list(rows)
        if not rows and not trials and not searches:
            return
        reports = fold_batch(r for r in rows if isinstance(r, ReportRow))
        with self.session() as s:
            if trials:
                _update_trials(s, ("metric", "best_metric", "steps"), trials)
            for search_id, fields in (searches or {}).items():
                row = s.get(SearchRow, search_id)
                if row is not None:
                    for k, v in fields.items():
                        setattr(row, k, v)
                    s.add(row)
            keys = list(reports)
            for i in range(0, len(keys), _KEYS_PER_QUERY):
                key = tuple_(col(ReportRow.trial_id), col(ReportRow.step), col(ReportRow.attempt))
                for stored in s.exec(select(ReportRow).where(key.in_(keys[i : i + _KEYS_PER_QUERY]))):
                    merge_report(stored, reports.pop(report_key(stored)))
                    s.add(stored)
            # New rows by bulk INSERT (one executemany a table), not the unit of work: building and
            # tracking an ORM object per row was most of the cost of a controller's round of reports.
            # The objects passed in are left as they were (no id).
            new: dict[type, list[dict[str, Any]]] = {}
            for r in [r for r in rows if not isinstance(r, ReportRow)] + list(reports.values()):
                new.setdefault(type(r), []).append(r.model_dump(exclude={"id"}))
            for cls, values in new.items():
                s.execute(insert(cls), values)
            s.commit()

    def reports(self, trial_id: int) -> list[ReportRow]:
        with self.session() as s:
            q = select(ReportRow).where(ReportRow.trial_id == trial_id).order_by(col(ReportRow.id))
            return list(s.exec(q))

    def search_reports(self, search_id: int) -> list[ReportRow]:
        with self.session() as s:
            q = select(ReportRow).where(ReportRow.search_id == search_id).order_by(col(ReportRow.id))
            return list(s.exec(q))

    def quanta(self, search_id: int | None = None, trial_id: int | None = None) -> list[QuantumRow]:
        with self.session() as s:
            q = select(QuantumRow).order_by(col(QuantumRow.id))
            if search_id is not None:
                q = q.where(QuantumRow.search_id == search_id)
            if trial_id is not None:
                q = q.where(QuantumRow.trial_id == trial_id)
            return list(s.exec(q))

    def latencies(self, kind: str | None = None) -> list[LatencyRow]:
        with self.session() as s:
            q = select(LatencyRow).order_by(col(LatencyRow.id))
            if kind:
                q = q.where(LatencyRow.kind == kind)
            return list(s.exec(q))

    def pairs(self) -> list[PairRow]:
        with self.session() as s:
            return list(s.exec(select(PairRow).order_by(col(PairRow.id))))

    # ---- the controller's state ----------------------------------------------------------------------

    def record_intent(
        self, round_no: int, at: float, actions: list[dict[str, Any]], policy: PolicyRecord | None = None
    ) -> None:
        """Store round `round_no`'s actions as intent and make it the controller's round number, with the
        policy's state when given (as `save_policy_state`), in one transaction: one commit (one flush to
        disk) between a decision and its actions."""
        with self.session() as s:
            s.add(IntentRow(round_no=round_no, at=at, actions=actions))
            row = s.get(ControllerRow, 1) or ControllerRow(id=1)
            row.round_no = round_no
            if policy is not None:
                _set_policy_state(row, *policy)
            s.add(row)
            s.commit()

    def last_intent(self) -> IntentRow | None:
        with self.session() as s:
            return s.exec(select(IntentRow).order_by(col(IntentRow.id).desc()).limit(1)).first()

    def round_no(self) -> int:
        """The number of the last round the controller applied (0 before the first)."""
        with self.session() as s:
            row = s.get(ControllerRow, 1)
            return row.round_no if row else 0

    def save_round_no(self, round_no: int) -> None:
        with self.session() as s:
            row = s.get(ControllerRow, 1) or ControllerRow(id=1)
            row.round_no = round_no
            s.add(row)
            s.commit()

    def policy_state(self) -> dict[str, Any]:
        """What the policy returned in `Plan.state` at the last plan ({} before the first)."""
        with self.session() as s:
            row = s.get(ControllerRow, 1)
            return dict(row.policy_state) if row else {}

    def judge_state(self) -> dict[str, Any]:
        """What the judge returned with the verdicts at the last plan ({} before the first)."""
        with self.session() as s:
            row = s.get(ControllerRow, 1)
            return dict(row.judge_state) if row else {}

    def save_policy_state(self, policy: str, state: Mapping[str, Any], judge: Mapping[str, Any] | None = None) -> None:
        """The policy's state and the judge's (`judge`, {} when None), saved together."""
        with self.session() as s:
            row = s.get(ControllerRow, 1) or ControllerRow(id=1)
            _set_policy_state(row, policy, state, judge or {})
            s.add(row)
            s.commit()

    def cluster_view(self) -> ClusterView | None:
        """The view the controller last published (None before it first did)."""
        with self.session() as s:
            row = s.get(ClusterViewRow, 1)
            return ClusterView.from_row(row) if row else None

    def publish_cluster_view(self, view: ClusterView) -> None:
        with self.session() as s:
            s.merge(view.to_row())
            s.commit()

    # ---- warm start ----------------------------------------------------------------------------

    def save_warm_start(self, search_id: int, items: list[dict[str, Any]]) -> None:
        """Keep the warm-start trials search `search_id` started with (replaces an earlier copy)."""
        with self.session() as s:
            s.merge(WarmStartRow(search_id=search_id, items=items))
            s.commit()

    def warm_start(self, search_id: int) -> list[dict[str, Any]] | None:
        """The warm-start trials kept for the search (None: none were kept)."""
        with self.session() as s:
            row = s.get(WarmStartRow, search_id)
            return list(row.items) if row else None

    # ---- deletion ------------------------------------------------------------------------------

    def request_delete(self, search_id: int, at: float) -> None:
        """Record that the search must go (the controller's host carries it out; survives restarts)."""
        with self.session() as s:
            if s.get(SearchDeletionRow, search_id) is None:
                s.add(SearchDeletionRow(search_id=search_id, requested_at=at))
                s.commit()

    def pending_deletes(self) -> list[int]:
        with self.session() as s:
            return list(s.exec(select(SearchDeletionRow.search_id).order_by(col(SearchDeletionRow.search_id))))

    def delete_search(self, search_id: int) -> None:
        """Delete a search with its trials, everything measured about them, and its deletion request,
        in one transaction."""
        with self.session() as s:
            tids = list(s.exec(select(TrialRow.id).where(TrialRow.search_id == search_id)))
            if tids:
                s.execute(delete(ReportRow).where(col(ReportRow.trial_id).in_(tids)))
                s.execute(delete(QuantumRow).where(col(QuantumRow.trial_id).in_(tids)))
                s.execute(delete(LatencyRow).where(col(LatencyRow.trial_id).in_(tids)))
                s.execute(delete(PairRow).where(or_(col(PairRow.trial_a).in_(tids), col(PairRow.trial_b).in_(tids))))
                s.execute(delete(TrialRow).where(col(TrialRow.id).in_(tids)))
            s.execute(delete(ReportRow).where(col(ReportRow.search_id) == search_id))
            s.execute(delete(SearchRow).where(col(SearchRow.id) == search_id))
            s.execute(delete(SearchDeletionRow).where(col(SearchDeletionRow.search_id) == search_id))
            s.execute(delete(WarmStartRow).where(col(WarmStartRow.search_id) == search_id))
            s.execute(delete(ForkRow).where(col(ForkRow.search_id) == search_id))
            s.execute(delete(ConfigChangeRow).where(col(ConfigChangeRow.search_id) == search_id))
            s.commit()


def _set_policy_state(row: ControllerRow, policy: str, state: Mapping[str, Any], judge: Mapping[str, Any]) -> None:
    """Put a policy's state and the judge's into the controller's row."""
    # JSON round trip: tuples become lists and non-string keys are rejected here, not at commit.
    row.policy, row.policy_state, row.judge_state = policy, json.loads(json.dumps(state)), json.loads(json.dumps(judge))


def _update_trials(session: Session, columns: tuple[str, ...], rows: Sequence[tuple[Any, ...]]) -> None:
    """Set `columns` of trial rows by primary key, each row (trial id, *values), in one executemany
    UPDATE of `session`'s transaction. A core UPDATE: the ORM's bulk form refuses an id no longer stored,
    where this skips it."""
    table: Table = TrialRow.__table__  # type: ignore[attr-defined]  # SQLModel tables have it
    # Bound names differ from the columns': SQLAlchemy reserves a column's own name for its SET clause.
    stmt = update(table).where(table.c.id == bindparam("trial_key")).values({c: bindparam(f"new_{c}") for c in columns})
    params = [{"trial_key": row[0], **{f"new_{c}": v for c, v in zip(columns, row[1:], strict=True)}} for row in rows]
    session.execute(stmt, params)
