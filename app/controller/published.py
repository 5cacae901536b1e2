"""`PublishedStates`: trials' states kept ready for a population's exploits, so that an exploit takes its
source's state at once (a hard link) instead of asking the source for it at its next boundary.

Contract:
- `publish(trials, now, skip)` (`Plan.publish`, only on a runtime that `adopts_in_place`: one node whose
  files the controller reads): each resident, alive trial not in `skip` (being exploited) and not being
  written already has its state at its current boundary written beside its checkpoint, at
  `<checkpoint>.published` (a `Fork` of the trial into itself, not flushed by the trial), sent at once, so
  before the trial runs on this round. Its answer (`answered`) records the state's step and starts its
  flush to disk on a thread; a failed one removes what was written.
- `writing(trial)`: its state is being written (an exploit of it waits for that).
- `link(source, floor, stage)`: the source's published state, when it holds one from step `floor` on and
  is not being written again, gets the name `stage` (a hard link: the same file, at once); returns (its
  step, its flush), else None.
- `keep(search, target, stage)` before a target takes a staged state, then `taken(search, target, kept,
  step)` once the exploit is done: the target's published state becomes that very state (another name of
  the staged file, on disk already), so an exploit of the target before its next interval links it too.
  `discard(kept)` when the exploit is abandoned.
- `drop(trial)`: its published state goes (its own state was replaced). `sync(now, timeout)`: those of
  ended trials go, and a write unanswered after `timeout` seconds is no longer waited for. `reset()`
  after a restart: every alive trial's published files go (what was written before is not known whole).
Nothing here is ever a trial's checkpoint: a published state is only linked from, and removed by name.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Collection, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from quanta.controller.rounds import Rounds
from quanta.controller.state import Signals
from quanta.controller.state_files import flush_later
from quanta.controller.trials import TrialIndex
from quanta.db.launch import checkpoint_path
from quanta.executor.actions import Action, Fork, Forked
from quanta.executor.runtime.base import Runtime

log = logging.getLogger("quanta.controller")

PUBLISH_SUFFIX = ".published"  # beside the trial's checkpoint, on the same file system: linked from there
KEPT_SUFFIX = ".next"  # a target's next published state, named before it takes it


@dataclass
class _Published:
    """A trial's state written at `step` at `path`."""

    step: int
    path: Path
    flushed: Future[None]  # its flush to disk, started when it was written


def _on_disk() -> Future[None]:
    done: Future[None] = Future()
    done.set_result(None)
    return done


class PublishedStates:
    def __init__(self, runtime: Runtime, index: TrialIndex, rounds: Rounds, signals: Signals, workdir: Path):
        self._runtime = runtime
        self._index = index
        self._rounds = rounds
        self._signals = signals
        self._workdir = Path(workdir)
        self._held: dict[int, _Published] = {}  # by trial
        self._writing: dict[int, float] = {}  # trial -> when its `Fork` into itself was sent

    def path(self, search_id: int, trial_id: int) -> Path:
        """Where trial `trial_id`'s published state lies: beside its checkpoint."""
        return Path(f"{checkpoint_path(self._workdir, search_id, trial_id)}{PUBLISH_SUFFIX}")

    def publish(self, trial_ids: Sequence[int], now: float, skip: Collection[int] = ()) -> None:
        """Have the trials of `trial_ids` write their state for exploits (see the module's contract)."""
        if not self._runtime.adopts_in_place:
            return
        residency = self._runtime.residency()
        actions: list[Action] = []
        for tid in trial_ids:
            t = self._index.alive.get(tid)
            if t is None or tid in self._writing or tid in skip or tid not in residency:
                continue
            held = self._held.get(tid)
            if held is not None and held.step >= t.steps:
                continue  # what it holds is this boundary's state already
            actions.append(Fork(tid, tid, PUBLISH_SUFFIX))
            self._writing[tid] = now
        if actions:
            self._runtime.apply(self._rounds.record(now, actions), actions)

    def writing(self, trial_id: int) -> bool:
        """Whether trial `trial_id`'s state is being written for exploits."""
        return trial_id in self._writing

    def answered(self, e: Forked) -> bool:
        """A trial's answer to its publishing `Fork` (True), or not one (False: another fork's; only a
        publishing one is a fork of a trial into itself)."""
        if e.into != e.trial_id:
            return False
        if self._writing.pop(e.trial_id, None) is None:
            # No longer waited for (`sync`): what it wrote replaced any state held at that path, whose step is
            # then unknown here, so it goes.
            if e.error is None:
                self.drop(e.trial_id)
            return True
        t = self._index.get(e.trial_id)
        if e.error is not None or t is None or t.status.final:
            self.drop(e.trial_id)
            return True
        path = self.path(t.search_id, e.trial_id)
        self._held[e.trial_id] = _Published(e.step, path, flush_later(path))
        self._signals.wake = True  # an exploit may be waiting for it
        return True

    def link(self, source: int, floor: int, stage: Path) -> tuple[int, Future[None]] | None:
        """Name `stage` the source's published state when it holds one from step `floor` on: (its step,
        its flush to disk); None when it holds none, or the link cannot be made."""
        held = self._held.get(source)
        if held is None or held.step < floor or source in self._writing:
            # While it is being written its file may be replaced at any moment: linked then, the step
            # recorded could be another state's.
            return None
        try:
            stage.unlink(missing_ok=True)
            os.link(held.path, stage)
        except OSError as exc:
            log.info("trial %s's published state cannot be linked (%s): it is asked for its state", source, exc)
            return None
        return held.step, held.flushed

    def keep(self, search_id: int, target: int, stage: Path) -> Path | None:
        """Another name of the staged file `stage`, made before the target may rename it and write its own
        checkpoints, to become the target's published state once it took it (`taken`). None when it
        cannot be made: nothing is lost, the target is published at its next interval."""
        if not self._runtime.adopts_in_place:
            return None
        kept = Path(f"{self.path(search_id, target)}{KEPT_SUFFIX}")
        try:
            kept.unlink(missing_ok=True)
            os.link(stage, kept)
        except OSError:
            return None
        return kept

    def taken(self, search_id: int, target: int, kept: Path | None, step: int) -> None:
        """Trial `target` took the state `kept` names (at `step`, on disk already): what it published
        before is no longer its own, this is."""
        self.drop(target, search_id)
        if kept is None or self._writing.pop(target, None) is not None:
            # A write of its former state still under way would land over this one: nothing is held, and
            # what that write leaves goes when its answer comes (`answered`).
            self.discard(kept)
            return
        path = self.path(search_id, target)
        try:
            os.replace(kept, path)
        except OSError:
            self.discard(kept)
            return
        self._held[target] = _Published(step, path, _on_disk())

    @staticmethod
    def discard(kept: Path | None) -> None:
        """A name `keep` made, for an exploit that is abandoned."""
        if kept is not None:
            with contextlib.suppress(OSError):
                kept.unlink(missing_ok=True)

    def drop(self, trial_id: int, search_id: int | None = None) -> None:
        """Trial `trial_id`'s published state goes (its trial ended, its state was replaced, or it was not
        written whole), with any temporary file of a write cut short."""
        held = self._held.pop(trial_id, None)
        t = self._index.get(trial_id)
        sid = search_id if search_id is not None else (t.search_id if t is not None else None)
        path = held.path if held is not None else (self.path(sid, trial_id) if sid is not None else None)
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
                for tmp in path.parent.glob(f".{path.name}.*.tmp"):
                    tmp.unlink(missing_ok=True)

    def sync(self, now: float, timeout_s: float) -> None:
        """Those of ended trials go; a write unanswered after `timeout_s` is no longer waited for."""
        for tid in [tid for tid in self._held if (t := self._index.get(tid)) is None or t.status.final]:
            self.drop(tid)
        for tid, since in list(self._writing.items()):
            t = self._index.get(tid)
            if t is None or t.status.final or now - since > timeout_s:
                del self._writing[tid]

    def reset(self) -> None:
        """After a restart: nothing is held, and every alive trial's published files go."""
        self._held.clear()
        self._writing.clear()
        for t in list(self._index.alive.values()):
            self.drop(t.id, t.search_id)
            self.discard(Path(f"{self.path(t.search_id, t.id)}{KEPT_SUFFIX}"))
