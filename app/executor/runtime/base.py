"""The `Runtime` protocol: the mechanism layer the controller drives. Implementations: `LocalRuntime`
(this machine's devices), `CeleryRuntime` (node agents over a broker), `SimRuntime` (virtual clock).
The controller never asks which one it has.

A runtime learns what a trial is (its `TrialLaunch`) from a `Launcher`: the controller binds its own
launcher (`Runtime.bind`) when it is built; a node agent or a test gives one at construction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from quanta.executor.actions import Action, Event, Residency, TrialLaunch

if TYPE_CHECKING:  # an annotation only: a trial process (which imports this module) never loads the policies
    from quanta.executor.policy.types import DeviceView

# `TrialLaunch` (what a launcher returns for a trial id) is part of the runtime's interface; it is
# defined in `quanta.executor.actions` so that the database layer builds it without importing runtimes.
__all__ = ["LaunchFn", "Launcher", "Runtime", "TrialLaunch"]


class Launcher(Protocol):
    """Says what a trial is, by id: everything its process needs to start (or restart)."""

    def launch(self, trial_id: int) -> TrialLaunch:
        """The launch of trial `trial_id`; raises (KeyError, ValueError) for a trial it cannot start."""
        ...


@dataclass(frozen=True)
class LaunchFn:
    """A `Launcher` over a plain function (tests, benchmarks, a node agent's ledger look-up)."""

    fn: Callable[[int], TrialLaunch]

    def launch(self, trial_id: int) -> TrialLaunch:
        return self.fn(trial_id)


class Runtime(Protocol):
    # Whether a resident trial can take a population's exploit in its live process (`Adopt`): the source's
    # state is handed over on this node without ending the target's process. False: the controller ends
    # the target's process (`Release`) and starts it again from the staged state.
    adopts_in_place: bool
    # Whether a poll acknowledges the batch the one before it returned (events kept outside this process,
    # read again after `redeliver`): the controller then stores each batch before it polls again. False:
    # events live only in this process, and the controller may store several batches' rows in one write.
    acks_by_polling: bool

    def bind(self, launcher: Launcher) -> None:
        """Look up trials' launches with `launcher` from now on (the controller binds itself when it is
        built, before it applies any action). A runtime whose launches come from elsewhere (a node's
        database ledger) ignores it."""
        ...

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

    def redeliver(self) -> None:
        """The events returned by the last poll were not all handled durably (the controller failed
        while recording them): a runtime that keeps its events outside the process (`CeleryRuntime`
        reads them from the database) returns them again on the next poll; the others do nothing.
        Polling without calling this first means the last batch was handled."""
        ...

    def residency(self) -> dict[int, Residency]:
        """Trials that have a live process: devices, running or parked, steps, device seconds.

        A runtime may return the same `Residency` object again on later calls. An object returned while
        its trial was not running is never changed afterwards: any change of that trial's residency (a
        resume, a move, a release) comes as a new object (the snapshot trusts such an object to be
        unchanged). Objects returned while running may change in place."""
        ...

    def now(self) -> float:
        """This runtime's clock (wall time for real runtimes, virtual for the simulator)."""
        ...

    def close(self) -> None:
        """Stop every trial process and release devices."""
        ...
