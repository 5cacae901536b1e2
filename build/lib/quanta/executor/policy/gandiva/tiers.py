"""Gandiva's tiers: which trials run exclusively, which are guarded, and the stride rotation of the rest.

Each round ranks the alive trials (see the package docstring): the *exclusive* tier holds the top-M
judged trials by promise (an incumbent keeps `swap_margin` of extra promise), the *guard* holds trials
not judged yet (oldest first, a running one kept running), the *shared* tier the rest, ordered by
stride pass with weight `1 + promise_weight * P(reach)`. Passes advance incrementally (only time spent
in the shared tier counts, at the weight it was spent at); a trial entering the tier joins at the
tier's lowest pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quanta.executor.policy.knobs import GandivaKnobs
from quanta.executor.policy.types import NOT_JUDGED, ClusterSnapshot, TrialView, Verdict

EXCLUSIVE, GUARD, SHARED = "exclusive", "guard", "shared"
NEUTRAL_P = 0.5  # P(reach) assumed for the weight of a trial that cannot be judged


@dataclass(frozen=True)
class Standing:
    """What the policy makes of one trial's verdict this round."""

    verdict: Verdict
    newcomer: bool  # the starvation guard applies
    weight: float  # stride weight if shared

    @property
    def promise(self) -> float | None:
        return self.verdict.promise if self.verdict.judged else None


@dataclass(frozen=True)
class Ranking:
    """The round's tiers: `exclusive` in rank order, `tier` and stride `passes` of every candidate,
    and `pool` (guard then shared trials, in rotation order)."""

    exclusive: tuple[TrialView, ...]
    tier: dict[int, str]
    passes: dict[int, float]
    pool: tuple[TrialView, ...]
    notes: tuple[str, ...]


class Standings:
    """Standing of each trial from its verdict; a not-judged trial's standing is one of two shared
    objects (a simulated cluster asks for thousands of trace jobs a round)."""

    def __init__(self, knobs: GandivaKnobs):
        self.knobs = knobs
        neutral = 1.0 + knobs.promise_weight * NEUTRAL_P
        self._newcomer = Standing(NOT_JUDGED, True, neutral)
        self._settled = Standing(NOT_JUDGED, False, neutral)

    def of(self, trial: TrialView, snapshot: ClusterSnapshot) -> Standing:
        search = snapshot.search(trial.search_id)
        min_steps = self.knobs.min_steps(trial, search)
        verdict = snapshot.verdicts.get(trial.id, NOT_JUDGED)
        if not verdict.judged:
            # The guard lasts until judged, but at most twice min_steps: a trial that never reports
            # (or reports too rarely to fit) must not hold the front of the rotation forever.
            newcomer = bool(min_steps) and trial.steps_done < 2 * min_steps
            return self._newcomer if newcomer else self._settled
        assert verdict.p_reach is not None
        return Standing(verdict, False, 1.0 + self.knobs.promise_weight * verdict.p_reach)


def rank(
    knobs: GandivaKnobs,
    snapshot: ClusterSnapshot,
    cands: Sequence[TrialView],
    standing: Mapping[int, Standing],
    old: Mapping[str, Mapping[str, Any]],
    old_exclusive: set[int],
    stopped: set[int],
) -> Ranking:
    """Tiers and rotation order of the candidates (alive, not stopped), given last round's per-trial
    state `old` (tier, pass, device time, weight) and exclusive set."""
    notes: list[str] = []
    n_dev = len(snapshot.devices)

    def prev_tier(tid: int) -> str | None:
        entry = old.get(str(tid))
        return None if entry is None else entry.get("tier")

    # -- exclusive tier: top-M judged trials by promise (incumbents get swap_margin) ---------------
    m = knobs.top_m if knobs.top_m is not None else max(1, n_dev // 2)

    def eff(t: TrialView) -> float:
        bonus = knobs.swap_margin if prev_tier(t.id) == EXCLUSIVE else 0.0
        return (standing[t.id].promise or 0.0) + bonus

    ranked_judged = sorted(
        (t for t in cands if standing[t.id].verdict.judged), key=lambda t: (-eff(t), t.arrival, t.id)
    )
    exclusive: list[TrialView] = []
    used = 0
    for t in ranked_judged:
        if len(exclusive) >= m:
            break
        taken = {e.id for e in exclusive} | {t.id}
        others = (u.devices_needed for u in cands if u.id not in taken and u.devices_needed <= n_dev)
        reserve = min(others, default=0)
        if used + t.devices_needed + reserve > n_dev:
            break  # keep a device for the rotation; never skip a higher trial for a lower one
        exclusive.append(t)
        used += t.devices_needed
    excl_ids = {t.id for t in exclusive}
    tiers: dict[int, str] = {}
    for t in cands:
        if t.id in excl_ids:
            tiers[t.id] = EXCLUSIVE
        elif standing[t.id].newcomer:
            tiers[t.id] = GUARD
        else:
            tiers[t.id] = SHARED
    for t in exclusive:
        if t.id not in old_exclusive:
            notes.append(f"trial {t.id} runs exclusively (P(reach target) {standing[t.id].verdict.p_reach:.3f})")
    for tid in sorted(old_exclusive - excl_ids - stopped):
        if tid in tiers:
            notes.append(f"trial {tid} returns to time-sharing")

    # -- stride passes (incremental; only shared time counts) --------------------------------------
    passes: dict[int, float] = {}
    for t in cands:
        entry = old.get(str(t.id)) or {}
        p = float(entry.get("pass", 0.0))
        if entry.get("tier") == SHARED:
            spent = max(0.0, t.device_seconds - float(entry.get("ds", 0.0)))
            p += spent / max(float(entry.get("w", 1.0)), 1e-9)
        passes[t.id] = p
    continuing = [passes[t.id] for t in cands if tiers[t.id] == SHARED and prev_tier(t.id) == SHARED]
    if continuing:
        vt = min(continuing)
        for t in cands:
            if tiers[t.id] == SHARED and prev_tier(t.id) != SHARED:
                passes[t.id] = max(passes[t.id], vt)

    guard = sorted((t for t in cands if tiers[t.id] == GUARD), key=lambda t: (not t.running, t.arrival, t.id))
    # Passes are compared in grains of a quarter of the smallest pass step a quantum can make (weight
    # at most 1 + promise_weight): trials a quantum apart stay apart, while the milliseconds by which
    # real parks make measured device time differ do not decide who is switched out (a tie keeps
    # the running trial, as in TimeslicePolicy).
    grain = max(snapshot.quantum_s, 1e-9) / (4.0 * (1.0 + knobs.promise_weight))
    shared = sorted(
        (t for t in cands if tiers[t.id] == SHARED),
        key=lambda t: (round(passes[t.id] / grain), not t.running, t.arrival, t.id),
    )
    return Ranking(tuple(exclusive), tiers, passes, tuple(guard + shared), tuple(notes))
