"""The `Runtime` protocol: the mechanism layer the controller drives. Implementations: `LocalRuntime`
(this machine's devices), `CeleryRuntime` (node agents over a broker), `SimRuntime` (virtual clock).
The controller never asks which one it has."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.executor.actions import Action, Event, Residency
from app.executor.policy.types import DeviceView


@dataclass(frozen=True)
class TrialLaunch:
    """Everything a node needs to start (or restart) a trial's process. Looked up by trial id, so
    actions and tasks carry ids only."""

    trial_id: int
    trainable: str  # "package.module:function"
    config: dict[str, Any]
    max_steps: int
    checkpoint_path: str
    resume: bool = False  # restore from checkpoint_path if it exists
    checkpoint_every_quanta: int = 10
    checkpoint_every_s: float = 60.0
    log_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Runtime(Protocol):
    def devices(self) -> Sequence[DeviceView]:
        """Devices trials can be placed on (ids unique across the cluster). A runtime whose devices do
        not change may return the same tuple each time (the controller then passes it on as is)."""
        ...

    def warm(self, modules: Sequence[str]) -> None:
        """Prepare to start trials of these trainable modules quickly (import them once)."""
        ...

    def apply(self, round_no: int, actions: Sequence[Action]) -> None:
        """Carry out one round's actions in order (stops, suspends, migrations, runs). Idempotent per
        (trial, round): applying the same round again does nothing more. Returns once suspended trials
        have parked (so freed devices are really free) and runs have been launched."""
        ...

    def poll(self, timeout: float) -> list[Event]:
        """Events since the last poll, waiting up to `timeout` seconds (of this runtime's clock) for
        the first. A simulated runtime advances its virtual clock here."""
        ...

    def residency(self) -> dict[int, Residency]:
        """Trials that have a live process: devices, running or parked, steps, device seconds."""
        ...

    def now(self) -> float:
        """This runtime's clock (wall time for real runtimes, virtual for the simulator)."""
        ...

    def close(self) -> None:
        """Stop every trial process and release devices."""
        ...
