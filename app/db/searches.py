"""`SearchQueries`: the API's reads and requests of searches, in SQL (part of `Store`; `MemoryStore`,
the simulator's store, serves no API: see `quanta.db.protocol`).

Reads return read models (`quanta.db.public.searches`): a search, a page of them (filtered by status,
owner and tag), who a search or trial belongs to (`Owner`), how many of their trials are final.
Requests are rows the controller picks up at its next tick: a queued search (`submit_search`), a
`command` (stop, pause, resume), a resume with its budget raised (`resume_search`). Written here
directly: tags and notes (the users' own, which the controller never writes), a queued search stopped
or deleted before the controller started it. A request that does not fit the search's state raises
`Conflict`, a budget out of bounds `BudgetError` (`quanta.db.errors`). Every method is one short
transaction; the API never calls the controller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import ColumnElement, delete, func, text, update
from sqlmodel import Session, col, select

from quanta.db.errors import BudgetError, Conflict
from quanta.db.models import FIRST_ADMIN, SearchRow, TrialRow
from quanta.db.public.searches import SearchOut, SearchPatch, SearchSummary
from quanta.spec import SearchSpec, SpecError, parse_spec, spec_from_stored
from quanta.status import SEARCH_STARTED, TRIAL_FINAL, TRIAL_STOPPED_BY_USER, SearchStatus, TrialStatus

SearchSort = Literal["id", "-id"]
SearchCommand = Literal["stop", "pause", "resume"]

# The states a search must be in for each command.
COMMAND_NEEDS: dict[str, tuple[SearchStatus, ...]] = {
    "stop": SEARCH_STARTED,
    "pause": (SearchStatus.RUNNING,),
    "resume": (SearchStatus.PAUSED,),
}


@dataclass(frozen=True)
class Owner:
    """Who a search belongs to: the user's id (None: that user was deleted, so no member owns it) and
    the name it was submitted under."""

    id: int | None
    name: str


# The searches whose tags include one (`:tag`): JSON lists are read by each database's own functions.
_HAS_TAG = {
    "sqlite": "EXISTS (SELECT 1 FROM json_each(search.tags) AS t WHERE t.value = :tag)",
    "postgresql": "EXISTS (SELECT 1 FROM json_array_elements_text(search.tags) AS t(v) WHERE t.v = :tag)",
}


class SearchQueries:
    """Mixed into `Store`, which provides `session()` and `create_search()`."""

    def session(self) -> Session:
        raise NotImplementedError

    def create_search(
        self, name: str, spec: dict[str, Any], at: float, owner: str = FIRST_ADMIN, *, owner_id: int | None = None
    ) -> SearchRow:
        raise NotImplementedError

    def trials_done(self, search_ids: Sequence[int]) -> dict[int, int]:
        """Per search, how many of its trials are final (searches without any are left out)."""
        if not search_ids:
            return {}
        with self.session() as s:
            return self._trials_done(s, search_ids)

    @staticmethod
    def _trials_done(s: Session, search_ids: Sequence[int]) -> dict[int, int]:
        q = (
            select(TrialRow.search_id, func.count())
            .where(col(TrialRow.search_id).in_(list(search_ids)), col(TrialRow.status).in_(TRIAL_FINAL))
            .group_by(col(TrialRow.search_id))
        )
        return {sid: n for sid, n in s.exec(q)}

    def submit_search(
        self, spec: SearchSpec, at: float, owner: str = FIRST_ADMIN, *, owner_id: int | None = None
    ) -> SearchOut:
        """Insert a queued search of user `owner_id` named `owner` (without an id: the user of that name)
        (it exists whole or not at all); the controller starts it."""
        row = self.create_search(spec.name, spec.model_dump(mode="json"), at, owner, owner_id=owner_id)
        return SearchOut.from_row(row, 0)

    def search_owner(self, search_id: int) -> Owner | None:
        """Who the search belongs to (None: no such search)."""
        with self.session() as s:
            hit = s.exec(select(SearchRow.owner_id, SearchRow.owner).where(SearchRow.id == search_id)).first()
            return Owner(*hit) if hit is not None else None

    def trial_owner(self, trial_id: int) -> Owner | None:
        """Who the trial's search belongs to (None: no such trial, or a trial of no search: a trace job)."""
        with self.session() as s:
            q = select(SearchRow.owner_id, SearchRow.owner).join(TrialRow, col(TrialRow.search_id) == col(SearchRow.id))
            hit = s.exec(q.where(TrialRow.id == trial_id)).first()
            return Owner(*hit) if hit is not None else None

    def has_search(self, search_id: int) -> bool:
        with self.session() as s:
            return s.exec(select(SearchRow.id).where(SearchRow.id == search_id)).first() is not None

    def search_out(self, search_id: int) -> SearchOut | None:
        with self.session() as s:
            row = s.get(SearchRow, search_id)
            if row is None:
                return None
            return SearchOut.from_row(row, self._trials_done(s, [search_id]).get(search_id, 0))

    def search_page(
        self,
        offset: int,
        limit: int,
        sort: SearchSort = "-id",
        status: SearchStatus | None = None,
        owner_id: int | None = None,
        tag: str | None = None,
    ) -> tuple[list[SearchSummary], int]:
        """One page of searches (without their specs: a page of large specs is megabytes, and the list is
        fetched again after each event) and the number of all that match `status`, `owner_id` (a
        user's id) and `tag` (one of their tags, exactly)."""
        with self.session() as s:
            q = select(SearchRow)
            count = select(func.count()).select_from(SearchRow)
            conditions: list[ColumnElement[bool] | Any] = []
            if status:
                conditions.append(SearchRow.status == status)
            if owner_id is not None:
                conditions.append(SearchRow.owner_id == owner_id)
            if tag is not None:
                conditions.append(text(_HAS_TAG[s.get_bind().dialect.name]).bindparams(tag=tag))
            if conditions:
                q = q.where(*conditions)
                count = count.where(*conditions)
            order = col(SearchRow.id).desc() if sort == "-id" else col(SearchRow.id)
            rows = list(s.exec(q.order_by(order).offset(offset).limit(limit)))
            total = s.exec(count).one()
            done = self._trials_done(s, [r.id for r in rows if r.id is not None])
        return [SearchSummary.from_row(r, done.get(r.id or 0, 0)) for r in rows], total

    def command_search(self, search_id: int, command: SearchCommand, at: float) -> SearchOut | None:
        """Ask the controller to stop/pause/resume a search (None: no such search). A queued search the
        controller has not picked up yet is stopped here directly. Raises `Conflict` when its state does
        not allow the command."""
        with self.session() as s:
            if s.get(SearchRow, search_id) is None:
                return None
            if command == "stop":
                res = s.execute(
                    update(SearchRow)
                    .where(col(SearchRow.id) == search_id, col(SearchRow.status) == SearchStatus.QUEUED)
                    .values(status=SearchStatus.STOPPED, finished_at=at, command=None, waiting=None)
                )
                if res.rowcount:  # type: ignore[attr-defined]  # an UPDATE/DELETE returns a CursorResult
                    s.commit()
                    return self.search_out(search_id)
            res = s.execute(
                update(SearchRow)
                .where(col(SearchRow.id) == search_id, col(SearchRow.status).in_(COMMAND_NEEDS[command]))
                .values(command=command)
            )
            s.commit()
            if not res.rowcount:  # type: ignore[attr-defined]  # an UPDATE/DELETE returns a CursorResult
                current = s.get(SearchRow, search_id)
                state = current.status if current else "gone"
                raise Conflict(f"cannot {command} search {search_id}: it is {state}")
        return self.search_out(search_id)

    def patch_search(self, search_id: int, patch: SearchPatch) -> SearchOut | None:
        """Set the search's tags and notes (those `patch` has; an empty `notes` removes them). None: no such
        search. Tags and notes are the users' own: the controller never writes them, so this one UPDATE
        races with nothing."""
        values: dict[str, Any] = {}
        if patch.tags is not None:
            values["tags"] = list(patch.tags)
        if "notes" in patch.model_fields_set:
            values["notes"] = patch.notes or None
        with self.session() as s:
            if values:
                res = s.execute(update(SearchRow).where(col(SearchRow.id) == search_id).values(**values))
                s.commit()
                if not res.rowcount:  # type: ignore[attr-defined]  # an UPDATE/DELETE returns a CursorResult
                    return None
        return self.search_out(search_id)

    def resume_search(
        self, search_id: int, at: float, *, more_trials: int = 0, more_seconds: float = 0.0, unheld: bool = False
    ) -> SearchOut | None:
        """Ask the controller to resume the search with its budget raised by `more_trials` and
        `more_seconds` (None: no such search). A paused search runs again; a stopped or completed one is
        taken up again (`SearchBook`): its searcher goes on from its whole history, the trials its end
        stopped go on from their checkpoints, and the time it spent ended does not count against its
        time budget. One that ended at its target goes on to its budget (`budget.stop_on_target` becomes
        false). A running search takes the raised budget only (`Conflict` without one), unless `unheld`:
        the caller holds the database's controller lease, so no controller holds a running or paused
        search, which is then taken up as after a restart.

        `Conflict` for a queued or failed search, and for an ended one that would end again at once: its
        time budget spent (give `more_seconds`), or its trials all made and none to go on (give
        `more_trials`). `BudgetError` when the raised budget is out of the spec's bounds."""
        with self.session() as s:
            # The row is locked first (PostgreSQL: a row lock; SQLite: the database's write lock) and read
            # after: two requests raising one budget add up, neither overwrites the other.
            res = s.execute(
                update(SearchRow).where(col(SearchRow.id) == search_id).values(command=col(SearchRow.command))
            )
            if not res.rowcount:  # type: ignore[attr-defined]  # an UPDATE/DELETE returns a CursorResult
                return None
            row = s.get(SearchRow, search_id)
            assert row is not None
            state = SearchStatus(row.status)
            more = more_trials > 0 or more_seconds > 0
            if state in (SearchStatus.QUEUED, SearchStatus.FAILED) or (
                state == SearchStatus.RUNNING and not more and not unheld
            ):
                raise Conflict(f"cannot resume search {search_id}: it is {state}")
            try:
                spec = spec_from_stored(row.spec)
            except SpecError as exc:
                raise Conflict(f"cannot resume search {search_id}: its stored spec does not parse ({exc})") from None
            budget = dict(row.spec.get("budget") or {})
            budget["max_trials"] = spec.budget.max_trials + more_trials
            budget["max_seconds"] = spec.budget.max_seconds + more_seconds
            if state.final and row.reached:
                budget["stop_on_target"] = False  # it ended there: resumed, it goes on to its budget
            stored = {**row.spec, "budget": budget}
            try:
                raised = parse_spec(stored, stored=True).budget
            except SpecError as exc:
                field, reason = exc.errors[0]
                name = field.removeprefix("budget.")
                raise BudgetError(name, f"{reason} (with the budget raised: {field} {budget.get(name)})") from None
            if state.final:
                ran = (row.finished_at or at) - (row.started_at or row.created_at) - row.idle_seconds
                if ran >= raised.max_seconds:
                    raise Conflict(
                        f"cannot resume search {search_id}: its time budget is spent ({ran:.0f} of "
                        f"{raised.max_seconds:g} s): give more seconds"
                    )
                made = s.exec(  # forks are none of the searcher's: they do not count against max_trials
                    select(func.count())
                    .select_from(TrialRow)
                    .where(TrialRow.search_id == search_id, col(TrialRow.parent_id).is_(None))
                ).one()
                if made >= raised.max_trials and not self._resumable_trials(s, search_id):
                    raise Conflict(
                        f"cannot resume search {search_id}: its {raised.max_trials} trials are all made and "
                        "none was stopped by its end: give more trials"
                    )
            row.spec = stored
            row.command = "resume"
            s.add(row)
            s.commit()
        return self.search_out(search_id)

    @staticmethod
    def _resumable_trials(s: Session, search_id: int) -> int:
        """How many of the search's trials its end stopped (`quanta.status.resumable_trial`)."""
        q = select(func.count()).select_from(TrialRow)
        q = q.where(TrialRow.search_id == search_id, TrialRow.status == TrialStatus.STOPPED)
        return s.exec(q.where(func.coalesce(TrialRow.reason, "") != TRIAL_STOPPED_BY_USER)).one()

    def delete_if_queued(self, search_id: int) -> bool:
        """Delete a search the controller never started (it has no trials). True when deleted."""
        with self.session() as s:
            res = s.execute(
                delete(SearchRow).where(
                    col(SearchRow.id) == search_id,
                    col(SearchRow.status) == SearchStatus.QUEUED,
                    col(SearchRow.started_at).is_(None),
                )
            )
            s.commit()
            return bool(res.rowcount)  # type: ignore[attr-defined]  # an UPDATE/DELETE returns a CursorResult
