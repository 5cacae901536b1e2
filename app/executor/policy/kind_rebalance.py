"""Moving placed trials between device kinds while that raises their summed effective rate (Gavel's
max-throughput allocation, Narayanan et al., OSDI 2020; effective rates: `app.executor.policy.kinds`).

`rebalance` exchanges placed trials between kinds (and moves
them onto free devices of another kind) while that raises the sum of effective rates of the placed
trials: for every ordered pair of kinds (a, b), trials on b ordered by what they gain on a are paired
with trials on a (or free slots of a) ordered by what they lose on b, and each pair is exchanged while
the gain beats the loss by more than the moves cost (`MOVE_MARGIN` for each trial that would leave the
devices it is resident on; nothing for one that moves anyway). For two kinds this is the exchange
argument of Gavel's max-throughput allocation: the trial with a 4x speed-up on a V100 gets the V100
before one with 1.5x. Only trials alone on their devices, on exactly the devices they need, of one
kind, are exchanged (packs and grow-shrink loans stay where their policy put them), and only between
device sets of the same size (a node's free devices in chunks, for multi-device trials; wholly free
nodes of one kind, for a trial larger than a node). One exchange is between sizes: a trial spanning
nodes of a fast kind moves to wholly free nodes of a slower one when smaller trials on the slower kind,
moved onto its devices, gain more in sum than it loses, per device (`_give_way`); without it a large
trial that took idle fast nodes kept them from the smaller ones arriving later. And the other way
(`_take_nodes`): a trial holding whole nodes of a slow kind takes whole nodes of a fast kind from smaller
trials that lose less there than it gains, per device, by more than `EVICT_MARGIN` each. With
`kind_aware` off nothing moves (`rebalance` returns the placement as it is).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.executor.policy.device_maps import device_maps
from app.executor.policy.kinds import Effective, KindMap, kind_map
from app.executor.policy.types import ClusterSnapshot, TrialView

# Effective-throughput gain a trial must bring to leave the devices it is resident on (a migration
# costs 1-2 s, a few percent of a quantum; the gain lasts as long as the trial runs there).
MOVE_MARGIN = 0.1
# What displacing a resident trial to a slower kind must be outweighed by, per device, when a larger trial
# takes its node (`_take_nodes`): it did not choose to move, and it may be time-sliced back soon. At
# MOVE_MARGIN gandiva's mean JCT on b436b2's V100+K80 mix rose 4 % over not taking nodes at all; at 0.5
# it is within 0.3 % there, and fifo keeps its gain (docs/benchmarks.md, stop 40).
EVICT_MARGIN = 0.5


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
    with `kind_aware` off. `take_nodes` off leaves out `_take_nodes` (the share layer's pass across
    users' groups)."""
    out = {d: tuple(ids) for d, ids in placement.items() if ids}
    km = kind_map(snapshot.devices)
    if not snapshot.kind_aware or not km.several or not out:
        return out, 0
    eff = eff or Effective(snapshot)
    devices_of: dict[int, list[str]] = {}
    for d, ids in out.items():
        for i in ids:
            devices_of.setdefault(i, []).append(d)
    # Trials alone on exactly the devices they need, all of one kind: the movable ones.
    slots: dict[int, list[_Slot]] = {}  # by size
    for t in snapshot.alive():
        ds = devices_of.get(t.id)
        if ds is None or len(ds) != t.devices_needed or any(len(out[d]) != 1 for d in ds):
            continue
        kinds = {km.kind_of[d] for d in ds}
        if len(kinds) != 1:
            continue
        devs = tuple(sorted(ds))
        staying = bool(t.devices) and tuple(sorted(t.devices)) == devs
        slots.setdefault(len(devs), []).append(_Slot(kinds.pop(), devs, t, MOVE_MARGIN if staying else 0.0))
    if not slots:
        return out, 0
    moved: set[int] = set()
    _, _, members = device_maps(snapshot.devices)
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
        _take_nodes(snapshot, km, eff, out, moved, devices_of)
    _give_way(snapshot, km, eff, out, moved, devices_of)
    if not moved:
        return out, 0
    order = km.order
    return dict(sorted(out.items(), key=lambda kv: order[kv[0]])), len(moved)


def _take_nodes(
    snapshot: ClusterSnapshot,
    km: KindMap,
    eff: Effective,
    out: dict[str, tuple[int, ...]],
    moved: set[int],
    devices_of: dict[int, list[str]],
) -> None:
    """A trial holding whole nodes of kind b exchanges them for as many whole nodes of kind a when it gains
    more on a, per device, than the smaller trials now on those nodes lose by going to b in its place (each
    node's occupants keep their positions on the node they move to); gains and losses per device, as in
    `_give_way`, and each trial leaving the devices it is resident on costs `MOVE_MARGIN`. Same-size
    exchange cannot do this either: an 8-device job 5x faster on a V100 found no 8-device slot of V100s
    while 1- to 4-device trials that gain far less held every V100 node, and ran on P100s (Philly trace
    b436b2 on V100+P100: the jobs 1.6x or more faster on a V100 had it 51 % of their time, kind-aware or
    not). The trials with the largest gain per device take nodes first, the nodes whose occupants lose
    least go first; a node is taken only whole, of one kind, with every occupant alone on devices of that
    node alone and able to run on b. `out`, `moved` and `devices_of` change in place (as `_give_way`)."""
    _, node_of, members = device_maps(snapshot.devices)

    def alone_within(t: TrialView, node: str | None = None) -> bool:
        ds = devices_of.get(t.id)
        if ds is None or len(ds) != t.devices_needed or any(len(out[d]) != 1 for d in ds):
            return False
        return node is None or all(node_of[d] == node for d in ds)

    def cost(t: TrialView) -> float:
        return 0.0 if t.id in moved or sorted(t.devices) != sorted(devices_of[t.id]) else MOVE_MARGIN

    def evict(t: TrialView) -> float:
        return EVICT_MARGIN if cost(t) else 0.0

    by_id = {t.id: t for t in snapshot.alive() if t.id in devices_of}
    bigs: list[tuple[float, TrialView, str, list[str]]] = []  # (-best gain per device, trial, its kind, nodes)
    for t in by_id.values():
        if t.id in moved or not alone_within(t):
            continue
        nodes = sorted({node_of[d] for d in devices_of[t.id]})
        sizes = {len(members[n]) for n in nodes}
        if len(sizes) != 1 or sizes.pop() * len(nodes) != t.devices_needed:
            continue  # not whole nodes of one size (a share group's snapshot may see part of a node)
        ks = {km.kind_of[d] for d in devices_of[t.id]}
        if len(ks) != 1:
            continue
        b = ks.pop()
        e = eff.of(t)
        best = max((e.get(a, 1.0) - e.get(b, 1.0) for a in km.counts if a != b), default=0.0)
        if best > MOVE_MARGIN:
            bigs.append((-best, t, b, nodes))
    for _, big, b, big_nodes in sorted(bigs, key=lambda x: (x[0], x[1].id)):
        if big.id in moved:
            continue
        e_big = eff.of(big)
        size = len(members[big_nodes[0]])
        for a in sorted((k for k in km.counts if k != b), key=lambda k: (-e_big.get(k, 1.0), k)):
            gain = (e_big.get(a, 1.0) - e_big.get(b, 1.0) - cost(big)) * big.devices_needed
            if gain <= 1e-9:
                break
            candidates: list[tuple[float, str, list[int]]] = []  # (loss, node, its occupants)
            for n, ds in members.items():
                if km.node_kinds[n] != frozenset({a}) or len(ds) != size:
                    continue
                occupants = sorted({out[d][0] for d in ds if d in out})
                found = [by_id.get(i) for i in occupants]
                ts = [o for o in found if o is not None and o.id not in moved and alone_within(o, n)]
                if len(ts) != len(found):
                    continue
                loss = 0.0
                for o in ts:
                    eo = eff.of(o)
                    if eo.get(b, 1.0) <= 0:
                        loss = float("inf")
                        break
                    loss += (eo.get(a, 1.0) - eo.get(b, 1.0) + evict(o)) * o.devices_needed
                candidates.append((loss, n, occupants))
            candidates.sort(key=lambda c: (c[0], c[1]))
            taken = candidates[: len(big_nodes)]
            if len(taken) < len(big_nodes) or gain - sum(c[0] for c in taken) <= 1e-9:
                continue
            new_big: list[str] = []
            seats: dict[int, list[str]] = {}
            for (_, n, occupants), old in zip(taken, big_nodes, strict=True):
                position = {d: i for i, d in enumerate(members[n])}
                for tid in occupants:
                    seats[tid] = [members[old][position[d]] for d in devices_of[tid]]
                new_big.extend(members[n])
            for tid in [big.id, *seats]:
                for d in devices_of[tid]:
                    out.pop(d, None)
            for tid, ds in [(big.id, new_big), *seats.items()]:
                devices_of[tid] = ds
                for d in ds:
                    out[d] = (tid,)
                moved.add(tid)
            break


def _give_way(
    snapshot: ClusterSnapshot,
    km: KindMap,
    eff: Effective,
    out: dict[str, tuple[int, ...]],
    moved: set[int],
    devices_of: dict[int, list[str]],
) -> None:
    """A trial spanning nodes of kind a moves to wholly free nodes of kind b when smaller trials now on b,
    moved onto its devices (node by node), gain more on a in sum than it loses on b, gains and losses
    counted per device (effective device-seconds, the unit the share layer charges in; counted per trial
    instead, four one-device trials outweighed any four-device one); only trials that gain more than the
    move costs are seated (`out` and `moved` are changed in place). Same-size exchange cannot do this: a
    large trial that took idle fast nodes would otherwise keep them from the smaller trials that arrive
    later and gain more there. `devices_of` (each placed trial's devices, kept in step with `out`) is
    `rebalance`'s."""
    _, node_of, members = device_maps(snapshot.devices)

    def kind_alone(t: TrialView) -> str | None:
        ds = devices_of.get(t.id)
        if ds is None or len(ds) != t.devices_needed or any(len(out[d]) != 1 for d in ds):
            return None
        ks = {km.kind_of[d] for d in ds}
        return next(iter(ks)) if len(ks) == 1 else None

    def cost(t: TrialView) -> float:
        return 0.0 if t.id in moved or sorted(t.devices) != sorted(devices_of[t.id]) else MOVE_MARGIN

    alive = [t for t in snapshot.alive() if t.id in devices_of]
    for big in sorted(alive, key=lambda t: -t.devices_needed):
        a = kind_alone(big)
        if a is None or big.id in moved or len({node_of[d] for d in devices_of[big.id]}) < 2:
            continue
        e_big = eff.of(big)
        for b in km.counts:
            if b == a or e_big.get(b, 1.0) <= 0:
                continue
            free_nodes = [
                ds for n, ds in members.items() if km.node_kinds[n] == frozenset({b}) and all(d not in out for d in ds)
            ]
            if sum(map(len, free_nodes)) < big.devices_needed:
                continue
            takers = sorted(
                (
                    t
                    for t in alive
                    if t.id != big.id
                    and t.id not in moved
                    and kind_alone(t) == b
                    and eff.of(t).get(a, 1.0) - eff.of(t).get(b, 1.0) - cost(t) > 0
                ),
                key=lambda t: -(eff.of(t).get(a, 1.0) - eff.of(t).get(b, 1.0)),
            )
            seats: dict[int, tuple[str, ...]] = {}
            gain = 0.0
            room: dict[str, list[str]] = {}
            for d in sorted(devices_of[big.id]):
                room.setdefault(node_of[d], []).append(d)
            for t in takers:
                for n, ds in room.items():
                    if len(ds) >= t.devices_needed:
                        seats[t.id] = tuple(ds[: t.devices_needed])
                        room[n] = ds[t.devices_needed :]
                        gain += (eff.of(t).get(a, 1.0) - eff.of(t).get(b, 1.0) - cost(t)) * t.devices_needed
                        break
            loss = (e_big.get(a, 1.0) - e_big.get(b, 1.0) + cost(big)) * big.devices_needed
            if not seats or gain - loss <= 1e-9:
                continue
            for d in devices_of[big.id]:
                out.pop(d, None)
            taken: list[str] = []
            for ds in free_nodes:
                taken.extend(ds)
                if len(taken) >= big.devices_needed:
                    break
            devices_of[big.id] = taken[: big.devices_needed]
            for d in devices_of[big.id]:
                out[d] = (big.id,)
            moved.add(big.id)
            for tid, seat in seats.items():
                for d in devices_of[tid]:
                    out.pop(d, None)
                devices_of[tid] = list(seat)
                for d in seat:
                    out[d] = (tid,)
                moved.add(tid)
            break


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
