"""Placement helpers shared by policies: free-device bookkeeping and device choice that prefers a
trial's resident devices (no move), then devices of one node (locality), then any."""

from __future__ import annotations

from collections import defaultdict

from app.executor.policy.types import ClusterSnapshot, TrialView


class Board:
    """Mutable scratch board a policy fills while planning one round (never leaves the policy)."""

    def __init__(self, snapshot: ClusterSnapshot, capacity: int = 1):
        self.snapshot = snapshot
        self.capacity = capacity  # trials per device (1 = exclusive)
        self.slots: dict[str, list[int]] = {d.id: [] for d in snapshot.devices}
        self.node_of = {d.id: d.node for d in snapshot.devices}

    def free(self) -> list[str]:
        return [d for d, ids in self.slots.items() if len(ids) < self.capacity and not ids]

    def is_free(self, device: str) -> bool:
        return device in self.slots and not self.slots[device]

    def put(self, trial_id: int, devices: tuple[str, ...]) -> None:
        for d in devices:
            self.slots[d].append(trial_id)

    def choose(self, trial: TrialView) -> tuple[str, ...] | None:
        """Free devices for `trial`: its resident ones if all free, else the node with the most free
        devices that fits it (consolidated), else None. Ties by device order for determinism."""
        k = trial.devices_needed
        if trial.devices and len(trial.devices) == k and all(self.is_free(d) for d in trial.devices):
            return tuple(sorted(trial.devices))
        free = self.free()
        if len(free) < k:
            return None
        by_node: dict[str, list[str]] = defaultdict(list)
        for d in free:
            by_node[self.node_of[d]].append(d)
        # Prefer a node that holds the trial already, then the fullest-fitting node.
        home = {self.node_of.get(d) for d in trial.devices}
        fitting = [n for n, ds in by_node.items() if len(ds) >= k]
        if fitting:
            best = min(fitting, key=lambda n: (n not in home, len(by_node[n]), n))
            return tuple(sorted(by_node[best])[:k])
        return tuple(free[:k])  # spread across nodes: runs at the unconsolidated rate

    def placement(self) -> dict[str, tuple[int, ...]]:
        return {d: tuple(ids) for d, ids in self.slots.items() if ids}
