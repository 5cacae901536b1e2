"""The lifecycle states of searches and trials: one vocabulary for the store, the controller, the API,
the SDK and the simulator.

Both are `StrEnum`s, so a member *is* its string: it is stored in the database, sent as JSON and
compared with a plain string read back from a row unchanged (``SearchStatus.RUNNING == "running"``).
`TrialCounts` is how a search's trials stand, as every view counts them (the `quanta run` summary and
progress bar, `quanta status`, the API and the dashboard).
This module is the ground floor: it imports nothing from `quanta`, so every layer may import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar


class SearchStatus(StrEnum):
    """Lifecycle of a search. `QUEUED`: submitted, not yet picked up by the controller; `RUNNING`:
    the controller creates and schedules its trials; `PAUSED`: its trials are parked and no new ones
    start; the rest are final (`STOPPED` by a user, `COMPLETED` by its budget or target, `FAILED`)."""

    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    STOPPED = "stopped"
    FAILED = "failed"

    @property
    def final(self) -> bool:
        return self in _SEARCH_FINAL

    @property
    def active(self) -> bool:
        """Not final: queued, running or paused."""
        return self in _SEARCH_ACTIVE


class TrialStatus(StrEnum):
    """Lifecycle of a trial. `QUEUED` trials never ran (or wait to restart from a checkpoint);
    `RUNNING` trials are resident in a process (running or parked); the rest are final: `COMPLETED`
    (ran its steps), `STOPPED` (ended because its search ended, by target or budget, or by a user: nothing
    was judged), `KILLED` (the policy judged it hopeless; the trial's `reason` holds that verdict),
    `FAILED` (raised, or crashed past its retries)."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    STOPPED = "stopped"
    KILLED = "killed"
    FAILED = "failed"

    @property
    def final(self) -> bool:
        return self in _TRIAL_FINAL


# Tuples, in lifecycle order, so they serve as SQL `IN (...)` arguments and as stable iteration orders.
SEARCH_ACTIVE: tuple[SearchStatus, ...] = (SearchStatus.QUEUED, SearchStatus.RUNNING, SearchStatus.PAUSED)
SEARCH_STARTED: tuple[SearchStatus, ...] = (SearchStatus.RUNNING, SearchStatus.PAUSED)  # the controller holds these
SEARCH_FINAL: tuple[SearchStatus, ...] = (SearchStatus.COMPLETED, SearchStatus.STOPPED, SearchStatus.FAILED)
TRIAL_ACTIVE: tuple[TrialStatus, ...] = (TrialStatus.QUEUED, TrialStatus.RUNNING)
TRIAL_FINAL: tuple[TrialStatus, ...] = (
    TrialStatus.COMPLETED,
    TrialStatus.STOPPED,
    TrialStatus.KILLED,
    TrialStatus.FAILED,
)

_SEARCH_FINAL = frozenset(SEARCH_FINAL)
_SEARCH_ACTIVE = frozenset(SEARCH_ACTIVE)
_TRIAL_FINAL = frozenset(TRIAL_FINAL)


@dataclass(frozen=True)
class TrialCounts:
    """How a search's trials stand, each in one bucket: `queued` (not started yet), `running` (computing
    now), `parked` (started, alive and not computing now: suspended between quanta, or held at a rung
    waiting to be promoted), and the final ones by status. `evaluated` counts what a progress bar shows:
    the trials that are final or have reached a rung (parked themselves at a step limit to be judged).
    Counting final trials alone kept a successive-halving search's bar at 0 for most of its run, since
    most of its trials wait at a rung until the search ends; a trial judged at its first rung has done
    the work the search asked of it so far, and it stays counted if it is promoted and runs on."""

    queued: int = 0
    running: int = 0
    parked: int = 0
    completed: int = 0
    stopped: int = 0
    killed: int = 0
    failed: int = 0
    evaluated: int = 0

    BUCKETS: ClassVar[tuple[str, ...]] = (
        "queued", "running", "parked", "completed", "stopped", "killed", "failed"
    )  # fmt: skip

    @property
    def total(self) -> int:
        return sum(getattr(self, b) for b in self.BUCKETS)

    @property
    def done(self) -> int:
        """Trials in a final state."""
        return self.completed + self.stopped + self.killed + self.failed

    def text(self) -> str:
        """The buckets that are not empty, in lifecycle order: "2 running, 3 parked, 1 failed"."""
        parts = [f"{getattr(self, b)} {b}" for b in self.BUCKETS if getattr(self, b)]
        return ", ".join(parts) or "none"

    def as_dict(self) -> dict[str, int]:
        return {**{b: getattr(self, b) for b in self.BUCKETS}, "evaluated": self.evaluated}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialCounts:
        """From `as_dict`'s output (buckets missing: 0; unknown keys ignored)."""
        names = (*cls.BUCKETS, "evaluated")
        return cls(**{k: int(v) for k, v in data.items() if k in names and isinstance(v, int)})


def count_trials(trials: Iterable[tuple[str, bool, bool, bool]]) -> TrialCounts:
    """The `TrialCounts` of trials given as (status, started, computing, at_rung): its `TrialStatus`;
    whether it ever started (a process ran it); whether it computes now; whether it ever parked itself at
    a rung. An alive trial computing now is running; alive and started, parked; else queued."""
    n = dict.fromkeys(TrialCounts.BUCKETS, 0)
    evaluated = 0
    for status, started, computing, at_rung in trials:
        if status in _TRIAL_FINAL:
            n[str(status)] += 1
            evaluated += 1
            continue
        n["running" if computing else "parked" if started else "queued"] += 1
        evaluated += at_rung
    return TrialCounts(**n, evaluated=evaluated)


# Why a trial a user stopped on its own ended (`POST /trials/{id}/stop`): unlike the trials its search's
# end stopped, it stays stopped when the search is resumed.
TRIAL_STOPPED_BY_USER = "stopped by user"


def resumable_trial(status: str, reason: str | None) -> bool:
    """Whether a trial of an ended search goes on when the search is resumed: one its search's end
    stopped (a user's stop of the search, an interrupt, the target or the time budget), from its
    checkpoint when it has one. Completed, killed (judged), failed trials, and a trial a user stopped
    on its own, stay as they are."""
    return status == TrialStatus.STOPPED and reason != TRIAL_STOPPED_BY_USER
