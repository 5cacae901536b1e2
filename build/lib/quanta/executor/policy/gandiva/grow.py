"""Gandiva's grow-shrink: a device idle for `idle_grow_s` is lent to the highest-ranked running
elastic trial of its node (placed under more devices than it needs). Capacity is always counted
without the loans (see `placement.select`), so a loan is returned the round a waiting trial can use
the device. State: `grown[trial id] = {"base": its own devices, "extra": lent devices}` and
`idle_since[device] = when it became idle`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quanta.executor.policy.knobs import GandivaKnobs
from quanta.executor.policy.placement.board import Board
from quanta.executor.policy.types import TrialView


@dataclass(frozen=True)
class Loans:
    """Grow-shrink's state after a round (JSON-ready)."""

    grown: dict[str, dict[str, Any]]
    idle_since: dict[str, float]


def grow_shrink(
    knobs: GandivaKnobs,
    board: Board,
    now: float,
    rank: Sequence[int],
    by_id: Mapping[int, TrialView],
    placed: Mapping[int, tuple[str, ...]],
    packed: set[int],
    grown_old: Mapping[str, Mapping[str, Any]],
    idle_old: Mapping[str, float],
    notes: list[str],
) -> Loans:
    """Keep last round's loans that are still free (or return them), lend devices idle long enough,
    and record which devices are idle since when. Puts the loans on `board`."""
    order, node_of = board.order, board.node_of
    grown: dict[str, dict[str, Any]] = {}
    for tid in rank:
        g = grown_old.get(str(tid))
        if g is None or tid not in placed:
            continue
        extra = [d for d in g.get("extra", []) if d in board.slots]
        if knobs.grow_shrink and extra and tid not in packed and all(board.is_free(d) for d in extra):
            board.put(tid, tuple(extra))
            grown[str(tid)] = {"base": list(placed[tid]), "extra": extra}
        elif extra:
            notes.append(f"trial {tid} shrinks back to {','.join(placed[tid])}")
    if knobs.grow_shrink:
        got: set[int] = set()
        for d in sorted(board.free(), key=lambda d: order[d]):
            if now - float(idle_old.get(d, now)) < knobs.idle_grow_s:
                continue
            for tid in rank:
                t = by_id[tid]
                if (
                    tid in placed
                    and tid not in got
                    and t.elastic
                    and tid not in packed
                    and all(node_of.get(x) == node_of[d] for x in placed[tid])
                ):
                    board.put(tid, (d,))
                    g = grown.setdefault(str(tid), {"base": list(placed[tid]), "extra": []})
                    g["extra"] = sorted([*g["extra"], d], key=lambda x: order[x])
                    got.add(tid)
                    notes.append(f"trial {tid} grows onto idle {d}")
                    break
    idle = {d: float(idle_old.get(d, now)) for d in board.free()}
    return Loans(grown, idle)
