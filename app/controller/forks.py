"""`Forks`: new trials started from another trial's state (forks), and changes of a trial's mutable
parameters while it runs, with their lineage stored; a population's exploits go through it to `Exploits`.

Contract:
- `sync(now)` (each tick, before the book's) takes up the fork requests the store holds (`ForkRow`: the
  API writes them, and so does `request`, the one entry point for the controller's own forks, such as a
  population's exploits) and moves each on as far as it can:
    1. checked again (its search is running or paused, its parent is held, its values are the search's
       mutable parameters), its new trial is created (`ControllerStore.start_fork`: the search's next
       number, once the book can give one, `SearchBook.fork_number`; its parent set; no fork step yet, so
       nothing runs it);
    2. the parent's state becomes the new trial's checkpoint: a parent with a live process is asked
       (`Fork`) and writes it at its next boundary (at once when parked: the state held in host memory);
       a parent without one has its last checkpoint copied (atomically, in the tick, and only once its
       process's events are all handled, so the step stored with the checkpoint is that file's);
    3. done (`ControllerStore.finish_fork`): the book holds the new trial, queued, resuming from that
       checkpoint with its parent's curve before the fork step as its own; its search's policy
       schedules it like any other.
  Whatever fails on the way (the search ended, the parent has no state, a write failed) fails the
  request and its new trial with the reason (`ControllerStore.fail_fork`). The parent is never touched:
  its state is only read. Each step is one transaction and what the store holds says where each
  request is, so a restarted controller goes on from there (`load`); a search with a request open does
  not end for lack of trials.
- `forked(event)`, `configured(trial, event)`: the runtime's answers, from the recorder.
- `reconfigure(trial_id, values)`: new values of a held trial's mutable parameters: a trial with a
  process takes them at its next boundary (`Reconfigure`, answered by `Configured`, which stores them
  with the step); any other has its parameters changed at once (its next process starts with them, and
  its restore brings the optimizers it restores to them).
- `exploit(target, source, values)`, `exploiting()`: a population's exploits (`Plan.exploits`), carried
  out by `Exploits` (`quanta.controller.exploits`, where their contract is), which `sync`, `load` and
  `forked` move on too.
- `waiting(trial_id)`: a new trial still waiting for its parent's state (the launcher finds its
  checkpoint path through it).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quanta.controller.book import SearchBook
from quanta.controller.exploits import Exploits
from quanta.controller.rounds import Rounds
from quanta.controller.state import SearchState, Signals, TrialState
from quanta.controller.state_files import copy_atomic
from quanta.controller.trials import TrialIndex
from quanta.db.launch import checkpoint_path, trial_log_path
from quanta.db.lineage import fork_state_problem
from quanta.db.models import ForkRow
from quanta.db.protocol import ControllerStore
from quanta.executor.actions import Action, Adopted, Configured, Fork, Forked, Reconfigure
from quanta.executor.runtime.base import Runtime
from quanta.search.space import SpaceError, vals_with_values, with_values
from quanta.status import SearchStatus

log = logging.getLogger("quanta.controller")

OPEN = ("pending", "copying")


@dataclass
class _Open:
    """A request being carried out."""

    fork_id: int
    search_id: int
    parent_id: int
    values: dict[str, Any]
    steps: int | None
    child: TrialState | None = None
    asked: bool = False  # a `Fork` went to the parent's process; its answer is awaited
    answer: Forked | None = None
    notes: list[str] = field(default_factory=list)


class Forks:
    def __init__(
        self,
        store: ControllerStore,
        runtime: Runtime,
        book: SearchBook,
        index: TrialIndex,
        rounds: Rounds,
        signals: Signals,
        workdir: Path,
        answer_timeout_s: float = 60.0,
    ):
        self._store = store
        self._runtime = runtime
        self._book = book
        self._index = index
        self._rounds = rounds
        self._signals = signals
        self._workdir = Path(workdir)
        self._open: dict[int, _Open] = {}
        self.exploits = Exploits(store, runtime, book, index, rounds, signals, workdir, answer_timeout_s)

    # ---- requests ------------------------------------------------------------------------------

    def request(self, parent_id: int, values: Mapping[str, Any], steps: int | None = None) -> int:
        """Fork trial `parent_id` with new `values` for mutable parameters and `steps` mini-batches beyond
        the fork (None: its parent's budget). Stored as a request like a user's, carried out from the next
        tick on. Returns the request's id; KeyError for a trial the store does not hold."""
        row = self._store.add_fork_request(parent_id, dict(values), steps, self._runtime.now())
        assert row.id is not None
        self._signals.wake = True
        return row.id

    def exploit(self, target_id: int, source_id: int, values: Mapping[str, Any]) -> bool:
        """Trial `target_id` takes trial `source_id`'s state and `values` (`Exploits.exploit`: False when
        it is not taken)."""
        return self.exploits.exploit(target_id, source_id, values)

    def exploiting(self) -> frozenset[int]:
        """Trials being exploited: they do not run until it is done or failed."""
        return self.exploits.exploiting()

    def load(self) -> None:
        """After a restart (the book loaded first): the requests the store holds open, each where it was,
        and the exploits in flight (`Exploits.load`)."""
        self._open.clear()
        for row in self._store.fork_requests(OPEN):
            self._take(row)
        self.exploits.load()

    def waiting(self, trial_id: int) -> TrialState | None:
        """The new trial `trial_id` of an open request (None: no such trial waits)."""
        for f in self._open.values():
            if f.child is not None and f.child.id == trial_id:
                return f.child
        return None

    def sync(self, now: float, read_requests: bool = True) -> None:
        """Take up the requests stored since (unless `read_requests` is False: not due this tick), then
        carry the open ones and the exploits on."""
        if read_requests:
            for row in self._store.fork_requests(("pending",)):
                if row.id not in self._open:
                    self._take(row)
        for f in list(self._open.values()):
            self._advance(f, now)
        self.exploits.sync(now)

    def _take(self, row: ForkRow) -> None:
        assert row.id is not None
        f = _Open(row.id, row.search_id, row.parent_id, dict(row.values or {}), row.steps)
        if row.child_id is not None:  # created before a restart: it still waits for the state
            child = self._store.trial(row.child_id)
            if child is not None and child.id is not None:
                ts = TrialState(child.id, child.search_id, child.number, child.params, child.vals, child.created_at)
                ts.parent_id = child.parent_id
                f.child = ts
        self._open[row.id] = f
        s = self._book.search(row.search_id)
        if s is not None:
            s.forks_open += 1

    def _close(self, f: _Open) -> None:
        self._open.pop(f.fork_id, None)
        s = self._book.search(f.search_id)
        if s is not None:
            s.forks_open = max(0, s.forks_open - 1)

    # ---- carrying one out ----------------------------------------------------------------------

    def _advance(self, f: _Open, now: float) -> None:
        s = self._book.search(f.search_id)
        if s is None or s.status not in (SearchStatus.RUNNING, SearchStatus.PAUSED):
            # (a deleted search's request went with its rows: failing it writes nothing)
            what = f"is {s.status}" if s is not None else "is not running"
            self._fail(f, f"search {f.search_id} {what}: trials are forked in a running or paused search", now)
            return
        parent = self._index.get(f.parent_id)
        if parent is None:
            why = "still waits for its own parent's state" if self.waiting(f.parent_id) else "is not held"
            self._fail(f, f"trial {f.parent_id} {why}", now)
            return
        resident = f.parent_id in self._runtime.residency()
        if f.child is None and not self._create(f, s, parent, resident, now):
            return
        assert f.child is not None
        if f.answer is not None:
            answer, f.answer, f.asked = f.answer, None, False
            if answer.error is None:
                self._done(f, s, answer.step, now)
                return
            if not answer.gone:  # the write failed: nothing was written, the parent goes on
                self._fail(f, answer.error, now)
                return
            f.notes.append(answer.error)  # no process to take it from: its checkpoint is what is left
        if f.asked:
            if resident or parent.exit_pending:
                return  # the answer is on its way
            f.asked = False  # its process ended and its events are handled, without an answer: lost
        if resident:
            actions: list[Action] = [Fork(f.parent_id, f.child.id)]
            self._runtime.apply(self._rounds.record(now, actions), actions)
            f.asked = True
            return
        if parent.exit_pending:
            return  # its process has ended and its exit is still on its way: its checkpoint may change
        self._copy_checkpoint(f, s, parent, now)

    def _create(self, f: _Open, s: SearchState, parent: TrialState, resident: bool, now: float) -> bool:
        """Step 1: the new trial (False: not now, or the request failed)."""
        try:
            values = s.spec.checked_overrides(f.values)
        except SpaceError as exc:
            self._fail(f, str(exc), now)
            return False
        if not resident:
            why = self._no_state(parent)
            if why is not None:
                self._fail(f, why, now)
                return False
        number = self._book.maker.fork_number(s)
        if number is None:
            return False
        params, vals = with_values(parent.params, values), vals_with_values(parent.vals, values)
        row = self._store.start_fork(f.fork_id, number, params, vals, None, now)
        assert row.id is not None
        ts = TrialState(row.id, s.id, number, params, vals, now)
        ts.parent_id = parent.id
        f.child = ts
        self._clear(s.id, ts.id)
        log.info("trial %s forked as trial %s (%s)", parent.id, ts.id, values or "same values")
        return True

    def _no_state(self, parent: TrialState) -> str | None:
        """Why trial `parent`, which has no live process, has no state to fork (None: it has a checkpoint,
        or it is running: its process is being started or ended, and is asked or copied once settled)."""
        row = self._store.trial(parent.id)
        return f"trial {parent.id} is gone" if row is None else fork_state_problem(row, self._workdir)

    def _copy_checkpoint(self, f: _Open, s: SearchState, parent: TrialState, now: float) -> None:
        """Step 2 for a parent without a process: its last checkpoint, copied."""
        assert f.child is not None
        row = self._store.trial(parent.id)
        src = checkpoint_path(self._workdir, s.id, parent.id)
        if row is None or row.checkpoint_step is None or not src.exists():
            why = self._no_state(parent) or f"trial {parent.id} has no checkpoint"
            self._fail(f, "; ".join([*f.notes, why]), now)
            return
        try:
            copy_atomic(src, checkpoint_path(self._workdir, s.id, f.child.id))
        except OSError as exc:
            self._fail(f, f"cannot copy trial {parent.id}'s checkpoint: {exc}", now)
            return
        self._done(f, s, row.checkpoint_step, now)

    def _done(self, f: _Open, s: SearchState, step: int, now: float) -> None:
        """Step 3: the new trial has its state (as its checkpoint) at `step`: the book holds it."""
        ts = f.child
        assert ts is not None
        parent = self._index.get(f.parent_id)
        own = step + f.steps if f.steps is not None else (parent.own_max_steps if parent is not None else None)
        self._store.finish_fork(f.fork_id, step, now, own)
        ts.fork_step, ts.steps, ts.resume, ts.own_max_steps = step, step, True, own
        ts.curve = [p for p in parent.curve if p[0] < step] if parent is not None else []
        ts.points = [p for p in parent.points if p[0] < step] if parent is not None else []
        ts.reader = parent.reader.copy() if parent is not None and parent.reader is not None else None
        self._close(f)
        self._book.track(s, ts)
        self._signals.replan = True  # placed now, not a quantum later
        log.info("trial %s starts from trial %s's state at step %s", ts.id, f.parent_id, step)

    def _fail(self, f: _Open, error: str, now: float) -> None:
        """The request fails with `error`; what was made for it goes (its trial's row stays, failed)."""
        log.warning("fork %s of trial %s failed: %s", f.fork_id, f.parent_id, error)
        self._store.fail_fork(f.fork_id, error, now)
        if f.child is not None:
            self._clear(f.search_id, f.child.id)
        self._close(f)

    def _clear(self, search_id: int, trial_id: int) -> None:
        """Remove whatever lies at a new trial's paths (an earlier database's search in this working
        directory may have used its ids): its first process resumes, so it would take them as its own."""
        ckpt = checkpoint_path(self._workdir, search_id, trial_id)
        log_path = trial_log_path(self._workdir, search_id, trial_id)
        for path in (ckpt, Path(f"{ckpt}.reports.jsonl"), Path(f"{ckpt}.attempt"), log_path):
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)

    # ---- the runtime's answers -----------------------------------------------------------------

    def forked(self, e: Forked) -> None:
        """A parent's answer: kept for its request, or its exploit (acted on at the next tick)."""
        if self.exploits.forked(e):
            return
        for f in self._open.values():
            if f.parent_id == e.trial_id and f.child is not None and f.child.id == e.into:
                f.answer = e
                self._signals.wake = True
                return

    def adopted(self, e: Adopted) -> None:
        """A target's answer to an exploit's `Adopt` (`Exploits.adopted`)."""
        self.exploits.adopted(e)

    def configured(self, t: TrialState, e: Configured) -> None:
        """A trial took new values at `e.step`: its parameters and the change are stored."""
        if not e.values:
            return
        t.params = with_values(t.params, e.values)
        self._store.record_config_change(t.id, e.step, e.at, e.values, t.params, "set")

    # ---- changing a trial's values -------------------------------------------------------------

    def reconfigure(self, trial_id: int, values: Mapping[str, Any]) -> None:
        """New values of mutable parameters for alive trial `trial_id` (see the module's contract).
        KeyError for a trial not alive; `SpaceError` for values its search does not take."""
        t = self._index.alive.get(trial_id)
        s = self._book.search(t.search_id) if t is not None else None
        if t is None or s is None:
            raise KeyError(f"trial {trial_id} is not alive in a search")
        checked = s.spec.checked_overrides(values)
        now = self._runtime.now()
        if trial_id in self._runtime.residency():
            actions: list[Action] = [Reconfigure(trial_id, dict(checked))]
            self._runtime.apply(self._rounds.record(now, actions), actions)
            return
        row = self._store.trial(trial_id)
        step = row.checkpoint_step if row is not None and row.checkpoint_step is not None else 0
        t.params = with_values(t.params, checked)
        self._store.record_config_change(trial_id, step, now, checked, t.params, "set")
