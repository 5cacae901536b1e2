"""Time-slicing by stride scheduling: more trials than devices, each getting device time in
proportion to its weight, one quantum at a time (Gandiva's suspend-resume, equal weights here).

Each trial's *pass* is its attained device time divided by its weight plus an offset fixed when the
policy first sees it (the smallest pass among trials then alive), so a newcomer joins the rotation
instead of monopolising devices until it has caught up. Every quantum the trials with the smallest
passes run. Subclasses change `weight()`; the offsets live in `Plan.state` so the policy stays pure.
"""

from __future__ import annotations

from quanta.executor.policy.knobs import JudgeKnobs, TimesliceKnobs
from quanta.executor.policy.placement.board import Board
from quanta.executor.policy.types import ClusterSnapshot, Plan, TrialView


class TimeslicePolicy:
    name = "timeslice"
    Knobs = TimesliceKnobs
    judge_knobs: JudgeKnobs | None = None  # plans without verdicts

    def __init__(self, knobs: TimesliceKnobs | None = None):
        self.knobs = knobs or TimesliceKnobs()

    def weight(self, trial: TrialView, snapshot: ClusterSnapshot) -> float:
        """Share of device time relative to others (> 0). Equal for plain time-slicing."""
        return 1.0

    def passes(self, snapshot: ClusterSnapshot) -> tuple[dict[int, float], dict[str, float]]:
        """Stride pass per alive trial, and the offsets to carry in state."""
        old: dict[str, float] = dict(snapshot.policy_state.get("offsets", {}))
        alive = snapshot.alive()
        raw = {t.id: t.device_seconds / max(self.weight(t, snapshot), 1e-9) for t in alive}
        known = [raw[t.id] + old[str(t.id)] for t in alive if str(t.id) in old]
        floor = min(known) if known else 0.0
        offsets: dict[str, float] = {}
        for t in alive:
            key = str(t.id)
            offsets[key] = old[key] if key in old else max(0.0, floor - raw[t.id])
        return {t.id: raw[t.id] + offsets[str(t.id)] for t in alive}, offsets

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        passes, offsets = self.passes(snapshot)
        # Passes are compared to the nearest quarter of a quantum: trials that ran the same number of
        # quanta tie even though their measured device time differs by the milliseconds a real park
        # takes, so the tie rule below (keep the running trial) holds on real processes too, instead
        # of millisecond noise deciding who is switched out.
        grain = max(snapshot.quantum_s, 1e-9) / 4.0
        order = sorted(
            snapshot.alive(),
            # Smallest pass first; on ties keep running trials (no needless switch), then oldest.
            key=lambda t: (round(passes[t.id] / grain), not t.running, t.arrival, t.id),
        )
        board = Board(snapshot)
        for t in order:
            devices = board.choose(t)
            if devices is not None:
                board.put(t.id, devices)
        return Plan(placement=board.placement(), state={"offsets": offsets})
