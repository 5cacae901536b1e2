"""Gandiva's introspective packing: the life of a pack, as a typed state carried round to round.

When trials wait, the lowest-utilisation waiting shared trial (lowest measured solo rate, then
lightest memory) joins the lowest-utilisation running shared trial on its device, if their measured
memory fits (device memory 0 = unknown: allowed) and the pair was never found bad (`new_pack`). One
pack is *on trial* at a time. Once the pair has run together for (most of) a quantum and
`snapshot.pair_rates` holds a fresh sample for it, the pack is *kept* if
`rate_a/solo_a + rate_b/solo_b > 1 + pack_margin`, else undone and the pair remembered as bad (never
retried); a pack on trial that gets no measurement for `pack_patience` rounds is undone too. A kept
pack is one unit in the rotation until a member ends, leaves the shared tier, or a fresh sample
shows the gain gone (`review`).

`Pack` is frozen; `Pack.to_state()` / `Pack.from_state()` are its JSON form in `Plan.state["packs"]`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from quanta.executor.policy.gandiva.tiers import SHARED
from quanta.executor.policy.knobs import GandivaKnobs
from quanta.executor.policy.placement.board import Board
from quanta.executor.policy.types import ClusterSnapshot, TrialView

MEASURE_FRACTION = 0.95  # a pack is measured after this fraction of a quantum together (tick jitter)

Pair = tuple[int, int]
Unit = tuple[TrialView, ...]  # one trial, or the two of a pack (the better-ranked first)


@dataclass(frozen=True)
class Pack:
    """Two trials sharing one device, `a` < `b`.

    `status` is "trial" until measured, then "kept". `since`/`round`: when it was formed. `start`:
    when its current stretch together began (None while apart); `base`: the pair's rate sample when
    that stretch began (a measurement must differ from it); `seen`: the last sample looked at (a kept
    pack is re-checked on each new one); `rounds`: rounds placed together while on trial; `gain`: the
    last measured summed normalised rate."""

    a: int
    b: int
    status: Literal["trial", "kept"]
    device: str
    since: float
    round: int
    start: float | None = None
    base: tuple[float, float] | None = None
    seen: tuple[float, float] | None = None
    rounds: int = 0
    gain: float | None = None

    @property
    def members(self) -> Pair:
        return (self.a, self.b)

    def to_state(self) -> dict[str, Any]:
        """JSON form (lists for samples), the keys Plan.state has always carried."""
        return {
            "a": self.a,
            "b": self.b,
            "status": self.status,
            "device": self.device,
            "since": self.since,
            "round": self.round,
            "start": self.start,
            "base": None if self.base is None else list(self.base),
            "seen": None if self.seen is None else list(self.seen),
            "rounds": self.rounds,
            "gain": self.gain,
        }

    @classmethod
    def from_state(cls, d: Mapping[str, Any]) -> Pack:
        start, base, seen, gain = d.get("start"), d.get("base"), d.get("seen"), d.get("gain")
        return cls(
            a=int(d["a"]),
            b=int(d["b"]),
            status="kept" if d["status"] == "kept" else "trial",
            device=str(d.get("device", "")),
            since=float(d.get("since", 0.0)),
            round=int(d.get("round", 0)),
            start=None if start is None else float(start),
            base=None if base is None else (float(base[0]), float(base[1])),
            seen=None if seen is None else (float(seen[0]), float(seen[1])),
            rounds=int(d.get("rounds", 0)),
            gain=None if gain is None else float(gain),
        )


def pair(a: int, b: int) -> Pair:
    return (a, b) if a < b else (b, a)


def gain(ta: TrialView, tb: TrialView, sample: tuple[float, float]) -> tuple[float | None, str]:
    """Summed normalised rate of a pair (None without solo rates to compare with), and why."""
    ra, rb = float(sample[0]), float(sample[1])
    sa, sb = ta.rate_solo, tb.rate_solo
    if not sa or not sb or sa <= 0 or sb <= 0:
        return None, "no solo rate to compare with"
    g = ra / sa + rb / sb
    return g, f"normalised rates {ra / sa:.2f} + {rb / sb:.2f} = {g:.2f}"


def review(
    knobs: GandivaKnobs,
    snapshot: ClusterSnapshot,
    old: Sequence[Mapping[str, Any]],
    bad: set[Pair],
    by_id: Mapping[int, TrialView],
    tiers: Mapping[int, str],
    pool_ids: set[int],
    stopped: set[int],
    notes: list[str],
) -> list[Pack]:
    """Last round's packs that still stand: measure the one on trial, re-check kept ones, drop broken
    ones (a member left or changed tier). Adds undone pairs to `bad` and explains each decision."""
    now = snapshot.now
    packs: list[Pack] = []
    for entry in old:
        pk = Pack.from_state(entry)
        a, b = pk.members
        gone = [x for x in (a, b) if x not in by_id or by_id[x].status.final or x in stopped or x not in tiers]
        if gone:
            notes.append(f"pack {a}+{b} ends: trial {gone[0]} left")
            continue
        if a not in pool_ids or b not in pool_ids:
            which = a if a not in pool_ids else b
            notes.append(f"pack {a}+{b} dissolved: trial {which} is now {tiers[which]}")
            continue
        ta, tb = by_id[a], by_id[b]
        together = ta.running and tb.running and bool(set(ta.devices) & set(tb.devices))
        sample = snapshot.pair_rates.get((a, b))
        if not together:
            pk = replace(pk, start=None)
        verdict = None
        if together and sample is not None:
            s = (float(sample[0]), float(sample[1]))
            fresh = pk.base is None or s != pk.base
            long_enough = pk.start is not None and now - pk.start >= MEASURE_FRACTION * snapshot.quantum_s
            measured = fresh and long_enough if pk.status == "trial" else s != pk.seen
            if measured:
                verdict = gain(ta, tb, sample)
            pk = replace(pk, seen=s)
        if verdict is not None:
            g, why = verdict
            if g is not None and g > 1.0 + knobs.pack_margin:
                if pk.status == "trial":
                    notes.append(f"pack {a}+{b} kept: {why} > 1 + margin {knobs.pack_margin:g}")
                pk = replace(pk, status="kept", gain=g)
            else:
                word = "undone" if pk.status == "trial" else "undone (gain dropped)"
                notes.append(f"pack {a}+{b} {word}: {why} <= 1 + margin {knobs.pack_margin:g}; pair marked bad")
                bad.add(pair(a, b))
                continue
        elif pk.status == "trial" and pk.rounds >= knobs.pack_patience:
            notes.append(f"pack {a}+{b} undone: no packed measurement after {pk.rounds} rounds; pair marked bad")
            bad.add(pair(a, b))
            continue
        packs.append(pk)
    return packs


def new_pack(
    snapshot: ClusterSnapshot,
    waiting: Sequence[Unit],
    selected: Sequence[Unit],
    tiers: Mapping[int, str],
    placed: Mapping[int, tuple[str, ...]],
    pack_of: Mapping[int, Pack],
    bad: set[Pair],
    board: Board,
    co_resident: bool = False,
) -> tuple[TrialView, TrialView, str, str] | None:
    """(joiner, host, device, why) for one new pack on trial, or None. With `co_resident` (sticky
    placement) the joiner must be parked on the host's device already, so that forming the pack moves
    nobody: a pack is then the two trials of one device's queue running side by side."""

    def packable(t: TrialView) -> bool:
        return (
            t.devices_needed == 1
            and tiers.get(t.id) == SHARED
            and t.id not in pack_of
            and bool(t.rate_solo)
            and (t.rate_solo or 0) > 0
        )

    def util(t: TrialView) -> tuple[float, float, int]:
        return (t.rate_solo or 0.0, t.memory_mb or 0.0, t.id)

    joiners = sorted((u[0] for u in waiting if len(u) == 1 and packable(u[0])), key=util)
    hosts = sorted(
        (
            u[0]
            for u in selected
            if len(u) == 1 and packable(u[0]) and u[0].id in placed and len(board.slots[placed[u[0].id][0]]) == 1
        ),
        key=util,
    )
    memory = {d.id: d.memory_mb for d in snapshot.devices}
    host_on = {placed[h.id][0]: h for h in hosts} if co_resident else {}
    for j in joiners:
        # Co-resident: the one host on the joiner's own device (a device hosts one placed trial here).
        mates = hosts if not co_resident else [host_on[j.devices[0]]] if j.devices and j.devices[0] in host_on else []
        for h in mates:
            if pair(j.id, h.id) in bad:
                continue
            device = placed[h.id][0]
            if not board.usable(j, device):
                continue  # the joiner cannot run on that device's kind
            cap = memory.get(device, 0.0) or 0.0
            if cap > 0:
                if j.memory_mb is None or h.memory_mb is None or j.memory_mb + h.memory_mb > cap:
                    continue
                why = f"memory {j.memory_mb:.0f}+{h.memory_mb:.0f} of {cap:.0f} MB"
            else:
                why = "device memory unknown"
            why += f"; solo rates {j.rate_solo:.3g}, {h.rate_solo:.3g} steps/s"
            return j, h, device, why
    return None


def formed(snapshot: ClusterSnapshot, joiner: TrialView, host: TrialView, device: str) -> Pack:
    """A new pack on trial of `joiner` beside `host` on `device`."""
    a, b = pair(joiner.id, host.id)
    sample = snapshot.pair_rates.get((a, b))
    base = None if sample is None else (float(sample[0]), float(sample[1]))
    return Pack(a, b, "trial", device, snapshot.now, snapshot.round_no, base=base)


def placed_together(
    snapshot: ClusterSnapshot, packs: Sequence[Pack], placed: Mapping[int, tuple[str, ...]]
) -> list[Pack]:
    """Packs placed together this round start (or continue) their packed stretch; a pack on trial
    counts one more round."""
    out = []
    for pk in packs:
        a, b = pk.members
        if a in placed and placed.get(a) == placed.get(b):
            pk = replace(pk, device=placed[a][0])
            if pk.start is None:
                s = snapshot.pair_rates.get((a, b))
                pk = replace(pk, start=snapshot.now, base=None if s is None else (float(s[0]), float(s[1])))
            if pk.status == "trial":
                pk = replace(pk, rounds=pk.rounds + 1)
        out.append(pk)
    return out
