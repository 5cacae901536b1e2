"""`LineageQueries`: forks and lineage in the SQL store (part of `Store`; the simulator's `MemoryStore`
keeps the controller's half the same way).

A fork is a request row (`ForkRow`) the API writes and the controller carries out in three steps, each
one transaction, so that a failure or a restart between two of them leaves nothing half-made:
`start_fork` creates the new trial (its `fork_step` null: it waits for its parent's state and does not
run) and marks the request copying; `finish_fork` records the step the state was taken at (the trial may
run from then on) and the values it starts with; `fail_fork` marks the request and its trial failed with
the reason. The parent is never written.

A population's exploit (trial T takes trial S's state and new values) is a row of the same table, moved on
the same way so that a restart finds it where it was: `add_exploit` (staging: S's state is being written
beside T's checkpoint), `stage_exploit` (it is there, whole, with its step), then either `finish_exploit`
(renamed over T's checkpoint: T's steps, checkpoint step and parameters and the config change, cause
"exploit", in one transaction) or `abandon_exploit` (T is as it was). T's own row is only written by
`finish_exploit`.

Lineage is the trials' `parent_id` and `fork_step` and the `config_change` rows (a trial's mutable
parameters changed at a step: at a fork, while it ran, or at an exploit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, select

from quanta.db.launch import checkpoint_path
from quanta.db.models import EXPLOIT_STATES, ConfigChangeRow, ForkRow, SearchRow, TrialRow
from quanta.db.public.lineage import ConfigChangeOut, ForkOut, LineageOut, LineageTrial
from quanta.db.public.readable import finite, parsed_spec, shown
from quanta.status import TrialStatus


def fork_state_problem(trial: TrialRow, workdir: str | Path) -> str | None:
    """Why trial `trial` has no state to fork (None: it has one). A running trial has its process (or is
    being started or ended: its state is taken once that is settled); any other has what its last
    checkpoint holds, if it wrote one and it is still there under `workdir`."""
    status = TrialStatus(trial.status)
    if trial.parent_id is not None and trial.fork_step is None and not status.final:
        return f"trial {trial.id} still waits for its own parent's state"
    if status == TrialStatus.RUNNING:
        return None
    if trial.checkpoint_step is not None:
        assert trial.id is not None
        if checkpoint_path(workdir, trial.search_id, trial.id).exists():
            return None
        return f"trial {trial.id}'s checkpoint (step {trial.checkpoint_step}) is gone: its state no longer exists"
    if status == TrialStatus.QUEUED and trial.started_at is None:
        return f"trial {trial.id} has not run yet: it has no state to fork"
    return f"trial {trial.id} is {status} and wrote no checkpoint: its state no longer exists"


class LineageQueries:
    """Mixed into `Store` (which provides `session()`)."""

    def session(self) -> Session:  # provided by Store
        raise NotImplementedError

    # ---- the API's side ------------------------------------------------------------------------

    def request_fork(
        self, parent_id: int, values: Mapping[str, Any], steps: int | None, at: float, requested_by: int | None
    ) -> ForkOut | None:
        """A pending request to fork trial `parent_id` (None: no such trial), as the API answers it."""
        try:
            return ForkOut.from_row(self.add_fork_request(parent_id, values, steps, at, requested_by))
        except KeyError:
            return None

    def fork_out(self, fork_id: int) -> ForkOut | None:
        with self.session() as s:
            row = s.get(ForkRow, fork_id)
            if row is None or row.status in EXPLOIT_STATES:  # an exploit is not a request
                return None
            child = s.get(TrialRow, row.child_id) if row.child_id is not None else None
            return ForkOut.from_row(row, child.fork_step if child is not None else None)

    def lineage(self, search_id: int) -> LineageOut | None:
        """Every trial of the search with its parent, fork step and config changes, and its fork requests
        (None: no such search)."""
        with self.session() as s:
            search = s.get(SearchRow, search_id)
            if search is None:
                return None
            of_search = select(TrialRow).where(TrialRow.search_id == search_id)
            trials = list(s.exec(of_search.order_by(col(TrialRow.number))))
            q = select(ConfigChangeRow).where(ConfigChangeRow.search_id == search_id).order_by(col(ConfigChangeRow.id))
            changes: dict[int, list[ConfigChangeOut]] = {}
            for c in s.exec(q):
                changes.setdefault(c.trial_id, []).append(ConfigChangeOut.from_row(c))
            of_forks = select(ForkRow).where(ForkRow.search_id == search_id, col(ForkRow.status).not_in(EXPLOIT_STATES))
            forks = list(s.exec(of_forks.order_by(col(ForkRow.id))))
        steps = {t.id: t.fork_step for t in trials}
        spec = parsed_spec(search)
        return LineageOut(
            search_id=search_id,
            mutable=list(spec.mutable) if spec else [],
            trials=[
                LineageTrial(
                    id=t.id,
                    number=t.number,
                    status=TrialStatus(t.status),
                    parent_id=t.parent_id,
                    fork_step=t.fork_step,
                    steps=t.steps,
                    metric=finite(t.metric),
                    best_metric=finite(t.best_metric),
                    params=shown(t.params),
                    changes=changes.get(t.id, []),
                )
                for t in trials
                if t.id is not None
            ],
            forks=[ForkOut.from_row(f, steps.get(f.child_id) if f.child_id is not None else None) for f in forks],
        )

    # ---- the controller's side -----------------------------------------------------------------

    def add_fork_request(
        self, parent_id: int, values: Mapping[str, Any], steps: int | None, at: float, requested_by: int | None = None
    ) -> ForkRow:
        """A pending request to fork trial `parent_id` (KeyError: no such trial). The values are checked
        by the caller (`SearchSpec.checked_overrides`) and again when the controller takes it up."""
        with self.session() as s:
            parent = s.get(TrialRow, parent_id)
            if parent is None:
                raise KeyError(f"trial {parent_id} not found")
            row = ForkRow(
                search_id=parent.search_id,
                parent_id=parent_id,
                values=dict(values),
                steps=steps,
                requested_at=at,
                requested_by=requested_by,
            )
            s.add(row)
            s.commit()
            s.refresh(row)
            return row

    def fork_requests(self, statuses: Sequence[str]) -> list[ForkRow]:
        """Fork requests in these states, oldest first."""
        with self.session() as s:
            q = select(ForkRow).where(col(ForkRow.status).in_(statuses)).order_by(col(ForkRow.id))
            return list(s.exec(q))

    def start_fork(
        self, fork_id: int, number: int, params: dict[str, Any], vals: dict[str, Any], max_steps: int | None, at: float
    ) -> TrialRow:
        """Create the request's trial (number `number` of the parent's search, its parent set, no fork
        step yet) and mark the request copying, in one transaction. Returns the trial's row."""
        with self.session() as s:
            fork = s.get(ForkRow, fork_id)
            if fork is None:
                raise KeyError(f"fork {fork_id} not found")
            row = TrialRow(
                search_id=fork.search_id,
                number=number,
                params=params,
                vals=vals,
                created_at=at,
                parent_id=fork.parent_id,
                max_steps=max_steps,
            )
            s.add(row)
            s.flush()  # its id, for the request
            fork.child_id, fork.status = row.id, "copying"
            s.add(fork)
            search = s.get(SearchRow, fork.search_id)
            if search is not None:
                search.trials_created = max(search.trials_created, number + 1)
                s.add(search)
            s.commit()
            s.refresh(row)
            return row

    def finish_fork(self, fork_id: int, step: int, at: float, max_steps: int | None) -> None:
        """The request's trial has its parent's state at `step` as its checkpoint: it may run from there
        (with its budget `max_steps`, when its own). Its starting values are a config change at `step`."""
        with self.session() as s:
            fork = s.get(ForkRow, fork_id)
            if fork is None or fork.child_id is None:
                raise KeyError(f"fork {fork_id} has no trial")
            child = s.get(TrialRow, fork.child_id)
            if child is None:
                raise KeyError(f"trial {fork.child_id} not found")
            child.fork_step = child.checkpoint_step = child.steps = step
            child.max_steps = max_steps
            fork.status, fork.finished_at = "done", at
            if fork.values:
                s.add(
                    ConfigChangeRow(
                        search_id=fork.search_id,
                        trial_id=fork.child_id,
                        step=step,
                        at=at,
                        values=dict(fork.values),
                        cause="fork",
                        source_id=fork.parent_id,
                    )
                )
            s.add_all([child, fork])
            s.commit()

    def fail_fork(self, fork_id: int, error: str, at: float) -> None:
        """The request failed (`error` says why), and its trial, if it was made, with it."""
        with self.session() as s:
            fork = s.get(ForkRow, fork_id)
            if fork is None:
                return
            fork.status, fork.error, fork.finished_at = "failed", error[:2000], at
            s.add(fork)
            child = s.get(TrialRow, fork.child_id) if fork.child_id is not None else None
            if child is not None:
                child.status, child.error, child.finished_at = TrialStatus.FAILED, f"fork failed: {error}"[:2000], at
                s.add(child)
            s.commit()

    def add_exploit(self, target_id: int, source_id: int, values: Mapping[str, Any], at: float) -> ForkRow:
        """An exploit under way (staging): trial `target_id` is to take trial `source_id`'s state and
        `values` (checked by the caller). KeyError: no such target."""
        with self.session() as s:
            target = s.get(TrialRow, target_id)
            if target is None:
                raise KeyError(f"trial {target_id} not found")
            row = ForkRow(
                search_id=target.search_id,
                parent_id=source_id,
                child_id=target_id,
                values=dict(values),
                status="exploit-staging",
                requested_at=at,
            )
            s.add(row)
            s.commit()
            s.refresh(row)
            return row

    def stage_exploit(self, fork_id: int, step: int) -> None:
        """The exploit's source state is staged, whole, taken at `step`: from now on a restart completes it."""
        with self.session() as s:
            row = s.get(ForkRow, fork_id)
            if row is None:
                raise KeyError(f"exploit {fork_id} not found")
            row.status, row.steps = "exploit-staged", step
            s.add(row)
            s.commit()

    def finish_exploit(self, fork_id: int, params: dict[str, Any], at: float) -> None:
        """The staged state is the target's checkpoint now: the target's steps and checkpoint step are the
        staged step, its parameters `params`, and the change is stored (cause "exploit", its source), with
        the exploit done, in one transaction."""
        with self.session() as s:
            row = s.get(ForkRow, fork_id)
            if row is None or row.child_id is None or row.steps is None:
                raise KeyError(f"exploit {fork_id} is not staged")
            trial = s.get(TrialRow, row.child_id)
            if trial is None:
                raise KeyError(f"trial {row.child_id} not found")
            trial.params = params
            trial.steps = trial.checkpoint_step = row.steps
            row.status, row.finished_at = "exploited", at
            change = ConfigChangeRow(
                search_id=trial.search_id,
                trial_id=row.child_id,
                step=row.steps,
                at=at,
                values=dict(row.values or {}),
                cause="exploit",
                source_id=row.parent_id,
            )
            s.add_all([trial, row, change])
            s.commit()

    def abandon_exploit(self, fork_id: int, error: str, at: float) -> None:
        """The exploit is given up (`error` says why): its target is left as it was."""
        with self.session() as s:
            row = s.get(ForkRow, fork_id)
            if row is None:
                return
            row.status, row.error, row.finished_at = "exploit-abandoned", error[:2000], at
            s.add(row)
            s.commit()

    def record_config_change(
        self,
        trial_id: int,
        step: int,
        at: float,
        values: Mapping[str, Any],
        params: dict[str, Any],
        cause: str = "set",
        source_id: int | None = None,
        restored: bool = False,
    ) -> None:
        """Trial `trial_id`'s mutable parameters changed to `values` at `step`: its parameters are
        `params` from now on (the next process of it starts with them), and the change is kept.
        `restored`: its checkpoint was just replaced by another trial's state at `step` (an exploit,
        `source_id`'s): its steps and checkpoint step are `step` too, in the same transaction."""
        with self.session() as s:
            trial = s.get(TrialRow, trial_id)
            if trial is None:
                raise KeyError(f"trial {trial_id} not found")
            trial.params = params
            if restored:
                trial.steps = trial.checkpoint_step = step
            s.add(trial)
            change = ConfigChangeRow(
                search_id=trial.search_id,
                trial_id=trial_id,
                step=step,
                at=at,
                values=dict(values),
                cause=cause,
                source_id=source_id,
            )
            s.add(change)
            s.commit()

    def config_changes(self, trial_id: int) -> list[ConfigChangeRow]:
        """The trial's config changes, oldest first."""
        with self.session() as s:
            q = select(ConfigChangeRow).where(ConfigChangeRow.trial_id == trial_id).order_by(col(ConfigChangeRow.id))
            return list(s.exec(q))
