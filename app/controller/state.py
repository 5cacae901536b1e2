"""The controller's working copy of searches and trials (`SearchState`, `TrialState`), and the flags
(`Signals`) by which its parts tell the tick to plan before the quantum is over.

These are plain mutable records owned by the controller package: the store holds the truth, these
mirror it in memory (rebuilt by `SearchBook.load` after a restart). Code outside the package reads them
(e.g. a progress bar) but never changes them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from quanta.controller.health import SearchHealth
from quanta.db.models import FIRST_ADMIN
from quanta.search.pareto import Losses, Point, PointReader
from quanta.search.searcher import Searcher
from quanta.spec import SearchSpec
from quanta.status import SearchStatus, TrialCounts, TrialStatus


@dataclass
class TrialState:
    id: int
    search_id: int
    number: int
    params: dict[str, Any]
    vals: dict[str, Any]
    created_at: float
    status: TrialStatus = TrialStatus.QUEUED
    steps: int = 0
    metric: float | None = None
    best: float | None = None
    curve: list[tuple[int, float]] = field(default_factory=list)
    device_seconds_base: float = 0.0  # device time of earlier processes (before a restart)
    device_seconds: float = 0.0
    retries: int = 0
    resume: bool = False
    started_at: float | None = None
    finished_at: float | None = None
    rate_solo: float | None = None
    rate_packed: float | None = None
    # Solo rate per device kind: measured on devices of that kind, or known beforehand (a simulated
    # job's throughput table); 0 = it cannot run on that kind. See `TrialView.kind_rates`.
    kind_rates: dict[str, float] = field(default_factory=dict)
    memory_mb: float | None = None
    elastic: bool = False
    error: str | None = None
    reason: str | None = None  # why it ended early: the verdict that killed it, or what stopped it
    devices: tuple[str, ...] = ()
    devices_needed: int = 1
    max_steps: int = 0
    kind: str = ""  # job type for trace jobs (simulator); empty for search trials
    trainable: str | None = None  # trace jobs run for real: their own trainable and config
    config: dict[str, Any] = field(default_factory=dict)
    owner: str = ""  # the user of a trace job (a search's trials belong to the search's owner)
    at_rung: bool = False  # it has parked itself at a step limit (a rung) at least once: it was judged there
    # Lineage: the trial whose state it started from (a fork; its curve up to then is this one's too) and
    # that trial's step then; and its own step budget when not its search's (a fork's).
    parent_id: int | None = None
    fork_step: int | None = None
    own_max_steps: int | None = None
    # A search with several objectives or constraints (`SearchSpec.pareto`): its reports as points (step,
    # losses, violation; `quanta.search.pareto`), in step order, and the reader that makes them.
    points: list[Point] = field(default_factory=list)
    reader: PointReader | None = None

    @property
    def exit_pending(self) -> bool:
        """A process of it may still be ending: it is running, or a process started (`devices` held) whose
        exit is not handled yet. Its checkpoint file and row may then still change (a process stopped at
        a boundary may write one last checkpoint before it reads the stop), so the file is not taken as
        its state until this is False."""
        return self.status == TrialStatus.RUNNING or bool(self.devices)


@dataclass
class SearchState:
    id: int
    spec: SearchSpec
    searcher: Searcher
    started_at: float
    status: SearchStatus = SearchStatus.RUNNING
    trials: dict[int, TrialState] = field(default_factory=dict)
    created: int = 0
    best_trial: int | None = None
    best: float | None = None
    reached_at: float | None = None
    owner: str = FIRST_ADMIN  # the name of the user the search belongs to
    waiting: str | None = None  # why it makes no new trials (its owner's quota), as stored
    idle_seconds: float = 0.0  # the time it spent ended before it was resumed: not counted by its time budget
    health: SearchHealth = field(default_factory=SearchHealth)  # whether it can succeed at all
    counts: TrialCounts = field(default_factory=TrialCounts)  # how its trials stand, as last stored
    forked: int = 0  # of the `created` trials, those forked from others (not the searcher's: no budget)
    forks_open: int = 0  # fork requests being carried out (it does not end for lack of trials meanwhile)
    # A search with several objectives or constraints: the feasible, finite, non-dominated losses of every
    # point reported so far (what a hypervolume target is measured on).
    front: list[Losses] = field(default_factory=list)

    def point_reader(self) -> PointReader:
        """A fresh reader of a trial's reports into points, for this search's objectives and bounds."""
        return PointReader(self.spec.objectives, self.spec.bounds)

    def add_to_front(self, losses: Losses) -> bool:
        """Add a feasible, finite point's losses to `front` unless one there dominates or equals it (then
        False); those it dominates leave."""
        for f in self.front:
            if all(a <= b for a, b in zip(f, losses, strict=True)):
                return False
        self.front = [f for f in self.front if not all(a <= b for a, b in zip(losses, f, strict=True))]
        self.front.append(losses)
        return True

    def alive(self) -> list[TrialState]:
        return [t for t in self.trials.values() if not t.status.final]


@dataclass
class Signals:
    """Set by the controller's parts, read and cleared by its tick and step.

    `wake`: something changed since the last tick (a trial ended, a search started, the target was
    reached): stop waiting for events and plan now. `replan`: plan at the next tick even if the quantum
    has not passed (a new trial is placed now, not a quantum later). `freed_at`: when (`perf_counter`)
    the first event since the last tick freed a device (an exit, a park at a step limit), so the tick
    can measure how long the controller took to act on it (the "react" latency)."""

    wake: bool = False
    replan: bool = True
    freed_at: float | None = None

    def freed(self) -> None:
        """A device was freed: plan now, and time the reaction from the first such event."""
        self.wake = True
        if self.freed_at is None:
            self.freed_at = time.perf_counter()


def objective_loss(spec: SearchSpec, metric: float | None) -> float | None:
    """The searcher's loss for a trial's metric (None while it has none)."""
    return None if metric is None else spec.metric.loss(metric)
