"""`Trial`: the object a trainable receives. Its public surface is the trial contract:

    def train(config: dict, trial: Trial) -> None:
        model, opt = build(config)
        trial.track(model=model, optimizer=opt)
        for step in trial.steps(max_steps):      # one iteration = one mini-batch
            x, y = batch(step, device=trial.device)
            ...
            if step % 50 == 0:
                trial.report(accuracy=acc)

- `track(**objects)`: objects with `state_dict()`/`load_state_dict()` (modules, optimizers, LR
  schedulers, ...). Modules and optimizers are moved between devices by Quanta (and any object with a
  `move_to(device)` method is told of every move); all are saved in checkpoints and restored on restart.
- `steps(n)`: yields step numbers from where the trial resumes (0, or the checkpointed step) up to
  `min(n, budget max_steps) - 1`. Between two yields Quanta may park the trial (suspend), move it to
  another device, checkpoint it, or stop it; the body of the loop never notices except through
  `trial.device`.
- `report(**metrics)`: named float metrics at the current step; the spec's metric is the objective.
- `device` / `devices`: the torch device(s) the trial runs on now. `elastic = True` declares the
  trainable data-parallel ready (it may be given more devices).
- `metric`: the name of the search's objective (None standalone unless given); with several objectives,
  the first.
- `metrics`: every name the search reads from a report: its objectives in order, then the values its
  constraints bound (`(metric,)` for a single-objective search; empty standalone unless given). The
  integrations check that each of them was logged.
- `config`: the trial's configuration. The search's `mutable` parameters (`mutable`) may change at a
  mini-batch boundary (a fork's new values, a population's exploration): `config` is then updated in
  place and every function given to `on_config_change(fn)` is called with the changed values. A
  tracked optimizer follows changes of `lr`, `momentum` and `weight_decay` by itself (each of its
  parameter groups that has the key; a learning rate a schedule or the trainable scaled is scaled by the
  same factor, and so are tracked LR schedulers' base rates). A trainable that does nothing else still
  works: other mutable values change where it reads `config`.

A population's exploit may replace the trial's state in its own process at a boundary of `steps()`
(`Adopt`): the tracked objects, RNG states, step and history are restored from another trial's state as a
restart from it would restore them, `config` takes the new values (hooks told, tracked optimizers
following), and the loop goes on from that state's step. A loop Quanta does not own is never adopted into
(its step is its own): its process is restarted instead.

A training loop Quanta does not own (PyTorch Lightning's, the Hugging Face Trainer's: see
`app/integrations/`) uses lower-level calls instead of `steps()`: `enter_loop(step)` once when
the loop starts (at the step `restored_step` says after a restore), `advance_to(step)` to count the
mini-batches done, and `boundary(step)` between mini-batches, where Quanta may park, move, checkpoint
or stop the trial exactly as between two iterations of `steps()`; `budget_spent` says the trial's step
budget is used up (the loop should end).

Without a controller (`Trial.standalone()`), steps simply run and reports are kept in `history`,
so a trainable can be debugged as a plain function.

Reports are not lost with the process that carries them: each is appended to a spool file beside the
trial's checkpoint (`<checkpoint>.reports.jsonl`) before it is sent, and a later process of the same
trial (a restart after a crash, a killed node, a move) sends the spool again first, marked as a
replay; the controller keeps the replayed reports it has not stored yet (`EventRecorder`). Only a
later process replays: a trial's first process (`resume=False`) owns no spool and no checkpoint yet, so
files already at its paths are another search's (an earlier database's search with the same ids, in the
same working directory): it neither replays nor restores them, and starts the spool afresh.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from quanta.devices import cpu_devices
from quanta.sdk.mechanism import ControllerGone, TrialMechanism, TrialReleased, TrialStopped
from quanta.sdk.mutable import ConfigHook
from quanta.sdk.tracked import move

__all__ = ["ControllerGone", "Trial", "TrialReleased", "TrialStopped"]


class Trial(TrialMechanism):
    """The in-process view of one trial: the trial contract (see the module docstring) on the mechanism
    Quanta drives it with (`TrialMechanism`). Constructed by the runtime (or `standalone()`)."""

    # ---- public contract ---------------------------------------------------------------------

    @classmethod
    def standalone(
        cls,
        config: dict[str, Any] | None = None,
        max_steps: int = 10**9,
        metric: str | None = None,
        metrics: Sequence[str] = (),
    ) -> Trial:
        """A trial with no controller: runs on the first CPU device, keeps reports in `history`. `metric`
        and `metrics` stand for the search's (what the integrations check was logged); `metric` defaults
        to the first of `metrics`."""
        if metric is None and metrics:
            metric = metrics[0]
        return cls(0, dict(config or {}), max_steps, cpu_devices(1)[:1], metric=metric, metrics=metrics)

    @property
    def controlled(self) -> bool:
        """True when Quanta runs this trial (False for `standalone()`)."""
        return self._conn is not None

    @property
    def step(self) -> int:
        """Mini-batches done so far."""
        return self._step

    @property
    def restored_step(self) -> int | None:
        """The step the trial resumed at when `track()` restored it from a checkpoint, else None."""
        return self._start_step if self._restored else None

    @property
    def budget_spent(self) -> bool:
        """True once `max_steps` mini-batches are done: a loop Quanta does not own should end."""
        return self._step >= self.max_steps

    def on_config_change(self, fn: ConfigHook) -> ConfigHook:
        """Call `fn(changes)` whenever mutable parameters change at a boundary: `changes` maps each
        changed dotted name to its new value, `config` holds it already and tracked optimizers follow
        `lr`, `momentum` and `weight_decay` already. Also called by `track()` when it restores state
        taken under other values (a fork's first process, with the fork's values), so register it
        before `track()` to hear of that. Returns `fn` (usable as a decorator)."""
        self._config_hooks.append(fn)
        return fn

    def track(self, **objects: Any) -> None:
        """Register state to move, checkpoint and restore. Restores from the checkpoint when the
        trial restarts (after a crash or a cross-node move).

        Quanta moves modules and optimizers to the trial's device here and at every move (a park on an
        accelerator moves them to host memory, a resume or a migration to the new device). Another
        object that must follow the state, say a library's record of where to send batches, may define
        `move_to(device: torch.device)`: it is called at each of those moves, after the objects tracked
        before it and with the same device, in the order tracked."""
        for name, obj in objects.items():
            if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
                raise TypeError(f"trial.track({name}=...): object has no state_dict/load_state_dict")
            self._tracked[name] = obj
            move(obj, self.device)
        if self._resume and self._checkpoint_path and Path(self._checkpoint_path).exists():
            self._restore(Path(self._checkpoint_path))

    def report(self, **metrics: float) -> None:
        """Record named metrics at the current step. Values must be real numbers."""
        clean: dict[str, float] = {}
        for key, value in metrics.items():
            try:
                clean[key] = float(value)
            except (TypeError, ValueError):
                raise TypeError(f"trial.report({key}=...): not a number: {value!r}") from None
        self.history.append((self._step, clean))
        at = time.time()
        self._spool(self._step, clean, at)
        self._send("report", step=self._step, metrics=clean, at=at, attempt=self._attempt)
        if self._until is not None and self._step >= self._until:
            self._limit_reported = True

    def steps(self, n: int | None = None) -> Iterator[int]:
        """Yield step numbers; Quanta may park, move, checkpoint or stop the trial between them."""
        end = self.max_steps if n is None else min(int(n), self.max_steps)
        self._replay_spool()
        self._step = self._start_step
        self._win_start, self._win_wall = time.monotonic(), time.time()
        self._own_loop = True
        try:
            while self._step < end:
                self._between_steps()
                step = self._step  # read after the boundary: an adopted state goes on from its own step
                if step >= end:
                    break
                try:
                    yield step
                except GeneratorExit:  # the trainable left the loop (break/return) after this step
                    self._step = step + 1
                    self._win_steps += 1
                    raise
                self._step = step + 1
                self._win_steps += 1
        finally:
            self._own_loop = False
        self._between_steps(final=True)

    def enter_loop(self, step: int) -> None:
        """A training loop Quanta does not own starts, at `step` mini-batches done (the loop's own
        count, which its restored state carries: `restored_step` after a restore, else 0). Steps/s are
        measured from here (the set-up before does not count as computing). Quanta acts only at
        `boundary()`."""
        self._step = int(step)
        self._win_steps, self._win_start, self._win_wall = 0, time.monotonic(), time.time()

    def advance_to(self, step: int) -> None:
        """Count mini-batches in a loop Quanta does not own: `step` are done in all (the loop's global
        step, counted as `steps()` counts); reports made from now on carry it. Nothing else happens
        here: Quanta acts only at `boundary()`. A step below the current one is refused (ValueError):
        a loop's step only grows."""
        step = int(step)
        if step < self._step:
            raise ValueError(f"trial step {step}: the trial is already at step {self._step}")
        self._win_steps += step - self._step
        self._step = step

    def boundary(self, step: int | None = None) -> None:
        """A mini-batch boundary in a loop Quanta does not own, after `advance_to(step)` when a step is
        given. Quanta may park the trial here (the call blocks until it is resumed), move it to other
        devices, checkpoint it (its tracked objects, and the current step as the step to resume at) or
        stop it, exactly as between two iterations of `steps()`: it raises `TrialStopped` (or
        `TrialReleased`), which the loop must let through. Call it where the tracked state is exactly
        what the next mini-batch starts from."""
        if step is not None:
            self.advance_to(step)
        self._between_steps()
