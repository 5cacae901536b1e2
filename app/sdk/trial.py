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

import copy
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from quanta.devices import Device, cpu_devices, pin_process, torch_device
from quanta.sdk import checkpoint as ckpt


class TrialStopped(BaseException):
    """Raised inside `steps()` when Quanta stops the trial. A BaseException, so a trainable's
    `except Exception` does not swallow it."""


class TrialReleased(TrialStopped):
    """Raised inside `steps()` when Quanta releases the trial: its checkpoint is written, the process
    ends, and the trial resumes from that checkpoint when it runs again."""


class ControllerGone(BaseException):
    """The control connection closed: the controller or node agent is gone; the trial exits."""


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0


def _move(obj: Any, device: torch.device) -> None:
    """Move a tracked object's tensors to `device` in place (modules and optimizers); any other object
    with a `move_to(device)` method is asked to follow (a training library's own idea of the device)."""
    if isinstance(obj, torch.nn.Module):
        obj.to(device)
    elif isinstance(obj, torch.optim.Optimizer):
        for state in obj.state.values():
            for key, value in state.items():
                # Adam's `step` counter stays on the CPU by design unless capturable.
                if torch.is_tensor(value) and not (key == "step" and value.dim() == 0):
                    state[key] = value.to(device, non_blocking=False)
    elif callable(getattr(obj, "move_to", None)):
        obj.move_to(device)


# The optimizer hyperparameters a tracked optimizer follows by itself when a mutable parameter of that
# (top-level) name changes.
OPTIMIZER_KEYS = ("lr", "momentum", "weight_decay")

ConfigHook = Callable[[dict[str, Any]], None]


def _get(config: Mapping[str, Any], name: str) -> Any:
    """The value of dotted `name` in a nested configuration (None when absent)."""
    node: Any = config
    for part in name.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _set(config: dict[str, Any], name: str, value: Any) -> None:
    node = config
    *parents, last = name.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = value


def _follow(value: Any, old: Any, new: Any) -> Any:
    """An optimizer's hyperparameter after its configured value went from `old` to `new`: `new` where
    it still held `old` (or `old` was 0 or unknown), else scaled by new/old (a schedule, or a trainable
    that derived it from the configured value, keeps its shape)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return value
    if not isinstance(old, int | float) or old == 0 or value == old or not math.isfinite(value):
        return new
    return value * (new / old)


def _follow_optimizers(objects: Sequence[Any], changes: Mapping[str, tuple[Any, Any]]) -> None:
    """Apply changed `OPTIMIZER_KEYS` ((old, new) per name) to tracked optimizers' parameter groups and
    to tracked LR schedulers' base rates."""
    keys = {k: v for k, v in changes.items() if k in OPTIMIZER_KEYS and isinstance(v[1], int | float)}
    if not keys:
        return
    for obj in objects:
        if isinstance(obj, torch.optim.Optimizer):
            for group in obj.param_groups:
                for key, (old, new) in keys.items():
                    if key in group:
                        group[key] = _follow(group[key], old, new)
                if "lr" in keys and "initial_lr" in group:  # where a scheduler starts from
                    group["initial_lr"] = _follow(group["initial_lr"], *keys["lr"])
        elif "lr" in keys and isinstance(getattr(obj, "base_lrs", None), list):  # an LR scheduler
            obj.base_lrs = [_follow(b, *keys["lr"]) for b in obj.base_lrs]


class Trial:
    """The in-process view of one trial. Constructed by the runtime (or `standalone()`)."""

    def __init__(
        self,
        trial_id: int,
        config: dict[str, Any],
        max_steps: int,
        devices: list[Device],
        *,
        conn: Connection | None = None,
        checkpoint_path: str | None = None,
        resume: bool = False,
        checkpoint_every_quanta: int = 10,
        checkpoint_every_s: float = 60.0,
        profile_every_s: float = 1.0,
        until: int | None = None,
        metric: str | None = None,
        attempt: int = 0,
        mutable: Sequence[str] = (),
        metrics: Sequence[str] = (),
        claim_attempt: Callable[[], int] | None = None,
    ):
        self.id = trial_id
        self.config = config
        # The parameters that may change at a boundary (dotted names: `optimizer.lr`), and who is told.
        self.mutable = tuple(mutable)
        self._config_hooks: list[ConfigHook] = []
        self.max_steps = max_steps
        self.metric = metric
        # Every name the search reads (objectives, then constrained values); one search's metric alone by
        # default. Duplicates dropped, order kept: a constraint on an objective names it once.
        named = tuple(metrics) or ((metric,) if metric is not None else ())
        self.metrics: tuple[str, ...] = tuple(dict.fromkeys(named))
        # Which process of the trial this is (the runtime claims it: 0 for the first, one more for each
        # later one). Every report carries it, in the spool too, so that a report sent again lands on the
        # row it was stored in and a step a later process runs again is told apart.
        self._attempt = attempt
        # A new attempt, claimed when this process adopts another trial's state (as its next process would).
        self._claim_attempt = claim_attempt
        # An adopted state that is not this trial's checkpoint yet (`_adopt`): no checkpoint is written
        # until it runs again (the controller makes the staged file its checkpoint, or discards the process).
        self._adopted = False
        self._own_loop = False  # inside `steps()`: the loop whose step an adoption can move
        self.elastic = False
        self.history: list[tuple[int, dict[str, float]]] = []
        self._devices = devices
        self._conn = conn
        self._checkpoint_path = checkpoint_path
        self._resume = resume
        self._ckpt_every_quanta = checkpoint_every_quanta
        self._ckpt_every_s = checkpoint_every_s
        self._profile_every_s = profile_every_s
        # Step limit of the current run (a successive-halving rung): park at the first boundary after a
        # report at or past it. `_limit_reported` says that report has been made.
        self._until = until
        self._limit_reported = False
        self._tracked: dict[str, Any] = {}
        self._step = 0  # steps done
        self._start_step = 0
        self._restored = False
        self._quanta_since_ckpt = 0
        self._last_ckpt = time.monotonic()
        # A first process has nothing of its own to replay (see the module docstring).
        self._replayed = not resume
        self._spool_fh: Any = None
        # Profiling window: steps and compute time since the last profile sample.
        self._win_steps = 0
        self._win_start = time.monotonic()
        self._win_wall = time.time()

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
    def device(self) -> torch.device:
        return torch_device(self._devices[0])

    @property
    def devices(self) -> list[torch.device]:
        return [torch_device(d) for d in self._devices]

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
            _move(obj, self.device)
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

    # ---- mechanism ---------------------------------------------------------------------------

    @property
    def _spool_path(self) -> Path | None:
        return Path(self._checkpoint_path + ".reports.jsonl") if self._checkpoint_path and self._conn else None

    def _spool(self, step: int, metrics: dict[str, float], at: float) -> None:
        """Append a report to the spool before it is sent (a kill between the two loses nothing)."""
        path = self._spool_path
        if path is None:
            return
        self._replay_spool()  # what earlier processes spooled goes out before anything of this one
        try:
            if self._spool_fh is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                # A first process truncates what another search left at this path; later ones append.
                self._spool_fh = open(path, "a" if self._resume else "w")  # noqa: SIM115 (open for the process's life)
            line = {"step": step, "metrics": metrics, "at": at, "attempt": self._attempt}
            self._spool_fh.write(json.dumps(line) + "\n")
            self._spool_fh.flush()  # in the OS's hands: survives this process being killed
        except OSError as exc:  # a full disk must not fail the trial: the report still goes out
            print(f"quanta: trial {self.id}: cannot spool a report ({exc})", file=sys.stderr)

    def _replay_spool(self) -> None:
        """Send again every report an earlier process of this trial spooled (the controller drops the
        ones it has stored), once per process, before its own first report. A line cut short by a
        kill is skipped."""
        if self._replayed:
            return
        self._replayed = True
        path = self._spool_path
        if path is None or not path.exists():
            return
        with open(path) as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                    step, metrics, at = int(rec["step"]), dict(rec["metrics"]), float(rec["at"])
                    attempt = int(rec.get("attempt", 0))  # a line spooled before attempts: the first
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue
                self._send("report", step=step, metrics=metrics, at=at, replay=True, attempt=attempt)

    def _send(self, kind: str, **payload: Any) -> None:
        if self._conn is not None:
            try:
                self._conn.send((kind, payload))
            except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
                raise ControllerGone() from None

    def _recv(self) -> tuple[str, dict[str, Any]]:
        assert self._conn is not None
        try:
            return self._conn.recv()
        except (EOFError, ConnectionResetError, OSError):
            raise ControllerGone() from None

    def finish(self) -> None:
        """Called by the runtime when the trainable returns: measure the last stretch of computing."""
        if self._conn is not None and self._win_steps:
            self._flush_profile()

    def _flush_profile(self) -> None:
        now = time.monotonic()
        if self._win_steps or now - self._win_start > 0:
            self._send(
                "profile",
                steps=self._win_steps,
                step=self._step,
                seconds=now - self._win_start,
                rss_mb=_rss_mb(),
                started_at=self._win_wall,
                at=time.time(),
                elastic=self.elastic,
            )
        self._win_steps, self._win_start, self._win_wall = 0, time.monotonic(), time.time()

    def _between_steps(self, final: bool = False) -> None:
        if self._conn is None:
            return
        now = time.monotonic()
        if final:
            self._flush_profile()
            return
        if now - self._win_start >= self._profile_every_s:
            self._flush_profile()
        if now - self._last_ckpt >= self._ckpt_every_s and self._checkpoint_path:
            self.checkpoint()
        while self._conn.poll():
            kind, msg = self._recv()
            self._handle(kind, msg)
        if self._limit_reported:  # reported at or past its step limit: park here, as if suspended
            self._park({"at_limit": True})

    def _handle(self, kind: str, msg: dict[str, Any]) -> None:
        if kind == "suspend":
            self._park(msg)
        elif kind == "stop":
            self._flush_profile()  # the last stretch of computing is measured too
            self._stop(msg)
        elif kind == "checkpoint":
            self.checkpoint()
        elif kind == "release":
            self._release()
        elif kind == "limit":  # the step limit of a run that started a new process
            self._set_limit(msg)
        elif kind == "fork":
            self._fork(msg)
        elif kind == "configure":
            self._configure(msg)
        elif kind == "adopt":  # taken at this boundary; the trial then waits parked to be run
            self._adopt(msg)
            self._park({})
        elif kind == "resume":  # resumed while running = move in place
            self._bind(msg["devices"])
            self._set_limit(msg)
            self._send("resumed", sent=msg.get("sent"), step=self._step, at=time.time())
        else:
            raise RuntimeError(f"unknown control message {kind!r}")

    def _stop(self, msg: dict[str, Any]) -> None:
        """End here (`TrialStopped`); with `checkpoint` in `msg`, write a checkpoint first (its search ended
        and may be resumed from it)."""
        if msg.get("checkpoint"):
            self.checkpoint()
        raise TrialStopped(msg.get("reason", "stopped"))

    def _set_limit(self, msg: dict[str, Any]) -> None:
        self._until = msg.get("until")
        self._limit_reported = False

    def _release(self) -> None:
        """Write the checkpoint, then end the trial: it resumes from it when it runs again."""
        self._flush_profile()
        self.checkpoint()
        raise TrialReleased("released")

    def _park(self, msg: dict[str, Any]) -> None:
        """Stop at this boundary: report the quantum's profile, move state to host memory, release
        cached device memory, then block until resumed (possibly on other devices) or stopped."""
        self._flush_profile()
        on_accel = self._devices[0].kind != "cpu"
        if on_accel:
            self._move_state(torch.device("cpu"))
            torch.cuda.empty_cache()
        self._limit_reported = False
        self._send("parked", sent=msg.get("sent"), step=self._step, at=time.time(), at_limit=bool(msg.get("at_limit")))
        self._quanta_since_ckpt += 1
        if msg.get("checkpoint") or self._quanta_since_ckpt >= self._ckpt_every_quanta:
            self.checkpoint()  # written while parked: costs no device time
        while True:
            kind, nxt = self._recv()
            if kind == "resume":
                self._adopted = False  # run again: an adopted state is its checkpoint by now
                self._bind(nxt["devices"])
                self._set_limit(nxt)
                self._win_steps, self._win_start, self._win_wall = 0, time.monotonic(), time.time()
                self._send("resumed", sent=nxt.get("sent"), step=self._step, at=time.time())
                return
            if kind == "stop":
                self._stop(nxt)
            if kind == "checkpoint":
                self.checkpoint()
            elif kind == "release":
                self._release()
            elif kind == "fork":  # parked at a boundary: its state is taken as it is
                self._fork(nxt)
            elif kind == "configure":
                self._configure(nxt)
            elif kind == "adopt":
                self._adopt(nxt)
            elif kind != "suspend":
                raise RuntimeError(f"unknown control message {kind!r}")

    def _bind(self, devices: list[Device]) -> None:
        """Continue on `devices` (after a park, or moved while running): re-pin the process and move
        the tracked state. torch's thread count is not touched: it was set once when the process
        started (or by the trainable itself) and stays the same in every quantum, also on a device
        with a different core count, so a resumed trial computes exactly like an un-parked one."""
        old = list(self._devices)
        self._devices = list(devices)
        pin_process(self._devices)
        # Moved whenever Quanta's device changes, also between two CPU devices (where the tensors stay
        # put): a move between CPU devices runs the same code as one between GPUs, so it is tested there.
        if self._devices != old or self.device.type != "cpu":
            self._move_state(self.device)

    def _move_state(self, device: torch.device) -> None:
        """Move every tracked object's state to `device` (`_move`): the one path of every park, resume
        and migration."""
        for obj in self._tracked.values():
            _move(obj, device)

    def _payload(self) -> dict[str, Any]:
        """Everything the trial's computation continues from, at this boundary: what a checkpoint holds,
        with the configuration in force (a restore under other mutable values applies the difference)."""
        return {
            "step": self._step,
            "state": {name: obj.state_dict() for name, obj in self._tracked.items()},
            "rng": ckpt.rng_state(),
            "history": self.history,
            "config": self.config,
        }

    def _fork(self, msg: dict[str, Any]) -> None:
        """Write this trial's state at this boundary to `msg["path"]` (atomically: another trial's
        checkpoint, which it starts from) and say so (`forked`, with the step, or the error). Nothing
        of this trial changes: taking its state reads it only."""
        into, path = msg.get("into"), str(msg["path"])
        try:
            if msg.get("staged"):  # an exploit's: loaded next by its target; flushed by whoever commits it
                ckpt.save_staged(self._payload(), path)
            else:
                ckpt.save_atomic(self._payload(), path)
        except OSError as exc:
            error = f"cannot write the state of trial {self.id} at step {self._step} to {path}: {exc}"
            self._send("forked", into=into, step=self._step, error=error, at=time.time())
            return
        self._send("forked", into=into, step=self._step, error=None, at=time.time())

    def _adopt(self, msg: dict[str, Any]) -> None:
        """Take the state staged at `msg["path"]` (another trial's, at its step) with `msg["values"]` for
        mutable parameters, as a restart of this trial from that file would (`_restore_payload`: the
        tracked objects, the RNG states, the step, the history; tracked optimizers brought to the new
        values), and say so (`adopted`, with the step, or the error). A state that cannot be read or does
        not fit the tracked objects is refused before anything changes; a load that fails half-way ends
        the process without a checkpoint (`TrialReleased`), so the trial starts again from its file.
        Refused too outside `steps()`: a loop Quanta does not own keeps its own step count."""
        path, values = str(msg["path"]), dict(msg.get("values") or {})
        if not self._own_loop:
            error = f"trial {self.id} cannot adopt a state in place: its training loop is not trial.steps()"
            self._send("adopted", step=self._step, error=error, at=time.time())
            return
        try:
            payload = ckpt.load(path, map_location=self.device)
            self._check_fits(payload)
        except Exception as exc:
            error = f"trial {self.id} cannot adopt the state at {path}: {type(exc).__name__}: {exc}"
            self._send("adopted", step=self._step, error=error, at=time.time())
            return
        held = copy.deepcopy(self.config)
        try:
            for name, value in values.items():
                _set(self.config, name, value)
            self._restore_payload(payload, held)
        except Exception as exc:
            error = f"trial {self.id}: adopting the state at {path} failed half-way ({type(exc).__name__}: {exc})"
            self._send("adopted", step=self._step, error=error, at=time.time())
            raise TrialReleased("ended without a checkpoint after a failed adoption") from None
        self._adopted = True
        self._limit_reported = False
        self._quanta_since_ckpt, self._last_ckpt = 0, time.monotonic()
        self._send("adopted", step=self._step, error=None, at=time.time())
        if self._claim_attempt is not None:  # after the answer: the controller commits meanwhile
            self._attempt = self._claim_attempt()

    def _check_fits(self, payload: Mapping[str, Any]) -> None:
        """ValueError when `payload`'s state does not fit the tracked objects (a module's tensors by name
        and shape, an optimizer's parameter groups by size): found before any of them is changed."""
        state = payload.get("state")
        if not isinstance(state, Mapping) or "step" not in payload or "rng" not in payload:
            raise ValueError("not a trial state")
        for name, obj in self._tracked.items():
            theirs = state.get(name)
            if theirs is None:
                continue
            if isinstance(obj, torch.nn.Module):
                mine = {k: tuple(v.shape) for k, v in obj.state_dict().items()}
                other = {k: tuple(v.shape) for k, v in theirs.items() if torch.is_tensor(v)}
                if mine != other:
                    diff = sorted(set(mine.items()) ^ set(other.items()))[:3]
                    raise ValueError(f"tracked module {name!r} differs from the state: {diff}")
            elif isinstance(obj, torch.optim.Optimizer):
                sizes = [len(g["params"]) for g in obj.param_groups]
                if sizes != [len(g["params"]) for g in theirs.get("param_groups", [])]:
                    raise ValueError(f"tracked optimizer {name!r} has other parameter groups than the state")

    def _configure(self, msg: dict[str, Any]) -> None:
        """New values of mutable parameters, taken at this boundary; says which changed (`configured`)."""
        changed = self._change_config(dict(msg.get("values") or {}))
        self._send("configured", step=self._step, values=changed, at=time.time())

    def _change_config(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Set `values` (dotted names) in `config`; tracked optimizers follow, hooks are told. Returns the
        values that changed."""
        changes = {}
        for name, new in values.items():
            old = _get(self.config, name)
            if old != new:
                _set(self.config, name, new)
                changes[name] = (old, new)
        self._apply_changes(changes)
        return {name: new for name, (_old, new) in changes.items()}

    def _apply_changes(self, changes: Mapping[str, tuple[Any, Any]]) -> None:
        if not changes:
            return
        _follow_optimizers(list(self._tracked.values()), changes)
        self._tell_hooks(changes)

    def _tell_hooks(self, changes: Mapping[str, tuple[Any, Any]]) -> None:
        if changes:
            for hook in list(self._config_hooks):
                hook({name: new for name, (_old, new) in changes.items()})

    def checkpoint(self) -> str | None:
        """Write a checkpoint now (atomically). Returns its path, or None without a checkpoint path or
        when the write failed (a full disk, an unwritable folder): the previous checkpoint is then left
        intact, the trial goes on, and the write is tried again when the next one is due (a restart
        resumes from the previous checkpoint meanwhile)."""
        if not self._checkpoint_path or self._adopted:  # an adopted state's checkpoint is the staged file
            return None
        payload = self._payload()
        try:
            path = ckpt.save_atomic(payload, self._checkpoint_path)
        except OSError as exc:
            self._last_ckpt = time.monotonic()  # retry when the next one is due, not at every step
            kept = "the previous checkpoint is kept" if Path(self._checkpoint_path).exists() else "no checkpoint yet"
            print(f"quanta: trial {self.id}: checkpoint at step {self._step} failed ({exc}); {kept}", file=sys.stderr)
            return None
        self._quanta_since_ckpt = 0
        self._last_ckpt = time.monotonic()
        self._send("checkpointed", step=self._step, path=str(path), at=time.time())
        return str(path)

    def _restore(self, path: Path) -> None:
        self._restore_payload(ckpt.load(path, map_location=self.device))

    def _restore_payload(self, payload: Mapping[str, Any], held: Mapping[str, Any] | None = None) -> None:
        """Continue from `payload` (a checkpoint's contents): the one path of a restart's restore and of an
        adoption. `held`: the configuration this process computed with until now (an adoption's), whose
        differences from the current one the hooks hear of too (objects built from the configuration
        rather than restored)."""
        for name, obj in self._tracked.items():
            if name in payload["state"]:
                obj.load_state_dict(payload["state"][name])
        ckpt.set_rng_state(payload["rng"])
        self.history = list(payload.get("history", []))
        self._start_step = self._step = int(payload["step"])
        self._restored = True
        # State taken under other values of mutable parameters (a fork's, or a change made after this
        # checkpoint): what the restored optimizers hold is brought to this process's configuration.
        taken = payload.get("config")
        changes: dict[str, tuple[Any, Any]] = {}
        if isinstance(taken, Mapping):
            changes = {n: (_get(taken, n), _get(self.config, n)) for n in self.mutable}
            changes = {n: c for n, c in changes.items() if c[0] != c[1]}
        if held is None:
            self._apply_changes(changes)
            return
        _follow_optimizers(list(self._tracked.values()), changes)  # the restored ones: from the state's values
        for n in self.mutable:
            old, new = _get(held, n), _get(self.config, n)
            if old != new:
                changes.setdefault(n, (old, new))
        self._tell_hooks(changes)
