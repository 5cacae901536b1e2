"""`ControllerOptions`: how a controller is set up, given once at construction and never changed.

The defaults suit the service (`quanta serve`, `quanta run`, `quanta controller`). The simulator
changes only how often the controller does things, never what it decides: it lifts the poll cap, stops
republishing the dashboard's cluster view, caches trial views between snapshots and skips the rounds a
policy promised would change nothing (`trust_quiet`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from quanta.executor.policy.knobs import ShareKnobs
from quanta.executor.policy.types import Policy

# What a serving controller waits for a hosted searcher per tick: asks of ordinary spaces take a few ms and
# come within it (the trial starts this tick); a slow one is taken up at a later tick.
SERVICE_SEARCHER_WAIT_S = 0.05
# How often a controller with readers (`quanta serve`, `quanta run`, `quanta controller`) republishes what
# runs where and the resident trials' progress: five times a second is live for a dashboard, and a round a
# few milliseconds apart (trials of short steps reach rungs that often) no longer pays these writes each
# time; on 2 CPU devices they were part of a controller that took a whole core from the trials.
READER_PUBLISH_EVERY_S = 0.2
# How often such a controller reads what users asked through the store while trials run (`read_store_every_s`):
# well within the loop's tick (`quanta.service.TICK_S`), the longest a command was ever promised to wait.
READ_STORE_EVERY_S = 0.2


@dataclass(frozen=True)
class ControllerOptions:
    """`workdir`: checkpoints and trial logs (in distributed mode the store every node reads).
    `policy` / `quantum_s`: fix the cluster's policy and quantum (the simulator, benchmarks); when None
    the oldest running search's spec chooses them.
    `share`: the share layer's knobs (`quanta.executor.policy.share`) when no policy is fixed (None: defaults).
    `poll_cap_s`: the longest one poll of the runtime may block (seconds of the runtime's clock), so
    commands written to the database are picked up promptly; `math.inf` lifts the cap.
    `publish_every_s`: republish the cluster view (API `/cluster`, dashboard) at most this often
    (0 = every planning tick; `math.inf` = never, for a run with no viewer).
    `read_store_every_s`: while a trial is alive, read what users asked through the store (new searches,
    commands, forks, quotas, users' weights; `BookSync`, `Forks.sync`) at most this often (0 = every
    tick); an idle controller reads at every tick. With steps of a millisecond a tick comes every few,
    and those reads were a good part of each.
    `cache_views`: reuse a trial's `TrialView` between snapshots while nothing about it changed (no
    event, no action, not resident); worth it for clusters of thousands of trials.
    `kind_aware`: on a cluster of several device kinds, place trials where their rate relative to
    other kinds is highest (`ClusterSnapshot.kind_aware`, `quanta.executor.policy.kinds`); False:
    kind-blind (still never on a kind where a trial's rate is 0).
    `trust_quiet`: skip planning while the last plan's `Plan.quiet_until` holds (the policy promised
    the same placement until then unless an event wakes the controller) and wait for that event rather
    than the next quantum. Off in the service, whose planning ticks also publish progress.
    `searcher_wait_s`: None builds and asks each search's searcher on the controller's thread (the
    simulator, tests: deterministic); a number puts each on a thread of its own (`SearcherHost`) and the
    tick waits at most that long for it, so one wide search never holds the others' scheduling (the
    service: `SERVICE_SEARCHER_WAIT_S`)."""

    workdir: Path = Path(".quanta")
    policy: Policy | None = None
    quantum_s: float | None = None
    poll_cap_s: float = 0.5
    publish_every_s: float = 0.0
    read_store_every_s: float = 0.0
    cache_views: bool = False
    share: ShareKnobs | None = None
    kind_aware: bool = True
    trust_quiet: bool = False
    searcher_wait_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "workdir", Path(self.workdir))  # accept a str too
        if self.poll_cap_s <= 0 or math.isnan(self.poll_cap_s):
            raise ValueError(f"poll_cap_s must be > 0, not {self.poll_cap_s}")
        if self.searcher_wait_s is not None and not self.searcher_wait_s >= 0:
            raise ValueError(f"searcher_wait_s must be >= 0 or None, not {self.searcher_wait_s}")
        if self.publish_every_s < 0:
            raise ValueError(f"publish_every_s must be >= 0, not {self.publish_every_s}")
        if not self.read_store_every_s >= 0:
            raise ValueError(f"read_store_every_s must be >= 0, not {self.read_store_every_s}")
