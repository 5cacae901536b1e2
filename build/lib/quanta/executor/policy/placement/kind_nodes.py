"""Moves between device kinds that trade whole nodes between trials of different sizes, for
`kind_rebalance.rebalance` (same-size exchange cannot make them: it needs a slot of the same size on the
other kind). Gains and losses are counted per device, in effective rates (`quanta.executor.policy.placement.kinds`):
the unit the share layer charges in; counted per trial instead, four one-device trials outweighed any
four-device one.

- `take_nodes`: a trial holding whole nodes of a slow kind takes as many whole nodes of a fast kind from
  the smaller trials on them, which move onto its nodes in the same positions.
- `give_way`: a trial spanning nodes of a fast kind moves to wholly free nodes of a slower one when
  smaller trials on the slower kind, moved onto its devices, gain more there than it loses.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from quanta.executor.policy.placement.device_maps import device_maps
from quanta.executor.policy.placement.kinds import Effective, KindMap
from quanta.executor.policy.types import ClusterSnapshot, TrialView

# Effective-throughput gain a trial must bring to leave the devices it is resident on (a migration
# costs 1-2 s, a few percent of a quantum; the gain lasts as long as the trial runs there).
MOVE_MARGIN = 0.1
# What displacing a resident trial to a slower kind must be outweighed by, per device, when a larger trial
# takes its node (`take_nodes`): it did not choose to move, and it may be time-sliced back soon. At
# MOVE_MARGIN gandiva's mean JCT on b436b2's V100+K80 mix rose 4 % over not taking nodes at all; at 0.5
# it is within 0.3 % there, and fifo keeps its gain (measured in the trace simulator).
EVICT_MARGIN = 0.5


@dataclass
class Placed:
    """A placement being rebalanced, changed in place by the moves: `out` (device -> the trial ids on it),
    `devices_of` (each placed trial's devices, kept in step with `out`) and `moved` (the trials moved this
    round; moving one again costs nothing more)."""

    snapshot: ClusterSnapshot
    km: KindMap
    eff: Effective
    out: dict[str, tuple[int, ...]]
    devices_of: dict[int, list[str]]
    moved: set[int]
    node_of: dict[str, str] = field(init=False)
    members: dict[str, list[str]] = field(init=False)

    def __post_init__(self) -> None:
        _, self.node_of, self.members = device_maps(self.snapshot.devices)

    def alone(self, t: TrialView, node: str | None = None) -> bool:
        """Whether `t` is placed alone on exactly the devices it needs (all on `node`, when given)."""
        ds = self.devices_of.get(t.id)
        if ds is None or len(ds) != t.devices_needed or any(len(self.out[d]) != 1 for d in ds):
            return False
        return node is None or all(self.node_of[d] == node for d in ds)

    def kind_alone(self, t: TrialView) -> str | None:
        """The one kind of `t`'s devices when it is placed alone on them (`alone`), else None."""
        if not self.alone(t):
            return None
        ks = {self.km.kind_of[d] for d in self.devices_of[t.id]}
        return next(iter(ks)) if len(ks) == 1 else None

    def cost(self, t: TrialView) -> float:
        """What moving `t` costs: `MOVE_MARGIN` when it would leave the devices it is resident on."""
        stays = t.id not in self.moved and sorted(t.devices) == sorted(self.devices_of[t.id])
        return MOVE_MARGIN if stays else 0.0

    def gain(self, t: TrialView, to: str, frm: str) -> float:
        """eff(t, to) - eff(t, frm): what `t` gains per device moving from kind `frm` to kind `to`."""
        e = self.eff.of(t)
        return e.get(to, 1.0) - e.get(frm, 1.0)

    def reseat(self, seats: dict[int, list[str]]) -> None:
        """Move each trial of `seats` onto its devices there (all leave first: they may swap devices)."""
        for tid in seats:
            for d in self.devices_of[tid]:
                self.out.pop(d, None)
        for tid, ds in seats.items():
            self.devices_of[tid] = list(ds)
            for d in ds:
                self.out[d] = (tid,)
            self.moved.add(tid)


def take_nodes(p: Placed) -> None:
    """A trial holding whole nodes of kind b exchanges them for as many whole nodes of kind a when it gains
    more on a, per device, than the smaller trials now on those nodes lose by going to b in its place (each
    node's occupants keep their positions on the node they move to); gains and losses per device, as in
    `give_way`; each trial evicted from devices it is resident on costs `EVICT_MARGIN`, the large one
    `MOVE_MARGIN`. Same-size exchange cannot do this: an 8-device trial on two slow nodes finds no free
    8-device slot of a fast kind while 1- to 4-device trials that gain less there hold every fast node
    (fifo's mean JCT on all of Philly trace b436b2 on V100+P100: 159.2 h without this move, 147.7 h with
    it). The trials with the largest gain per device take nodes first, the nodes whose occupants lose
    least go first; a node is taken only whole, of one kind, with every occupant alone on devices of that
    node alone and able to run on b."""
    km, out, devices_of, moved, node_of, members = p.km, p.out, p.devices_of, p.moved, p.node_of, p.members
    snapshot, eff, cost = p.snapshot, p.eff, p.cost

    by_id = {t.id: t for t in snapshot.alive() if t.id in devices_of}
    bigs: list[tuple[float, TrialView, str, list[str]]] = []  # (-best gain per device, trial, its kind, nodes)
    for t in by_id.values():
        b = p.kind_alone(t)
        if b is None or t.id in moved:
            continue
        nodes = sorted({node_of[d] for d in devices_of[t.id]})
        sizes = {len(members[n]) for n in nodes}
        if len(sizes) != 1 or sizes.pop() * len(nodes) != t.devices_needed:
            continue  # not whole nodes of one size (a share group's snapshot may see part of a node)
        best = max((p.gain(t, a, b) for a in km.counts if a != b), default=0.0)
        if best > MOVE_MARGIN:
            bigs.append((-best, t, b, nodes))
    for _, big, b, big_nodes in sorted(bigs, key=lambda x: (x[0], x[1].id)):
        if big.id in moved:
            continue
        e_big = eff.of(big)
        size = len(members[big_nodes[0]])
        for a in sorted((k for k in km.counts if k != b), key=lambda k: (-e_big.get(k, 1.0), k)):
            gain = (p.gain(big, a, b) - cost(big)) * big.devices_needed
            if gain <= 1e-9:
                break
            candidates: list[tuple[float, str, list[int]]] = []  # (loss, node, its occupants)
            for n, ds in members.items():
                if km.node_kinds[n] != frozenset({a}) or len(ds) != size:
                    continue
                occupants = sorted({out[d][0] for d in ds if d in out})
                found = [by_id.get(i) for i in occupants]
                ts = [o for o in found if o is not None and o.id not in moved and p.alone(o, n)]
                if len(ts) != len(found):
                    continue
                loss = 0.0
                for o in ts:
                    eo = eff.of(o)
                    if eo.get(b, 1.0) <= 0:
                        loss = float("inf")
                        break
                    loss += (p.gain(o, a, b) + (EVICT_MARGIN if cost(o) else 0.0)) * o.devices_needed
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
            p.reseat({big.id: new_big, **seats})
            break


def give_way(p: Placed) -> None:
    """A trial spanning nodes of kind a moves to wholly free nodes of kind b when smaller trials now on b,
    moved onto its devices (node by node), gain more on a in sum than it loses on b, gains and losses
    counted per device (effective device-seconds, the unit the share layer charges in; counted per trial
    instead, four one-device trials outweighed any four-device one); only trials that gain more than the
    move costs are seated. Same-size exchange cannot do this: a large trial that took idle fast nodes
    would otherwise keep them from the smaller trials that arrive later and gain more there."""
    km, out, devices_of, moved, node_of, members = p.km, p.out, p.devices_of, p.moved, p.node_of, p.members
    snapshot, eff, cost, kind_alone = p.snapshot, p.eff, p.cost, p.kind_alone

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
                    if t.id != big.id and t.id not in moved and kind_alone(t) == b and p.gain(t, a, b) - cost(t) > 0
                ),
                key=lambda t: -p.gain(t, a, b),
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
                        gain += (p.gain(t, a, b) - cost(t)) * t.devices_needed
                        break
            loss = (p.gain(big, a, b) + cost(big)) * big.devices_needed
            if not seats or gain - loss <= 1e-9:
                continue
            taken: list[str] = []
            for ds in free_nodes:
                taken.extend(ds)
                if len(taken) >= big.devices_needed:
                    break
            p.reseat({big.id: taken[: big.devices_needed], **{tid: list(seat) for tid, seat in seats.items()}})
            break
