"""What the controller side (`CeleryRuntime`) and the node side (`NodeAgent`) need from the database,
as two small protocols, plus the cluster's device ids. `quanta.db.cluster` implements both protocols with
SQLModel; the wiring layer (the CLI, `workers/`) injects it, so this layer never imports `quanta.db`. The
records both sides exchange through the database (`NodeInfo`, `NodeResidency`, `EventRecord`, ...) are
wire formats in `quanta.executor.wire`; events are encoded with their own `to_dict` and decoded with
`quanta.executor.actions.decode_event`.

The database is the truth in distributed mode. Nodes write, in one transaction per flush: their
heartbeat, the trials resident on them (with the assignment epoch and the last round each applied),
and their new events as rows numbered per node (`seq` 1, 2, 3, ... in commit order, so a reader that
remembers the last `seq` per node never skips a row committed late). The controller reads those rows;
Redis only carries the controller's actions to the nodes.

Device ids are unique in the cluster: a node's local device `cpu:0` is `n1/cpu:0` to the controller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from quanta.executor.actions import TrialLaunch
from quanta.executor.wire import Assignment, EventRecord, NodeDevice, NodeInfo, NodeResidency

SEP = "/"  # node/device

# Lifecycle events say what a process did; a process left behind by a move (older epoch) is no longer
# the trial's process, so its lifecycle events are dropped. Measurements (reports, profiles,
# checkpoints) stay facts whichever process made them.
LIFECYCLE = frozenset({"started", "resumed", "parked", "exited", "handoff"})


def global_device(node: str, device: str) -> str:
    return f"{node}{SEP}{device}"


def split_device(device: str) -> tuple[str, str]:
    """`"n1/cpu:0"` -> `("n1", "cpu:0")`. Raises ValueError without a node prefix."""
    node, sep, local = device.partition(SEP)
    if not sep or not node or not local:
        raise ValueError(f"device '{device}' has no node prefix (expected NODE/DEVICE)")
    return node, local


class ClusterView(Protocol):
    """The controller side: what `CeleryRuntime` reads and writes."""

    def nodes(self) -> list[NodeInfo]: ...

    def events_since(self, cursor: dict[str, int], limit: int = 1000) -> list[EventRecord]:
        """Event rows with seq > cursor[node] (0 for nodes absent), per node in seq order."""
        ...

    def assignments(self) -> dict[int, Assignment]: ...

    def assign(self, trial_id: int, node: str) -> int:
        """Assign the trial to `node` with a new epoch (previous + 1); returns the epoch."""
        ...

    def mark_node(self, node: str, status: str) -> None: ...

    def load_cursor(self) -> dict[str, dict[str, int]]:
        """{"handled": {node: seq}, "returned": {node: seq}} as last saved (empty dicts at first)."""
        ...

    def save_cursor(self, cursor: dict[str, dict[str, int]]) -> None: ...

    def has_report(self, trial_id: int, step: int, at: float) -> bool:
        """Whether the controller already stored this report (dedupe after a controller restart)."""
        ...


class NodeLedger(Protocol):
    """The node side: what `NodeAgent` reads and writes."""

    def register(self, node: str, incarnation: str, devices: Sequence[NodeDevice]) -> int:
        """Upsert the node row (status up); returns the last event seq already written for this node."""
        ...

    def beat(
        self,
        node: str,
        incarnation: str,
        residency: Mapping[int, NodeResidency],
        events: Iterable[EventRecord],
    ) -> None:
        """One transaction: heartbeat, residency, and the node's new events (numbered by `seq`)."""
        ...

    def leave(self, node: str, incarnation: str) -> None:
        """A clean shutdown: the node is gone (its trials are restarted elsewhere)."""
        ...

    def claim(self, node: str, trial_id: int, round_no: int) -> bool:
        """Record that this node applies (trial, round); False if it was applied before (redelivery)."""
        ...

    def assignments_of(self, trial_ids: Sequence[int]) -> dict[int, Assignment]: ...

    def launch(self, trial_id: int, epoch: int) -> TrialLaunch: ...
