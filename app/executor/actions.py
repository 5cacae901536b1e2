"""Actions a runtime carries out, and the events it reports back. Plain values that carry ids only,
so they cross a process or a broker unchanged: each is a `Wire` dataclass with one `to_dict` /
`from_dict` pair (see `quanta.executor.wire`), used by the controller's side and the node's side alike.

Vocabulary (Ray Tune's CONTINUE/PAUSE/STOP, made explicit about devices):
- `Run(trial, devices)`: make the trial compute on `devices` (start it, restart it from its checkpoint,
  or resume it where it is parked). The runtime looks up what to start (`TrialLaunch`) by trial id.
- `Suspend(trial)`: park it at the next mini-batch boundary, state kept in host memory.
- `Migrate(trial, devices)`: move a resident trial to other devices and let it compute there.
- `Stop(trial, reason)`: end it for good at the next boundary.
- `Release(trial)`: write a checkpoint and end the process; the trial goes back to the queue and
  resumes from that checkpoint when it runs again (frees host memory held by a parked trial).
- `Handoff(trial, to)`: only between the controller's `CeleryRuntime` and a node agent: the source
  half of a cross-node move (checkpoint to the shared store, end the process; node `to` starts it).
- `Fork(trial, into)`: take the resident trial's state at its next boundary (at once when parked) and
  write it as trial `into`'s checkpoint, which `into` then starts from; the trial itself goes on
  untouched. `Forked` says at which step, or why not (`gone`: it has no process, so its last checkpoint
  is what is left of it).
- `Reconfigure(trial, values)`: new values of its mutable parameters, taken at its next boundary
  (at once when parked); `Configured` says at which step.
- `Adopt(trial, values, suffix)`: a population's exploit carried out in place: the resident trial
  loads the state staged beside its own checkpoint (at its next boundary, at once when parked) with
  `values` for its mutable parameters, and stays parked; `Adopted` says at which step, or why not
  (`gone`: it has no process). Only a runtime whose `adopts_in_place` says so is sent one.
A node receives each as an `Order` (the action and the assignment epoch it runs under).

`Run`/`Migrate` may carry `until`: the trial parks itself at its first report at or past that step
(a successive-halving rung) instead of waiting for the next quantum's `Suspend`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quanta.cadence import CHECKPOINT_EVERY_QUANTA, CHECKPOINT_EVERY_S
from quanta.executor.wire import Wire, WireError


@dataclass(frozen=True)
class Run(Wire):
    trial_id: int
    devices: tuple[str, ...]
    until: int | None = None
    kind: str = "run"


@dataclass(frozen=True)
class Suspend(Wire):
    trial_id: int
    checkpoint: bool = False
    kind: str = "suspend"


@dataclass(frozen=True)
class Migrate(Wire):
    trial_id: int
    devices: tuple[str, ...]
    until: int | None = None
    kind: str = "migrate"


@dataclass(frozen=True)
class Stop(Wire):
    """End the trial's process. `checkpoint`: it writes a checkpoint first (its search ended and may be
    resumed; from a park that costs no device time)."""

    trial_id: int
    reason: str = "stopped"
    checkpoint: bool = False
    kind: str = "stop"


@dataclass(frozen=True)
class Release(Wire):
    trial_id: int
    kind: str = "release"


@dataclass(frozen=True)
class Handoff(Wire):
    """The source side of a cross-node move: park the trial, checkpoint it to the shared store and end
    its process; a task linked to this one starts it on node `to` from that checkpoint."""

    trial_id: int
    to: str
    kind: str = "handoff"


@dataclass(frozen=True)
class Fork(Wire):
    """Write the trial's state at its next boundary as trial `into`'s checkpoint, at that path plus
    `suffix` (a population's exploit stages the state beside `into`'s own checkpoint, with ".exploit",
    and that checkpoint stays as it is until the exploit is done). The runtime that carries it out finds
    the path through its launcher, as it finds every trial's: on a node, under the node's own mount of
    the checkpoint store. Answered by a `Forked` event."""

    trial_id: int
    into: int
    suffix: str = ""
    kind: str = "fork"


@dataclass(frozen=True)
class Reconfigure(Wire):
    """New values of the trial's mutable parameters (dotted names), taken at its next boundary.
    Answered by a `Configured` event."""

    trial_id: int
    values: dict[str, Any]
    kind: str = "reconfigure"


@dataclass(frozen=True)
class Adopt(Wire):
    """Take the state staged at the trial's own checkpoint path plus `suffix` (an exploit's, written by
    a `Fork`) as the trial's state, in its live process, at its next boundary (at once when parked),
    with `values` for its mutable parameters; the trial then stays parked until it is run. Its own
    checkpoint is not written while the adopted state is not its checkpoint yet (the controller renames
    the staged file over it). Answered by an `Adopted` event.

    `commit`: the staged file is on disk and stored as staged, so the process itself renames it over its
    checkpoint once it holds the state (the exploit's commit point on disk, in the order of its own
    checkpoint writes), answers `Adopted(committed=True)` and may run on at once: a `Run` can follow
    right behind."""

    trial_id: int
    values: dict[str, Any]
    suffix: str = ".exploit"
    commit: bool = False
    kind: str = "adopt"


Action = Run | Suspend | Migrate | Stop | Release | Fork | Reconfigure | Adopt
NodeAction = Action | Handoff

_ACTION_KINDS: dict[str, type[NodeAction]] = {
    "run": Run,
    "suspend": Suspend,
    "migrate": Migrate,
    "stop": Stop,
    "release": Release,
    "handoff": Handoff,
    "fork": Fork,
    "reconfigure": Reconfigure,
    "adopt": Adopt,
}


@dataclass(frozen=True)
class Order:
    """One action as a node receives it in a `quanta.apply` task: on the wire, the action's fields
    (with its `kind`) and the assignment `epoch` it runs under (the source's for a hand-off; for a
    stop, release or suspension, the epoch of the process it means). A node carries out a run only
    under the epoch the database holds, and a stop, release or suspension only for a trial it runs,
    never one older than the epoch its resident process started under (a message delivered late must
    not end a newer process). Orders without an epoch (from an older controller) apply as before."""

    action: NodeAction
    epoch: int | None = None

    @property
    def trial_id(self) -> int:
        return self.action.trial_id

    def to_dict(self) -> dict[str, Any]:
        d = self.action.to_dict()
        if self.epoch is not None:
            d["epoch"] = self.epoch
        return d

    @classmethod
    def from_dict(cls, data: Any) -> Order:
        if not isinstance(data, Mapping):
            raise WireError(f"Order: expected an object, got {data!r}")
        d = dict(data)
        epoch = d.pop("epoch", None)
        if epoch is not None and (not isinstance(epoch, int) or isinstance(epoch, bool)):
            raise WireError(f"Order.epoch: expected int, got {epoch!r}")
        kind = d.get("kind")
        action = _ACTION_KINDS.get(kind) if isinstance(kind, str) else None
        if action is None:
            raise WireError(f"Order.kind: expected one of {sorted(_ACTION_KINDS)}, got {kind!r}")
        return cls(action.from_dict(d), epoch)


# ---- events: runtime -> controller ---------------------------------------------------------------


@dataclass(frozen=True)
class Reported(Wire):
    """`trial.report(**metrics)` at `step` (steps done when reported). A non-finite value (NaN, +-inf:
    JSON and PostgreSQL's json type cannot hold them) travels as None in `metrics`, with what it was
    in `non_finite` (``{"loss": "nan"}``); build one with `reported()`, which does that split.
    `replay`: sent again from the trial's spool by a later process (it may be stored already).
    `attempt`: which process of the trial made it (0 for its first, one more for each process started
    after it: `quanta.executor.runtime.child.claim_attempt`): a step run again by a later process (restarted
    from an older checkpoint) is a report of a later attempt, stored beside the first (`ReportRow`)."""

    trial_id: int
    step: int
    metrics: dict[str, float | None]
    at: float
    non_finite: dict[str, str] = field(default_factory=dict)
    replay: bool = False
    attempt: int = 0


def split_non_finite(metrics: Mapping[str, float | None]) -> tuple[dict[str, float | None], dict[str, str]]:
    """`metrics` with NaN/inf replaced by None, and per replaced name what it was ("nan", "inf",
    "-inf"). Finite values and None pass unchanged."""
    clean: dict[str, float | None] = {}
    flags: dict[str, str] = {}
    for name, value in metrics.items():
        if value is not None and not math.isfinite(value):
            flags[name] = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
            clean[name] = None
        else:
            clean[name] = value
    return clean, flags


def reported(
    trial_id: int, step: int, metrics: Mapping[str, float | None], at: float, replay: bool = False, attempt: int = 0
) -> Reported:
    """A `Reported` event whose metrics are JSON-safe (see `split_non_finite`)."""
    clean, flags = split_non_finite(metrics)
    return Reported(trial_id, step, clean, at, flags, replay, attempt)


@dataclass(frozen=True)
class Profiled(Wire):
    """One measured stretch of computing: `steps` mini-batches in `seconds` on `devices`, beside
    `packed_with` (other trials computing on the same device meanwhile), resident memory `rss_mb`."""

    trial_id: int
    devices: tuple[str, ...]
    steps: int
    seconds: float
    rss_mb: float
    at: float
    started_at: float
    packed_with: tuple[int, ...] = ()
    round_no: int = 0

    @property
    def rate(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class Parked(Wire):
    trial_id: int
    step: int
    park_ms: float  # suspend request to parked (0 when it parked itself at its `until` step)
    at: float
    at_limit: bool = False  # parked itself at the step limit of its Run (a rung), not on request


@dataclass(frozen=True)
class Resumed(Wire):
    trial_id: int
    devices: tuple[str, ...]
    resume_ms: float  # resume request to computing
    migrated: bool
    at: float


@dataclass(frozen=True)
class Started(Wire):
    """The trial's process is up and computing (`step` > 0 when restored from a checkpoint)."""

    trial_id: int
    devices: tuple[str, ...]
    start_ms: float  # start request to first step
    step: int
    at: float


@dataclass(frozen=True)
class Checkpointed(Wire):
    trial_id: int
    step: int
    path: str
    at: float


@dataclass(frozen=True)
class Exited(Wire):
    """The trial's process ended. `status`: completed, killed (stopped on request), failed (raised:
    not retried), crashed (died by a signal or lost contact: restartable from its checkpoint),
    released (checkpointed and ended on request: queued again, resumes from the checkpoint)."""

    trial_id: int
    status: str
    steps: int
    error: str | None
    at: float
    elastic: bool = False
    device_seconds: float = 0.0


@dataclass(frozen=True)
class Forked(Wire):
    """Answer to `Fork`: trial `trial_id`'s state at `step` is trial `into`'s checkpoint now, unless
    `error` says why not. `gone`: the trial had no live process to take it from (what is left of it is
    its last checkpoint); otherwise the write failed and nothing was written."""

    trial_id: int
    into: int
    step: int
    at: float
    error: str | None = None
    gone: bool = False


@dataclass(frozen=True)
class Configured(Wire):
    """Answer to `Reconfigure`: from `step` on the trial computes with `values` (those that changed)."""

    trial_id: int
    step: int
    values: dict[str, Any]
    at: float


@dataclass(frozen=True)
class Adopted(Wire):
    """Answer to `Adopt`: the trial computes from the adopted state at `step` from its next run on, unless
    `error` says why not. `gone`: it had no live process; otherwise its own state is what it holds (a
    load that failed half-way ends the process without a checkpoint, as a release: it then starts again
    from its checkpoint file)."""

    trial_id: int
    step: int
    at: float
    error: str | None = None
    gone: bool = False
    committed: bool = False  # `Adopt(commit=True)`: the staged file is the trial's checkpoint now


Event = Reported | Profiled | Parked | Resumed | Started | Checkpointed | Exited | Forked | Configured | Adopted

# The kind stored beside an event's fields (a node's event row has a `kind` column). "handoff" is the
# `Exited` of a process that ended because its trial moved to another node: its device time carries
# over to the trial, but it is not the trial's exit.
_EVENT_KINDS: dict[str, type[Event]] = {
    "report": Reported,
    "profile": Profiled,
    "parked": Parked,
    "resumed": Resumed,
    "started": Started,
    "checkpointed": Checkpointed,
    "exited": Exited,
    "forked": Forked,
    "configured": Configured,
    "adopted": Adopted,
}
_KIND_OF = {cls: kind for kind, cls in _EVENT_KINDS.items()}
HANDOFF = "handoff"


def event_kind(e: Event) -> str:
    return _KIND_OF[type(e)]


def decode_event(kind: str, data: Any) -> Event:
    """The event of kind `kind` from its `to_dict()` fields; raises `WireError` naming the field."""
    cls = Exited if kind == HANDOFF else _EVENT_KINDS.get(kind)
    if cls is None:
        raise WireError(f"event kind: expected one of {sorted([*_EVENT_KINDS, HANDOFF])}, got {kind!r}")
    return cls.from_dict(data)


@dataclass
class Residency:
    """Where one trial's process is, for the controller's snapshot."""

    devices: tuple[str, ...]
    running: bool
    steps: int = 0
    device_seconds: float = 0.0
    elastic: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrialLaunch:
    """Everything a node needs to start (or restart) a trial's process. Looked up by trial id, so
    actions and tasks carry ids only (built by `quanta.db.launch` for the controller and the nodes)."""

    trial_id: int
    trainable: str  # "package.module:function"
    config: dict[str, Any]
    max_steps: int
    checkpoint_path: str
    resume: bool = False  # restore from checkpoint_path if it exists
    checkpoint_every_quanta: int = CHECKPOINT_EVERY_QUANTA  # the knobs' defaults (quanta.cadence)
    checkpoint_every_s: float = CHECKPOINT_EVERY_S
    log_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    metric: str | None = None  # the search's objective: `trial.metric`, what integrations report
    # Every name the search reads from a report (objectives, then constrained values): `trial.metrics`,
    # what the integrations check was logged. Empty: `metric` alone.
    metrics: tuple[str, ...] = ()
    mutable: tuple[str, ...] = ()  # the search's mutable parameters: `trial.mutable`
