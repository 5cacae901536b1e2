"""What the controller side (`CeleryRuntime`) and the node side (`NodeAgent`) need from the database,
as two small protocols, plus the wire format of events and device ids. `app.db.cluster` implements
both protocols with SQLModel; the wiring layer (the CLI, `workers/`) injects it, so this layer never
imports `app.db`.

The database is the truth in distributed mode. Nodes write, in one transaction per flush: their
heartbeat, the trials resident on them (with the assignment epoch and the last round each applied),
and their new events as rows numbered per node (`seq` 1, 2, 3, ... in commit order, so a reader that
remembers the last `seq` per node never skips a row committed late). The controller reads those rows;
Redis only carries the controller's actions to the nodes.

Device ids are unique in the cluster: a node's local device `cpu:0` is `n1/cpu:0` to the controller.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.executor.actions import (
    Checkpointed,
    Event,
    Exited,
    Parked,
    Profiled,
    Reported,
    Resumed,
    Started,
)
from app.executor.runtime.base import TrialLaunch

SEP = "/"  # node/device

# Lifecycle events say what a process did; a process left behind by a move (older epoch) is no longer
# the trial's process, so its lifecycle events are dropped. Measurements (reports, profiles,
# checkpoints) stay facts whichever process made them.
LIFECYCLE = frozenset({"started", "resumed", "parked", "exited", "handoff"})

_EVENT_KINDS: dict[str, type] = {
    "report": Reported,
    "profile": Profiled,
    "parked": Parked,
    "resumed": Resumed,
    "started": Started,
    "checkpointed": Checkpointed,
    "exited": Exited,
}
_KIND_OF = {cls: kind for kind, cls in _EVENT_KINDS.items()}


def global_device(node: str, device: str) -> str:
    return f"{node}{SEP}{device}"


def split_device(device: str) -> tuple[str, str]:
    """`"n1/cpu:0"` -> `("n1", "cpu:0")`. Raises ValueError without a node prefix."""
    node, sep, local = device.partition(SEP)
    if not sep or not node or not local:
        raise ValueError(f"device '{device}' has no node prefix (expected NODE/DEVICE)")
    return node, local


def event_kind(e: Event) -> str:
    return _KIND_OF[type(e)]


def event_to_dict(e: Event, node: str | None = None) -> dict[str, Any]:
    """A JSON-ready dict of an event; `node` prefixes its device ids (node -> cluster ids)."""
    d = dict(e.__dict__)
    for key in ("devices", "packed_with"):
        if key in d:
            d[key] = list(d[key])
    if node is not None and "devices" in d:
        d["devices"] = [global_device(node, x) for x in d["devices"]]
    d["kind"] = event_kind(e)
    return d


def event_from_dict(d: dict[str, Any]) -> Event:
    d = dict(d)
    cls = _EVENT_KINDS[d.pop("kind")]
    for key in ("devices", "packed_with"):
        if key in d:
            d[key] = tuple(d[key])
    return cls(**d)


@dataclass(frozen=True)
class NodeInfo:
    """A node as registered in the database. `beat` grows with every heartbeat; `residency` maps trial
    id (as str, JSON) to {devices, running, steps, device_seconds, elastic, epoch, round, pid};
    `devices` are dicts {id (cluster id), kind, memory_mb}. `seq` is the last event number written."""

    name: str
    incarnation: str
    devices: tuple[dict[str, Any], ...]
    beat: int
    heartbeat_at: float  # the node's wall clock: informative only (liveness is judged by `beat` changes)
    residency: dict[str, dict[str, Any]] = field(default_factory=dict)
    seq: int = 0
    status: str = "up"  # up | dead (as the controller judged) | left (stopped cleanly)


@dataclass(frozen=True)
class EventRecord:
    node: str
    seq: int
    epoch: int
    trial_id: int
    kind: str
    data: dict[str, Any]


@dataclass(frozen=True)
class Assignment:
    """Which node may run a trial's process, and the epoch of that assignment. A Run that starts a
    new process, or moves the trial to another node, increments the epoch; a node runs a trial only
    while the database names it with the epoch its process started under (fencing)."""

    trial_id: int
    node: str
    epoch: int


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

    def register(self, node: str, incarnation: str, devices: Sequence[dict[str, Any]]) -> int:
        """Upsert the node row (status up); returns the last event seq already written for this node."""
        ...

    def beat(
        self,
        node: str,
        incarnation: str,
        residency: dict[str, dict[str, Any]],
        events: Iterable[tuple[int, int, int, str, dict[str, Any]]],
    ) -> None:
        """One transaction: heartbeat, residency, and new events as (seq, epoch, trial_id, kind, data)."""
        ...

    def leave(self, node: str, incarnation: str) -> None:
        """A clean shutdown: the node is gone (its trials are restarted elsewhere)."""
        ...

    def claim(self, node: str, trial_id: int, round_no: int) -> bool:
        """Record that this node applies (trial, round); False if it was applied before (redelivery)."""
        ...

    def assignments_of(self, trial_ids: Sequence[int]) -> dict[int, Assignment]: ...

    def launch(self, trial_id: int, epoch: int) -> TrialLaunch: ...
