"""Moving placed trials between device kinds while that raises their summed effective rate (Gavel's
max-throughput allocation, Narayanan et al., OSDI 2020; effective rates: `quanta.executor.policy.placement.kinds`).

`rebalance` exchanges placed trials between kinds (and moves them onto free devices of another kind)
while that raises the sum of effective rates of the placed trials: for every ordered pair of kinds
(a, b), trials on b ordered by what they gain on a are paired with trials on a (or free slots of a)
ordered by what they lose on b, and each pair is exchanged while the gain beats the loss by more than
the moves cost (`MOVE_MARGIN` for each trial that would leave the devices it is resident on; nothing for
one that moves anyway). For two kinds this is the exchange argument of Gavel's max-throughput
allocation: the trial with a 4x speed-up on a V100 gets the V100 before one with 1.5x. Only trials alone
on their devices, on exactly the devices they need, of one kind, are exchanged (packs and grow-shrink
loans stay where their policy put them), and only between device sets of the same size (a node's free
devices in chunks, for multi-device trials; wholly free nodes of one kind, for a trial larger than a
node). Two moves trade whole nodes between trials of different sizes (`quanta.executor.policy.placement.kind_nodes`):
a large trial on fast nodes gives them up to smaller trials that gain more there (`give_way`), and a
large trial on slow nodes takes fast nodes from smaller trials that lose less there (`take_nodes`). With
`kind_aware` off nothing moves (`rebalance` returns the placement as it is).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from quanta.executor.policy.placement import kind_nodes
from quanta.executor.policy.placement.kind_nodes import EVICT_MARGIN, MOVE_MARGIN, Placed
from quanta.executor.policy.placement.kinds import Effective, kind_map
from quanta.executor.policy.types import ClusterSnapshot, TrialView

__all__ = ["EVICT_MARGIN", "MOVE_MARGIN", "rebalance"]


@dataclass
class _Slot:
    """A device set of one kind and size that a movable trial occupies (or that is free)."""

    kind: str
    devices: tuple[str, ...]
    trial: TrialView | None
    cost: float  # what moving its trial away costs (MOVE_MARGIN if it is resident there)


def rebalance(
    snapshot: ClusterSnapshot,
    placement: Mapping[str, Sequence[int]],
    eff: Effective | None = None,
    *,
    take_nodes: bool = True,
) -> tuple[dict[str, tuple[int, ...]], int]:
    """`placement` with trials exchanged between kinds while that raises their summed effective rate
    (the module docstring), and how many trials moved. Unchanged (a copy) on a cluster of one kind or
    with `kind_aware` off. `take_nodes` off leaves out `kind_nodes.take_nodes` (the share layer's pass
    across users' groups)."""
    out = {d: tuple(ids) for d, ids in placement.items() if ids}
    km = kind_map(snapshot.devices)
    if not snapshot.kind_aware or not km.several or not out:
        return out, 0
    eff = eff or Effective(snapshot)
    devices_of: dict[int, list[str]] = {}
    for d, ids in out.items():
        for i in ids:
            devices_of.setdefault(i, []).append(d)
    moved: set[int] = set()
    placed = Placed(snapshot, km, eff, out, devices_of, moved)  # changed in place by every move below
    # Trials alone on exactly the devices they need, all of one kind: the movable ones.
    slots: dict[int, list[_Slot]] = {}  # by size
    for t in snapshot.alive():
        kind = placed.kind_alone(t)
        if kind is not None:
            devs = tuple(sorted(devices_of[t.id]))
            slots.setdefault(len(devs), []).append(_Slot(kind, devs, t, placed.cost(t)))
    if not slots:
        return out, 0
    members = placed.members
    # Larger trials first: they need a node's free devices together, which single moves would break up.
    for size in sorted(slots, reverse=True):
        group = slots[size]
        # Free device sets of this size: a node's free devices (of one kind) in chunks, so that a
        # multi-device trial stays on one node; for a trial larger than a node (it spans nodes anyway),
        # wholly free nodes of one kind, as many as it needs. Without these an 8-device trial stayed on
        # a slow kind while two idle nodes of a fast one stood by. (Partly free nodes were tried as well,
        # the freest first: mean JCT rose on the V100+K80 trace, since they break up holes that new
        # trials need.)
        free_by_node: dict[str, list[str]] = {}
        for dv in snapshot.devices:
            if dv.id not in out:
                free_by_node.setdefault(dv.node, []).append(dv.id)
        whole: dict[str, list[list[str]]] = {}  # per kind: the devices of each of its wholly free nodes
        for node, ds in free_by_node.items():
            if len(km.node_kinds[node]) != 1:
                continue
            kind = next(iter(km.node_kinds[node]))
            for i in range(0, len(ds) - size + 1, size):
                group.append(_Slot(kind, tuple(ds[i : i + size]), None, 0.0))
            if size > len(ds) == len(members[node]):
                whole.setdefault(kind, []).append(ds)
        for kind, nodes in whole.items():
            taken: list[str] = []
            for ds in nodes:
                taken.extend(ds)
                if len(taken) >= size:
                    group.append(_Slot(kind, tuple(taken[:size]), None, 0.0))
                    taken = []
        now_moved: set[int] = set()
        _exchange(group, eff, now_moved)
        if not now_moved:
            continue
        moved |= now_moved
        for s in group:
            if s.trial is not None and s.trial.id in now_moved:
                for d in devices_of[s.trial.id]:
                    out.pop(d, None)
        for s in group:
            if s.trial is not None and s.trial.id in now_moved:
                devices_of[s.trial.id] = list(s.devices)
                for d in s.devices:
                    out[d] = (s.trial.id,)
    if take_nodes:
        kind_nodes.take_nodes(placed)
    kind_nodes.give_way(placed)
    if not moved:
        return out, 0
    order = km.order
    return dict(sorted(out.items(), key=lambda kv: order[kv[0]])), len(moved)


def _exchange(group: list[_Slot], eff: Effective, moved: set[int]) -> None:
    """Exchange the occupants of same-size slots between kinds while the summed effective rate rises
    by more than the moves cost (slots are changed in place; `moved` gathers the trials that moved)."""
    kinds = sorted({s.kind for s in group})
    for _ in range(3 * len(kinds) * len(kinds)):
        changed = False
        for a in kinds:
            for b in kinds:
                if a != b and _exchange_pair(group, a, b, eff, moved):
                    changed = True
        if not changed:
            return


def _exchange_pair(group: list[_Slot], a: str, b: str, eff: Effective, moved: set[int]) -> bool:
    """Trials on kind b that gain on a, best gain first, take the slots of kind a whose occupants (or
    emptiness) lose least by going to b; each exchange only when it pays."""

    def gain(s: _Slot) -> float:  # what the occupant of a b-slot gains by moving to a
        assert s.trial is not None
        e = eff.of(s.trial)
        ea, eb = e.get(a, 1.0), e.get(b, 1.0)
        return ea - eb - s.cost if ea > 0 else -1.0

    def loss(s: _Slot) -> float:  # what the occupant of an a-slot loses by moving to b
        if s.trial is None:
            return 0.0
        e = eff.of(s.trial)
        ea, eb = e.get(a, 1.0), e.get(b, 1.0)
        return ea - eb + s.cost if eb > 0 else float("inf")

    movers = sorted((s for s in group if s.kind == b and s.trial is not None), key=lambda s: (-gain(s), s.devices))
    seats = sorted((s for s in group if s.kind == a), key=lambda s: (loss(s), s.trial is not None, s.devices))
    changed = False
    for mover, seat in zip(movers, seats, strict=False):
        g, lo = gain(mover), loss(seat)
        if g - lo <= 1e-9:
            break
        assert mover.trial is not None
        moved.add(mover.trial.id)
        if seat.trial is not None:
            moved.add(seat.trial.id)
        mover.trial, seat.trial = seat.trial, mover.trial
        mover.cost, seat.cost = 0.0, 0.0  # both moved: moving again costs nothing more
        changed = True
    return changed
