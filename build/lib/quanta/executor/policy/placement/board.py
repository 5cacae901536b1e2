"""Placement helpers shared by policies: free-device bookkeeping and device choice that prefers a
trial's resident devices (no move), then devices of one node (locality), then any.

Device kinds (`quanta.executor.policy.placement.kinds`): a trial is never given devices of a kind where its rate is
0; on a cluster of several kinds with `ClusterSnapshot.kind_aware`, `choose` prefers the kinds where
its effective rate is highest, and `placement()` exchanges placed trials between kinds while that
raises their summed effective rate (`kind_rebalance.rebalance`), so every policy that plans on a `Board`
places by kind.

`Board` keeps its free devices incrementally (overall, per node, and nodes bucketed by how many free
devices they have), so asking for free devices costs O(nodes touched), not O(devices): a simulated
cluster of hundreds of devices asks many times per round.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from quanta.executor.policy.placement.device_maps import device_maps
from quanta.executor.policy.placement.kind_rebalance import rebalance
from quanta.executor.policy.placement.kinds import Effective, kind_tiers
from quanta.executor.policy.types import ClusterSnapshot, TrialView


class Board:
    """Mutable scratch board a policy fills while planning one round (never leaves the policy).

    `slots[device]` lists the trials put on it; a device is free while nothing is on it."""

    def __init__(self, snapshot: ClusterSnapshot, capacity: int = 1):
        self.snapshot = snapshot
        self.capacity = capacity  # trials per device (1 = exclusive)
        devices = snapshot.devices
        self.order, self.node_of, members = device_maps(devices)
        self.slots: dict[str, list[int]] = {d.id: [] for d in devices}
        self._free: dict[str, None] = dict.fromkeys(self.slots)  # ordered set, in device order
        self._free_by_node: dict[str, dict[str, None]] = {n: dict.fromkeys(ds) for n, ds in members.items()}
        # nodes by their number of free devices (only nodes with some), rebuilt lazily after puts
        self._bucket: dict[int, set[str]] | None = None
        self.eff = Effective(snapshot)  # effective rates per kind (kinds.py)
        self._skip: dict[frozenset[str], set[str]] = {}  # per tier of kinds: the nodes not all of them

    # ---- free devices ----------------------------------------------------------------------------

    def free(self) -> list[str]:
        """Free devices in device order."""
        return list(self._free)

    @property
    def n_free(self) -> int:
        return len(self._free)

    def is_free(self, device: str) -> bool:
        return device in self._free

    def free_by_node(self) -> dict[str, list[str]]:
        """Free devices of each node that has some, in device order."""
        return {n: list(ds) for n, ds in self._free_by_node.items() if ds}

    def free_on(self, node: str) -> list[str]:
        return list(self._free_by_node.get(node, ()))

    def n_free_on(self, node: str) -> int:
        return len(self._free_by_node.get(node, ()))

    def fullest_fitting(self, need: int, skip: Iterable[str] = ()) -> str | None:
        """The node with the fewest free devices that still has `need` (ties by name), ignoring `skip`."""
        skip = set(skip)
        bucket = self._bucket
        if bucket is None:
            bucket = self._bucket = {}
            for n, ds in self._free_by_node.items():
                if ds:
                    bucket.setdefault(len(ds), set()).add(n)
        for count in sorted(c for c in bucket if c >= need):
            nodes = bucket[count] - skip if skip else bucket[count]
            if nodes:
                return min(nodes)
        return None

    def put(self, trial_id: int, devices: tuple[str, ...]) -> None:
        slots, free = self.slots, self._free
        for d in devices:
            slots[d].append(trial_id)
            if d in free:
                del free[d]
                del self._free_by_node[self.node_of[d]][d]
                self._bucket = None

    # ---- choice ----------------------------------------------------------------------------------

    def usable(self, trial: TrialView, device: str) -> bool:
        """Whether `trial` can run on `device` (its rate on the device's kind is not 0)."""
        return self.eff.usable(trial, self.eff.kinds.kind_of[device])

    def tiers(self, trials: Sequence[TrialView], kinds: Collection[str] | None = None) -> list[frozenset[str]] | None:
        """The kinds `trials` may take, in tiers of preference (`kinds.kind_tiers`); None: any device,
        no preference."""
        return kind_tiers(self.eff, trials, self.snapshot.kind_aware, kinds)

    def choose(self, trial: TrialView, kinds: Collection[str] | None = None) -> tuple[str, ...] | None:
        """Free devices for `trial`: its resident ones if all free, else the node with the most free
        devices that fits it (consolidated), else None. Ties by device order for determinism. Only
        devices of kinds it can run on (and of `kinds`, when given), the kinds it gains most on first
        (see the module docstring)."""
        # A trial with no rate per kind may take any device, with no preference: the plain choice.
        tiers = self.tiers((trial,), kinds) if trial.kind_rates or kinds is not None else None
        if tiers is not None:
            return self.choose_in(trial.devices_needed, trial.devices, tiers)
        k = trial.devices_needed
        if trial.devices and len(trial.devices) == k and all(d in self._free for d in trial.devices):
            return tuple(sorted(trial.devices))
        if len(self._free) < k:
            return None
        # Prefer a node that holds the trial already, then the fullest-fitting node.
        best = self._home_fitting(trial.devices, k) or self.fullest_fitting(k)
        if best is not None:
            return tuple(sorted(self._free_by_node[best])[:k])
        return tuple(list(self._free)[:k])  # spread across nodes: runs at the unconsolidated rate

    def choose_in(
        self, need: int, resident: Sequence[str], tiers: Sequence[frozenset[str]], *, single_node: bool = False
    ) -> tuple[str, ...] | None:
        """Free devices of the kinds in `tiers` for a trial needing `need` resident on `resident`: its
        resident devices if free (and on one node, with `single_node`); else a node of one tier's kinds
        that fits (a node holding it first, then the fullest), tier by tier; else (unless
        `single_node`) free devices of one tier, then of any of them (spread over nodes)."""
        if need <= 0 or len(self._free) < need or not tiers:
            return None
        kind_of = self.eff.kinds.kind_of
        allowed = frozenset(k for tier in tiers for k in tier)
        res = [d for d in resident if d in self.slots]
        if (
            len(res) == need
            and all(d in self._free and kind_of[d] in allowed for d in res)
            and (not single_node or len({self.node_of[d] for d in res}) == 1)
        ):
            return tuple(sorted(res))
        res_set = set(res)
        for tier in tiers:
            skip = self._skip_for(tier)
            node = self._home_fitting(res, need, skip) or self.fullest_fitting(need, skip)
            if node is not None:
                ds = sorted(self._free_by_node[node], key=lambda d: (d not in res_set, self.order[d]))[:need]
                return tuple(sorted(ds, key=self.order.__getitem__))
        if single_node:
            return None
        for tier in [*tiers, allowed] if len(tiers) > 1 else tiers:
            ds = [d for d in self._free if kind_of[d] in tier]
            if len(ds) >= need:
                return tuple(ds[:need])
        return None

    def _skip_for(self, tier: frozenset[str]) -> set[str]:
        skip = self._skip.get(tier)
        if skip is None:
            skip = self._skip[tier] = {n for n, ks in self.eff.kinds.node_kinds.items() if not ks <= tier}
        return skip

    def _home_fitting(self, devices: Iterable[str], k: int, skip: Collection[str] = ()) -> str | None:
        home = {self.node_of[d] for d in devices if d in self.node_of} - set(skip)
        fitting = [n for n in home if len(self._free_by_node[n]) >= k]
        return min(fitting, key=lambda n: (len(self._free_by_node[n]), n)) if fitting else None

    def placement(self) -> dict[str, tuple[int, ...]]:
        """The devices' trials, after `kind_rebalance.rebalance` (which changes nothing on a cluster of one kind
        or kind-blind)."""
        raw = {d: tuple(ids) for d, ids in self.slots.items() if ids}
        if not (self.snapshot.kind_aware and self.eff.kinds.several):
            return raw
        return rebalance(self.snapshot, raw, self.eff)[0]


def moves_nobody(trials: Collection[TrialView], placement: Mapping[str, Sequence[int]]) -> bool:
    """True when `placement` runs exactly `trials`, each on the devices it is resident on and already
    running there (nobody waits, starts, parks or moves): the test every policy's quiet promise
    (`Plan.quiet_until`) begins with. Cheap refusals first, since under load some trial waits."""
    if any(not t.running for t in trials):
        return False
    where: dict[int, list[str]] = {}
    for device, ids in placement.items():
        for tid in ids:
            where.setdefault(tid, []).append(device)
    if len(where) != len(trials):
        return False
    return all(tuple(sorted(where.get(t.id, ()))) == t.devices for t in trials)
