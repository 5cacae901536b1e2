"""`NodeWatch`: which nodes the controller holds alive, judged from the node rows it reads.

Contract (used by `CeleryRuntime`, which calls `refresh` on every poll):
- A node is presumed lost when its heartbeat counter has not changed for `dead_after_s` as seen HERE
  (monotonic time, so the nodes' clocks do not matter), when it comes back as a new incarnation (it
  restarted: its processes are gone), or when it says it left. `on_lost(info, why)` is then called with
  the node's last row seen before (the processes it had), once per loss; a silent node is also marked
  dead in the database (best effort).
- Silence counts only after `dead_after_s` of observation: a controller that starts, or whose reads
  failed (`restart_observation`), does not declare every node dead because it was not looking.
- A node first seen is alive if its row says "up" and its heartbeat is recent by the wall clock.
- A node whose heartbeat moves again is alive again; a new incarnation starts with nothing warmed.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from quanta.executor.runtime.cluster import ClusterView
from quanta.executor.wire import NodeInfo

log = logging.getLogger("quanta.celery")


@dataclass
class WatchedNode:
    info: NodeInfo
    alive: bool
    changed_at: float  # monotonic time the beat last changed, as seen here
    warmed: set[str] = field(default_factory=set)  # modules the node was asked to import


class NodeWatch:
    def __init__(self, cluster: ClusterView, dead_after_s: float, on_lost: Callable[[NodeInfo, str], None]):
        self.cluster = cluster
        self.dead_after_s = dead_after_s
        self._on_lost = on_lost
        self.nodes: dict[str, WatchedNode] = {}
        self._observing_since: float | None = None

    def restart_observation(self) -> None:
        """The node rows could not be read: silence counts again from the next read that succeeds."""
        self._observing_since = None

    def refresh(self) -> None:
        infos = self.cluster.nodes()
        now = time.monotonic()
        if self._observing_since is None:
            self._observing_since = now
        observed = now - self._observing_since
        for info in infos:
            n = self.nodes.get(info.name)
            if n is None:
                fresh = time.time() - info.heartbeat_at < max(60.0, 6 * self.dead_after_s)
                self.nodes[info.name] = WatchedNode(info, info.status == "up" and fresh, now)
                continue
            old = n.info
            if info.incarnation != old.incarnation:
                if n.alive:
                    self._on_lost(n.info, f"node {info.name} restarted")
                n.alive, n.changed_at, n.warmed = info.status == "up", now, set()
            elif info.beat != old.beat:
                n.changed_at = now
                if info.status == "left":
                    if n.alive:
                        self._on_lost(n.info, f"node {info.name} left the cluster")
                    n.alive = False
                elif not n.alive:
                    log.warning("node %s is back", info.name)
                    n.alive = True
            elif n.alive and now - n.changed_at > self.dead_after_s and observed > self.dead_after_s:
                self._on_lost(n.info, f"node {info.name} lost: no heartbeat for {now - n.changed_at:.1f} s")
                n.alive = False
                with contextlib.suppress(Exception):
                    self.cluster.mark_node(info.name, "dead")
            n.info = info
