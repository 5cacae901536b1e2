"""What a trial's process needs to start (`TrialLaunch`), built one way for everyone: the controller
builds it from its working state, a node agent from the database (it only ever receives ids).

Paths live under the working directory (in distributed mode: the checkpoint store every node reads):
`search-<id>/checkpoints/trial-<id>.pt` and `search-<id>/logs/trial-<id>.log`. A trial's log holds its
stdout and stderr, bounded in size (`quanta.executor.runtime.trial_log`); `trial_log_path` names it for readers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlmodel import Session

from quanta.db.models import SearchRow, TrialRow
from quanta.executor.actions import TrialLaunch
from quanta.spec import SearchSpec, spec_from_stored


def search_dir(workdir: str | Path, search_id: int) -> Path:
    return Path(workdir) / f"search-{search_id}"


def trial_log_path(workdir: str | Path, search_id: int, trial_id: int) -> Path:
    """Where trial `trial_id` of search `search_id` writes its output."""
    return search_dir(workdir, search_id) / "logs" / f"trial-{trial_id}.log"


def checkpoint_path(workdir: str | Path, search_id: int, trial_id: int) -> Path:
    """Where trial `trial_id` of search `search_id` keeps its checkpoint (a fork's starts as its parent's
    state, written there before it first runs)."""
    return search_dir(workdir, search_id) / "checkpoints" / f"trial-{trial_id}.pt"


def search_launch(
    spec: SearchSpec,
    search_id: int,
    trial_id: int,
    params: dict[str, Any],
    workdir: str | Path,
    resume: bool,
    max_steps: int | None = None,
) -> TrialLaunch:
    """The launch of trial `trial_id` of a search: its config is the seed, the spec's fixed config and
    the trial's parameters; it restores from its checkpoint when `resume` (and the file exists). Its step
    budget is `max_steps` when it has its own (a fork's), else the spec's."""
    return TrialLaunch(
        trial_id=trial_id,
        trainable=spec.trainable,
        config={"seed": spec.seed, **spec.config, **params},
        max_steps=spec.budget.max_steps if max_steps is None else max_steps,
        checkpoint_path=str(checkpoint_path(workdir, search_id, trial_id)),
        resume=resume,
        checkpoint_every_quanta=spec.scheduler.checkpoint_every_quanta,
        checkpoint_every_s=spec.scheduler.checkpoint_every_s,
        log_path=str(trial_log_path(workdir, search_id, trial_id)),
        metric=spec.metric.name,
        # every value the search reads (objectives first, then bounded ones): what callbacks check for
        metrics=tuple(dict.fromkeys([o.name for o in spec.objectives] + [c.name for c in spec.constraints])),
        mutable=spec.mutable,
    )


def launch_from_db(session: Session, trial_id: int, workdir: str | Path, *, epoch: int = 0) -> TrialLaunch:
    """The same launch, from the database. The trial resumes from its checkpoint when it has run before:
    it checkpointed, crashed and is retried, or runs under a later assignment (`epoch` > 1: moved to
    another node, or restarted after its node was lost)."""
    trial = session.get(TrialRow, trial_id)
    if trial is None:
        raise KeyError(f"trial {trial_id} not found")
    search = session.get(SearchRow, trial.search_id)
    if search is None:
        raise KeyError(f"trial {trial_id}: search {trial.search_id} not found (trace jobs run on one machine only)")
    spec = spec_from_stored(search.spec)
    resume = trial.checkpoint_step is not None or trial.retries > 0 or epoch > 1
    return search_launch(spec, trial.search_id, trial_id, trial.params, workdir, resume, trial.max_steps)
