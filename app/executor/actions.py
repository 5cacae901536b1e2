"""Actions a runtime carries out, and the events it reports back. Plain values that carry ids only,
so they cross a process or a broker unchanged (Celery tasks take exactly these fields).

Vocabulary (Ray Tune's CONTINUE/PAUSE/STOP, made explicit about devices):
- `Run(trial, devices)`: make the trial compute on `devices` (start it, restart it from its checkpoint,
  or resume it where it is parked).
- `Suspend(trial)`: park it at the next mini-batch boundary, state kept in host memory.
- `Migrate(trial, devices)`: move a resident trial to other devices and let it compute there.
- `Stop(trial, reason)`: end it for good at the next boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Run:
    trial_id: int
    devices: tuple[str, ...]
    kind: str = "run"


@dataclass(frozen=True)
class Suspend:
    trial_id: int
    checkpoint: bool = False
    kind: str = "suspend"


@dataclass(frozen=True)
class Migrate:
    trial_id: int
    devices: tuple[str, ...]
    kind: str = "migrate"


@dataclass(frozen=True)
class Stop:
    trial_id: int
    reason: str = "stopped"
    kind: str = "stop"


Action = Run | Suspend | Migrate | Stop

_KINDS: dict[str, type] = {"run": Run, "suspend": Suspend, "migrate": Migrate, "stop": Stop}


def action_to_dict(a: Action) -> dict[str, Any]:
    d = dict(a.__dict__)
    if "devices" in d:
        d["devices"] = list(d["devices"])
    return d


def action_from_dict(d: dict[str, Any]) -> Action:
    d = dict(d)
    cls = _KINDS[d.pop("kind")]
    if "devices" in d:
        d["devices"] = tuple(d["devices"])
    return cls(**d)


# ---- events: runtime -> controller ---------------------------------------------------------------


@dataclass(frozen=True)
class Reported:
    """`trial.report(**metrics)` at `step` (steps done when reported)."""

    trial_id: int
    step: int
    metrics: dict[str, float]
    at: float


@dataclass(frozen=True)
class Profiled:
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
class Parked:
    trial_id: int
    step: int
    park_ms: float  # suspend request to parked
    at: float


@dataclass(frozen=True)
class Resumed:
    trial_id: int
    devices: tuple[str, ...]
    resume_ms: float  # resume request to computing
    migrated: bool
    at: float


@dataclass(frozen=True)
class Started:
    """The trial's process is up and computing (`step` > 0 when restored from a checkpoint)."""

    trial_id: int
    devices: tuple[str, ...]
    start_ms: float  # start request to first step
    step: int
    at: float


@dataclass(frozen=True)
class Checkpointed:
    trial_id: int
    step: int
    path: str
    at: float


@dataclass(frozen=True)
class Exited:
    """The trial's process ended. `status`: completed, killed (stopped on request), failed (raised:
    not retried), crashed (died by a signal or lost contact: restartable from its checkpoint)."""

    trial_id: int
    status: str
    steps: int
    error: str | None
    at: float
    elastic: bool = False
    device_seconds: float = 0.0


Event = Reported | Profiled | Parked | Resumed | Started | Checkpointed | Exited


@dataclass
class Residency:
    """Where one trial's process is, for the controller's snapshot."""

    devices: tuple[str, ...]
    running: bool
    steps: int = 0
    device_seconds: float = 0.0
    elastic: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
