"""Aligned blocks of devices for gang time-slicing (gandiva knob `gang`, used by
`placement.select_sticky`): which whole servers a multi-device unit may claim as its block, and the
least loaded such block. Pure: depends on the device order and each device's node."""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence

from quanta.executor.policy.gandiva.packs import Unit

_GangMaps = tuple[Mapping[str, int], list[list[str]], dict[int, list[tuple[str, ...]]], dict[int, dict[str, int]]]
_gang_cache: list[_GangMaps] = []  # the last cluster's (order, nodes, blocks by need, block of each device)


class Gang:
    """Aligned blocks of devices for gang time-slicing (knob `gang`): a unit needing at most one node's
    devices takes devices of one node; one needing more takes `k` whole nodes, the `k` consecutive
    nodes (in device order) of one of the aligned groups `[i*k, (i+1)*k)`, so that the blocks of
    multi-node units nest instead of overlapping partly (a job over two servers never straddles the
    servers of two others). `bound` names units (first trial id) whose device kinds decide their
    devices: they are left to `place`'s kind-aware choice. `small`: devices one-device units live on
    (`shapes`), which a block takes only when no other block is as lightly loaded."""

    def __init__(
        self,
        order: Mapping[str, int],
        node_of: Mapping[str, str],
        bound: Container[int] = (),
        small: Container[str] = (),
    ):
        self.order = order
        self.node_of = node_of
        self.bound = bound
        self.small = small
        # The blocks depend on the devices alone: memoised on `order` itself (`device_maps.device_maps` hands
        # every round of an unchanged cluster the same mapping), not rebuilt every round.
        cached = _gang_cache[0] if _gang_cache and _gang_cache[0][0] is order else None
        if cached is None:
            nodes: dict[str, list[str]] = {}
            for d in sorted(order, key=order.__getitem__):
                nodes.setdefault(node_of.get(d, ""), []).append(d)
            cached = (order, list(nodes.values()), {}, {})
            _gang_cache[:] = [cached]
        _, self.nodes, self._blocks, self._block_of = cached
        self.per_node = max((len(ds) for ds in self.nodes), default=1)

    def applies(self, u: Unit) -> bool:
        return u[0].id not in self.bound

    def blocks(self, need: int) -> list[tuple[str, ...]]:
        """The aligned blocks a unit needing `need` devices may take (their devices, in device order)."""
        k = -(-need // self.per_node)
        got = self._blocks.get(need)
        if got is None:
            got = [tuple(d for ds in self.nodes[i * k : (i + 1) * k] for d in ds) for i in range(len(self.nodes) // k)]
            got = self._blocks[need] = [b for b in got if len(b) >= need] or got
        return got

    def aligned(self, home: Sequence[str]) -> bool:
        """Whether `home` lies within one of the aligned blocks of its size."""
        block_of = self._block_of.get(len(home))
        if block_of is None:
            block_of = self._block_of[len(home)] = {d: i for i, b in enumerate(self.blocks(len(home))) for d in b}
        return len({block_of.get(d, -1) for d in home}) == 1 and home[0] in block_of

    def target(
        self,
        need: int,
        claimed: Container[str],
        load: Mapping[str, int],
        limit: int | None,
        room: int,
    ) -> tuple[str, ...] | None:
        """The least loaded block with `need` devices no unit above claimed (its `need` least loaded
        ones), whose most loaded device carries at most `limit` units (any, when None); None when no
        block fits or fewer than `need` devices are left (`room`)."""
        if room < need:
            return None
        best: tuple[tuple[int, int, int, int], tuple[str, ...]] | None = None
        order = self.order
        for i, b in enumerate(self.blocks(need)):
            ok = [d for d in b if d not in claimed]
            if len(ok) < need:
                continue
            pick = sorted(ok, key=lambda d: (load.get(d, 0), order[d]))[:need]
            hi = max(load.get(d, 0) for d in pick)
            if limit is not None and hi > limit:
                continue
            key = (hi, sum(1 for d in pick if d in self.small), sum(load.get(d, 0) for d in pick), i)
            if best is None or key < best[0]:
                best = (key, tuple(sorted(pick, key=order.__getitem__)))
        return None if best is None else best[1]
