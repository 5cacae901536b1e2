"""FIFO: the paper's baseline. Each trial gets exclusive devices and runs to completion; the rest
wait in arrival order (strict: the head of the queue blocks those behind it). On a cluster of several
device kinds a waiting trial blocks only the kinds it can run on: a later trial may take devices of a
kind no earlier waiting trial could ever use (that delays none of them)."""

from __future__ import annotations

from quanta.executor.policy.knobs import FifoKnobs, JudgeKnobs
from quanta.executor.policy.placement.board import Board
from quanta.executor.policy.types import ClusterSnapshot, Plan


class FifoPolicy:
    name = "fifo"
    Knobs = FifoKnobs
    judge_knobs: JudgeKnobs | None = None  # plans without verdicts
    # Its plan depends only on which trials are alive and where they run, never on time or device time
    # attained: replanning between arrivals and completions changes nothing (the simulator ticks it
    # on those events only).
    event_driven = True

    def __init__(self, knobs: FifoKnobs | None = None):
        self.knobs = knobs or FifoKnobs()

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        board = Board(snapshot)
        # Running trials keep their devices: FIFO never preempts.
        for t in snapshot.resident():
            if t.running:
                board.put(t.id, t.devices)
        all_kinds = set(board.eff.kinds.counts)
        open_kinds: set[str] | None = None  # None: every kind (no trial waits yet)
        for t in snapshot.alive():
            if t.running:
                continue
            devices = board.choose(t, open_kinds)
            if devices is not None:
                board.put(t.id, devices)
                continue
            # Head-of-line blocking: nobody overtakes the oldest waiting trial on the kinds it can use.
            blocked = {k for k in all_kinds if board.eff.usable(t, k)} or all_kinds
            open_kinds = (all_kinds if open_kinds is None else open_kinds) - blocked
            if not open_kinds:
                break
        return Plan(placement=board.placement())
