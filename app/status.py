"""The lifecycle states of searches and trials: one vocabulary for the store, the controller, the API,
the SDK and the simulator.

Both are `StrEnum`s, so a member *is* its string: it is stored in the database, sent as JSON and
compared with a plain string read back from a row unchanged (``SearchStatus.RUNNING == "running"``).
This module is the ground floor: it imports nothing from `app`, so every layer may import it.
"""

from __future__ import annotations

from enum import StrEnum


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

# Why a trial a user stopped on its own ended (`POST /trials/{id}/stop`): unlike the trials its search's
# end stopped, it stays stopped when the search is resumed.
TRIAL_STOPPED_BY_USER = "stopped by user"


def resumable_trial(status: str, reason: str | None) -> bool:
    """Whether a trial of an ended search goes on when the search is resumed: one its search's end
    stopped (a user's stop of the search, an interrupt, the target or the time budget), from its
    checkpoint when it has one. Completed, killed (judged), failed trials, and a trial a user stopped
    on its own, stay as they are."""
    return status == TrialStatus.STOPPED and reason != TRIAL_STOPPED_BY_USER
