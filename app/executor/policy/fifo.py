"""FIFO: the paper's baseline. Each trial gets exclusive devices and runs to completion; the rest
wait in arrival order (strict: the head of the queue blocks those behind it)."""

from __future__ import annotations

from app.executor.policy.knobs import JudgeKnobs
from app.executor.policy.placing import Board
from app.executor.policy.types import ClusterSnapshot, Plan


class FifoPolicy:
    name = "fifo"
    judge_knobs: JudgeKnobs | None = None  # plans without verdicts
    # Its plan depends only on which trials are alive and where they run, never on time or device time
    # attained: replanning between arrivals and completions changes nothing (the simulator ticks it
    # on those events only).
    event_driven = True

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        board = Board(snapshot)
        # Running trials keep their devices: FIFO never preempts.
        for t in snapshot.resident():
            if t.running:
                board.put(t.id, t.devices)
        for t in snapshot.alive():
            if t.running:
                continue
            devices = board.choose(t)
            if devices is None:
                break  # head-of-line blocking: nobody overtakes the oldest waiting trial
            board.put(t.id, devices)
        return Plan(placement=board.placement())
