"""`TrialLauncher`: the controller's `Launcher` (app/executor/runtime/base.py), which the controller binds
to its runtime. It builds a trial's `TrialLaunch` from the working state: a search's trial the same way
node agents do from the database (`quanta.db.launch.search_launch`); a trace job run for real from its own
trainable and config, under `workdir/jobs`.
"""

from __future__ import annotations

from pathlib import Path

from quanta.controller.book import SearchBook
from quanta.controller.forks import Forks
from quanta.controller.trials import TrialIndex
from quanta.db.launch import search_launch
from quanta.executor.policy.knobs import MECHANISM
from quanta.executor.runtime.base import TrialLaunch


class TrialLauncher:
    def __init__(self, book: SearchBook, index: TrialIndex, workdir: Path, forks: Forks | None = None):
        self._book = book
        self._index = index
        self._forks = forks
        self.workdir = workdir

    def launch(self, trial_id: int) -> TrialLaunch:
        """What the runtime needs to start trial `trial_id` (or to write a new fork's checkpoint: one
        still waiting for its parent's state). KeyError for a trial the controller does not hold;
        ValueError for a job that has no trainable (a simulated one)."""
        t = self._index.get(trial_id) or (self._forks.waiting(trial_id) if self._forks is not None else None)
        if t is None:
            raise KeyError(trial_id)
        s = self._book.search(t.search_id)
        if s is not None:  # the same builder node agents use from the database
            return search_launch(s.spec, s.id, trial_id, t.params, self.workdir, t.resume, t.own_max_steps)
        if t.trainable is None:  # a trace job run for real needs its own trainable
            raise ValueError(f"job {trial_id} ({t.kind}) has no trainable to run")
        base = self.workdir / "jobs"
        return TrialLaunch(
            trial_id=trial_id,
            trainable=t.trainable,
            config=dict(t.config),
            max_steps=t.max_steps,
            checkpoint_path=str(base / "checkpoints" / f"trial-{trial_id}.pt"),
            resume=t.resume,
            checkpoint_every_quanta=MECHANISM.checkpoint_every_quanta,
            checkpoint_every_s=MECHANISM.checkpoint_every_s,
            log_path=str(base / "logs" / f"trial-{trial_id}.log"),
        )
