"""Tiresias (Gu et al., NSDI 2019): 2D-LAS with a discretised multi-level feedback queue.

A job's attained service is its device time (GPU-seconds: `TrialView.device_seconds`, summed over its
devices), the "two dimensions" being devices x time. Queue k holds jobs whose service has not yet
reached `queue_limits[k]` (defaults from the Tiresias simulator: 3,250 and 7,200 GPU-seconds, so three
queues); a running job moves down one queue per round once it passes its queue's limit. Queues are
served in order, FIFO (arrival) within a queue, preemptively: a job in a higher queue takes the devices
of lower ones. Starvation knob: a job that has waited longer than `starvation_factor` x the length of
its last run is promoted to the top queue (0 turns this off).

The policy is pure: levels and run/wait clocks live in `Plan.state["jobs"]` as
``{trial id: [level, since, last_run_s, was_running]}``.

Placement is count-first: the jobs to run are chosen by priority while their device counts fit the
cluster (skipping those that do not: work-conserving), then jobs that keep running stay on their
devices, and the rest take free devices (consolidated on one server when possible). So a preemption
never also moves a job that keeps running, except on a cluster of several kinds: when a chosen job
finds no free device of a kind it runs on (its kind is held by running jobs of lower priority), the
chosen jobs are placed again in queue order, a running job staying only where no job before it took
its devices, so the higher queue gets the kind it needs and the job it displaces moves or waits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from quanta.executor.policy.knobs import JudgeKnobs, TiresiasKnobs
from quanta.executor.policy.placement.board import Board, moves_nobody
from quanta.executor.policy.types import ClusterSnapshot, Plan, TrialView


class TiresiasPolicy:
    name = "tiresias"
    Knobs = TiresiasKnobs
    judge_knobs: JudgeKnobs | None = None  # plans without verdicts

    def __init__(self, knobs: TiresiasKnobs | None = None):
        k = self.knobs = knobs or TiresiasKnobs()
        self.queue_limits = tuple(float(x) for x in k.queue_limits)
        self.starvation_factor = float(k.starvation_factor)

    def level_of(self, service: float, level: int) -> int:
        """One step down from `level` if `service` passed that queue's limit."""
        if level < len(self.queue_limits) and service >= self.queue_limits[level]:
            return level + 1
        return level

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        now = snapshot.now
        old = snapshot.policy_state.get("jobs", {})
        alive = snapshot.alive()
        jobs: dict[str, list[Any]] = {}
        level: dict[int, int] = {}
        notes: list[str] = []
        for t in alive:
            key = str(t.id)
            lvl, since, last_run, was_running = old.get(key) or (0, t.arrival, 0.0, False)
            lvl = int(lvl)
            if t.running and not was_running:
                since = now  # a run began (observed this round)
            elif not t.running and was_running:
                last_run, since = now - since, now  # a run ended: the wait begins
            if t.running:
                lvl = self.level_of(t.device_seconds, lvl)
            elif (
                lvl > 0
                and self.starvation_factor > 0
                and last_run > 0
                and now - since >= self.starvation_factor * last_run
            ):
                lvl = 0
                notes.append(f"tiresias: promoted {t.id} after waiting {now - since:.0f} s")
            level[t.id] = lvl
            jobs[key] = [lvl, since, last_run, bool(t.running)]

        order = sorted(alive, key=lambda t: (level[t.id], t.arrival, t.id))
        free = len(snapshot.devices)
        chosen: list[TrialView] = []
        for t in order:
            if free <= 0:
                break
            if t.devices_needed <= free:
                chosen.append(t)
                free -= t.devices_needed
        board, placed = _place(snapshot, chosen, in_order=False)
        if len(placed) < len(chosen):  # several kinds only: on one kind the counts above always fit
            board, placed = _place(snapshot, chosen, in_order=True)
        # Work-conserving on kinds: a chosen job that found no device of a kind it runs on leaves
        # devices free for the next jobs in queue order (never the case on a cluster of one kind, where
        # the counts above always fit).
        if len(placed) < len(chosen) and board.n_free:
            for t in order:
                if t.id not in placed and board.n_free:
                    devices = board.choose(t)
                    if devices is not None:
                        board.put(t.id, devices)
        placement = board.placement()
        until = self._quiet_until(snapshot, alive, level, placement) if not notes else None
        return Plan(placement=placement, state={"jobs": jobs}, notes=tuple(notes), quiet_until=until)

    def _quiet_until(
        self,
        snapshot: ClusterSnapshot,
        alive: Sequence[TrialView],
        level: Mapping[int, int],
        placement: Mapping[str, tuple[int, ...]],
    ) -> float | None:
        """`Plan.quiet_until`: when every alive job runs where it is resident (nobody waits, nobody
        moves), the next rounds plan the same until an arrival or a completion, or until a running job's
        attained service reaches its queue's limit (it then moves down a queue, which a later round's
        order reads); None when someone waits or moves. Service grows by the job's device count per
        second, so that time is known."""
        if not moves_nobody(alive, placement):
            return None
        until = math.inf
        for t in alive:
            lvl = level[t.id]
            if lvl < len(self.queue_limits):
                until = min(until, snapshot.now + (self.queue_limits[lvl] - t.device_seconds) / len(t.devices))
        return until


def _place(snapshot: ClusterSnapshot, chosen: Sequence[TrialView], *, in_order: bool) -> tuple[Board, set[int]]:
    """A board with the `chosen` jobs placed, and the ids placed. Not `in_order`: every running job stays
    where it runs, then the others take free devices. `in_order` (queue order): a running job stays if
    no job before it took its devices, and any other takes free devices at once."""
    board = Board(snapshot)
    placed: set[int] = set()
    later: list[TrialView] = []
    for t in chosen:
        if t.running and len(t.devices) == t.devices_needed and all(board.is_free(d) for d in t.devices):
            board.put(t.id, t.devices)
            placed.add(t.id)
        elif in_order:
            devices = board.choose(t)
            if devices is not None:
                board.put(t.id, devices)
                placed.add(t.id)
        else:
            later.append(t)
    for t in later:
        devices = board.choose(t)
        if devices is not None:
            board.put(t.id, devices)
            placed.add(t.id)
    return board, placed
