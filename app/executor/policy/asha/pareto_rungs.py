"""ASHA's rungs for searches with several objectives or constraints (`SearchView.pareto`): MO-ASHA's ranking
(Schmucker et al. 2021, as Syne Tune's MO-ASHA ranks), with pause instead of kill.

A rung of such a search holds each trial's *point* there (its losses and its violation at its first report
at or past the rung, `quanta.search.pareto.point_at`), recorded once and kept after the trial ends, in the
policy's state under `PARETO_STATE` (JSON: a non-finite loss as null). Each round the trials at each rung
are put in Pareto order (`quanta.search.pareto.order`: feasible ones by non-dominated rank with an
epsilon-net tie-break, infeasible ones after them by violation, non-finite last) and each trial's loss
there becomes its position in that order. A search with a point target (`SearchView.point`) is ordered on
its points clipped at the target (`clipped`): a value better than the target's counts as the target's, so
among trials that meet the target in some objectives the others decide (with a parameter bound of 12k,
a 6k-parameter model at 0.64 accuracy no longer ranks level with a 0.3k one at 0.43, whose size is a gain
the user did not ask for). ASHA's rules then run unchanged on those positions: a held
trial in the top floor(n / eta) of its rung goes on; since a new point can move every other one's
position, a parked dominated trial that the moving front brings into the top 1/eta is promoted then,
from where it was parked. `rung_check` compares the positions at one rung with the next's.

`ranked(snapshot, levels, bracket)` returns the snapshot the rules plan on (each such trial's curve stands
for its points' steps, its records are the positions) and the points to carry to the next round.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from quanta.executor.policy.types import ClusterSnapshot, SearchView, TrialView
from quanta.search.fidelity import RungRecords
from quanta.search.pareto import order, point_at

__all__ = ["PARETO_STATE", "ParetoMemo", "ranked"]

PARETO_STATE = "pareto"  # the policy state's key of the points at each rung

# A point as kept in the state: its losses then its violation, a non-finite number as None (JSON).
_Stored = list[float | None]


def _store(losses: tuple[float, ...], violation: float) -> _Stored:
    return [v if math.isfinite(v) else None for v in (*losses, violation)]


def _load(stored: _Stored) -> tuple[tuple[float, ...], float]:
    values = [math.inf if v is None else float(v) for v in stored]
    return tuple(values[:-1]), values[-1]


@dataclass
class ParetoMemo:
    """What one policy remembers between its rounds, so that a round of a large search costs little where
    nothing happened (owned by the policy, passed to `ranked` each round; never state):

    - `positions`: per rung, how many points it held and their positions (a rung's points are only ever
      added, so a rung with no new point keeps its positions without being sorted again);
    - `views`: per trial, the view last seen and the one handed to the rules for it. A view the snapshot
      reuses (nothing happened to the trial) gets the very same stand-in again, so the rules' own memos,
      which go by identity, hold for it; a new stand-in every round made each round re-read every trial;
    - `points_out`: the points handed out last round: the views memo holds only on the state carrying them.
    """

    positions: dict[str, tuple[int, dict[str, float]]] = field(default_factory=dict)
    views: dict[int, tuple[TrialView, TrialView]] = field(default_factory=dict)
    points_out: object = None


def clipped(losses: tuple[float, ...], point: tuple[float, ...]) -> tuple[float, ...]:
    """`losses` with each objective no better than the point target's (smaller is better)."""
    return tuple(max(v, p) for v, p in zip(losses, point, strict=True))


def ranked(
    snapshot: ClusterSnapshot,
    levels: Callable[[TrialView, SearchView | None], tuple[int, ...]],
    bracket: Callable[[TrialView], int],
    memo: ParetoMemo | None = None,
) -> tuple[ClusterSnapshot, dict[str, dict[str, _Stored]]]:
    """The snapshot ASHA's rules plan on, and the points of every rung of the Pareto searches (see the module
    docstring). Trials of other searches, and their records, are untouched. `memo` (see `ParetoMemo`) only
    saves work: the answer is the same without it. When no rung has a new point, the records and reports
    of the state are handed back as the very objects the state carries (the rules then know that nothing
    they recorded moved)."""
    targets = {s.id: s.point for s in snapshot.searches if s.pareto}  # per Pareto search, its point target
    ids = targets.keys()
    state = snapshot.policy_state
    carried: Mapping[str, Mapping[str, _Stored]] = state.get(PARETO_STATE, {})
    points: dict[str, dict[str, _Stored]] = {k: dict(v) for k, v in carried.items()}
    memo = memo if memo is not None else ParetoMemo()
    if carried is not memo.points_out:
        memo.views.clear()
    views: dict[int, tuple[TrialView, TrialView]] = {}
    swapped: dict[int, TrialView] = {}
    for t in snapshot.trials:
        if t.search_id not in ids or t.status.final:
            continue
        seen = memo.views.get(t.id)
        if seen is not None and seen[0] is t:
            views[t.id] = seen  # its points were recorded when this view was first seen
            swapped[t.id] = seen[1]
            continue
        mine = levels(t, snapshot.search(t.search_id))
        group = bracket(t)
        tid = str(t.id)
        for i, level in enumerate(mine[:-1]):
            at = points.setdefault(RungRecords.key(t.search_id, i, group), {})
            if tid in at:
                continue  # recorded once and kept: its point there does not change
            p = point_at(t.points, level)
            if p is None:
                break
            at[tid] = _store(p[1], p[2])
        # Its curve, for the rules, is the steps of its points (how far it has reported); the values are
        # never read, since every rung it passed holds its position already.
        views[t.id] = (t, replace(t, curve=tuple((p[0], 0.0) for p in t.points)))
        swapped[t.id] = views[t.id][1]
    memo.views = views
    memo.points_out = points
    if not ids:
        return snapshot, points
    positions: dict[str, dict[str, float]] = {}
    changed = False
    for key, at in points.items():
        known = memo.positions.get(key)
        if known is not None and known[0] == len(at):
            positions[key] = known[1]
            continue
        changed = True
        tids = list(at)
        loaded = [_load(at[tid]) for tid in tids]
        losses = [p[0] for p in loaded]
        point = targets.get(RungRecords.search_of(key))
        if point is not None:
            losses = [clipped(v, point) for v in losses]
        best_first = order(losses, [p[1] for p in loaded])
        positions[key] = {tids[j]: float(pos) for pos, j in enumerate(best_first)}
        memo.positions[key] = (len(at), positions[key])
    new_state: dict[str, Any] = dict(state)
    for name in ("records", "reports"):
        old: Mapping[str, Any] = state.get(name, {})
        if not changed and name in state and all(old.get(key) is at for key, at in positions.items()):
            continue  # the very records the state carries: nothing in them moved
        kept = {k: v for k, v in old.items() if RungRecords.search_of(k) not in ids}
        new_state[name] = {**kept, **positions}
    trials = tuple(swapped.get(t.id, t) for t in snapshot.trials)
    resident = snapshot.resident_trials
    if resident is not None:
        resident = tuple(swapped.get(t.id, t) for t in resident)
    return replace(snapshot, trials=trials, resident_trials=resident, policy_state=new_state), points
