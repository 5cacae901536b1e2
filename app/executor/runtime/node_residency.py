"""`ResidencyPublisher`: the resident trials a node writes with each heartbeat.

Contract (used by `NodeAgent`'s pump, once per heartbeat):
- `build` turns the local runtime's residency into the node row's: devices under their cluster ids
  (`n1/cpu:0`), with the epoch each process started under and the last round applied to it, which is
  what the controller checks its expectations and fences against.
- A trial that was in the last residency written and is no longer resident stays listed as it was, for
  up to `KEEP_S`, while its exit has not been taken (`TrialExits.recent`): the controller must see the
  exit event before the trial disappears from the node, or it would take the trial for lost.
- `written` is called once a heartbeat carrying a residency is stored; only then does it count as seen.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from quanta.executor.actions import Residency
from quanta.executor.runtime.cluster import global_device
from quanta.executor.runtime.trial_exits import TrialExits
from quanta.executor.wire import NodeResidency

KEEP_S = 5.0


class ResidencyPublisher:
    def __init__(self, node: str, exits: TrialExits):
        self.node = node
        self._exits = exits
        self._published: dict[int, NodeResidency] = {}
        self._kept_since: dict[int, float] = {}

    def build(
        self, resident: Mapping[int, Residency], epochs: Mapping[int, int], rounds: Mapping[int, int]
    ) -> dict[int, NodeResidency]:
        now = time.monotonic()
        out: dict[int, NodeResidency] = {}
        for tid, r in resident.items():
            out[tid] = NodeResidency(
                devices=tuple(global_device(self.node, d) for d in r.devices),
                running=r.running,
                steps=r.steps,
                device_seconds=r.device_seconds,
                elastic=r.elastic,
                epoch=epochs.get(tid, 0),
                round=rounds.get(tid, 0),
                pid=r.extra.get("pid"),
            )
        fresh = set(out)
        for key, prev in self._published.items():
            if key in out or self._exits.recent(key):
                continue
            since = self._kept_since.setdefault(key, now)
            if now - since < KEEP_S:
                out[key] = prev
        self._kept_since = {k: v for k, v in self._kept_since.items() if k in out and k not in fresh}
        return out

    def written(self, residency: dict[int, NodeResidency]) -> None:
        self._published = residency
