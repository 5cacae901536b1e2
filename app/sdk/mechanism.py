"""`TrialMechanism`: what Quanta does to a trial's process between two of its mini-batches, the trial's side
of the control protocol. At each boundary (`_between_steps`) the process measures its computing
(`profile`), writes a checkpoint when one is due, and carries out the controller's messages: park
(`suspend`, then block until `resume`), move (`resume` while running), `checkpoint`, `release`, `stop`,
`limit`, and a population's `fork` (its state written for another trial), `adopt` (another trial's state
taken in place) and `configure` (new values of mutable parameters). Each report is spooled before it is
sent, and a later process of the trial sends the spool again first. The user's side of a trial, the
trial contract, is `quanta.sdk.trial.Trial`, built on this class; the module docstring there says what a
trainable sees of all this.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from quanta.devices import Device, pin_process, torch_device
from quanta.sdk import checkpoint as ckpt
from quanta.sdk.mutable import ConfigHook, follow_optimizers, get_value, set_value
from quanta.sdk.tracked import check_fits, move, restore_into, rss_mb

__all__ = ["ControllerGone", "TrialMechanism", "TrialReleased", "TrialStopped"]


class TrialStopped(BaseException):
    """Raised inside `steps()` when Quanta stops the trial. A BaseException, so a trainable's
    `except Exception` does not swallow it."""


class TrialReleased(TrialStopped):
    """Raised inside `steps()` when Quanta releases the trial: its checkpoint is written, the process
    ends, and the trial resumes from that checkpoint when it runs again."""


class ControllerGone(BaseException):
    """The control connection closed: the controller or node agent is gone; the trial exits."""


class TrialMechanism:
    """A trial's process as the controller drives it (see the module docstring). Constructed by the
    runtime, as `quanta.sdk.trial.Trial`."""

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

    @property
    def device(self) -> torch.device:
        return torch_device(self._devices[0])

    @property
    def devices(self) -> list[torch.device]:
        return [torch_device(d) for d in self._devices]

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
                rss_mb=rss_mb(),
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
            move(obj, device)

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
        Refused too outside `steps()`: a loop Quanta does not own keeps its own step count. With
        `msg["commit"]` the staged file is then renamed over this trial's checkpoint (`committed` in the
        answer); a rename that fails ends the process without a checkpoint, as a half-way load does."""
        path, values = str(msg["path"]), dict(msg.get("values") or {})
        if not self._own_loop:
            error = f"trial {self.id} cannot adopt a state in place: its training loop is not trial.steps()"
            self._send("adopted", step=self._step, error=error, at=time.time())
            return
        try:
            payload = ckpt.load(path, mapped=True)
            check_fits(self._tracked, payload)
        except Exception as exc:
            error = f"trial {self.id} cannot adopt the state at {path}: {type(exc).__name__}: {exc}"
            self._send("adopted", step=self._step, error=error, at=time.time())
            return
        held = copy.deepcopy(self.config)
        try:
            for name, value in values.items():
                set_value(self.config, name, value)
            self._restore_payload(payload, held)
        except Exception as exc:
            error = f"trial {self.id}: adopting the state at {path} failed half-way ({type(exc).__name__}: {exc})"
            self._send("adopted", step=self._step, error=error, at=time.time())
            raise TrialReleased("ended without a checkpoint after a failed adoption") from None
        self._limit_reported = False
        self._quanta_since_ckpt, self._last_ckpt = 0, time.monotonic()
        committed = False
        if msg.get("commit") and self._checkpoint_path:
            # The staged file is on disk and stored as staged: renamed over this trial's checkpoint here, in
            # the order of this process's own checkpoint writes, so none can land over it afterwards.
            try:
                ckpt.commit_staged(path, self._checkpoint_path)
            except OSError as exc:  # the state held is not its checkpoint: ends without writing one
                error = f"trial {self.id}: cannot make the adopted state its checkpoint ({exc})"
                self._send("adopted", step=self._step, error=error, at=time.time())
                raise TrialReleased("ended without a checkpoint after a failed adoption") from None
            committed = True
        # Uncommitted, the adopted state is not its checkpoint until the controller renames it: none is
        # written of it before it runs again.
        self._adopted = not committed
        self._send("adopted", step=self._step, error=None, at=time.time(), committed=committed)
        if self._claim_attempt is not None:  # after the answer: the controller commits meanwhile
            self._attempt = self._claim_attempt()

    def _configure(self, msg: dict[str, Any]) -> None:
        """New values of mutable parameters, taken at this boundary; says which changed (`configured`)."""
        changed = self._change_config(dict(msg.get("values") or {}))
        self._send("configured", step=self._step, values=changed, at=time.time())

    def _change_config(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Set `values` (dotted names) in `config`; tracked optimizers follow, hooks are told. Returns the
        values that changed."""
        changes = {}
        for name, new in values.items():
            old = get_value(self.config, name)
            if old != new:
                set_value(self.config, name, new)
                changes[name] = (old, new)
        self._apply_changes(changes)
        return {name: new for name, (_old, new) in changes.items()}

    def _apply_changes(self, changes: Mapping[str, tuple[Any, Any]]) -> None:
        if not changes:
            return
        follow_optimizers(list(self._tracked.values()), changes)
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
        self._restore_payload(ckpt.load(path, mapped=True))

    def _restore_payload(self, payload: Mapping[str, Any], held: Mapping[str, Any] | None = None) -> None:
        """Continue from `payload` (a checkpoint's contents, read `mapped`: copied into the tracked objects,
        which then hold nothing of the file): the one path of a restart's restore and of an adoption.
        `held`: the configuration this process computed with until now (an adoption's), whose differences
        from the current one the hooks hear of too (objects built from the configuration rather than
        restored)."""
        for name, obj in self._tracked.items():
            if name in payload["state"]:
                restore_into(obj, payload["state"][name], self.device)
        ckpt.set_rng_state(payload["rng"])
        self.history = list(payload.get("history", []))
        self._start_step = self._step = int(payload["step"])
        self._restored = True
        # State taken under other values of mutable parameters (a fork's, or a change made after this
        # checkpoint): what the restored optimizers hold is brought to this process's configuration.
        taken = payload.get("config")
        changes: dict[str, tuple[Any, Any]] = {}
        if isinstance(taken, Mapping):
            changes = {n: (get_value(taken, n), get_value(self.config, n)) for n in self.mutable}
            changes = {n: c for n, c in changes.items() if c[0] != c[1]}
        if held is None:
            self._apply_changes(changes)
            return
        follow_optimizers(list(self._tracked.values()), changes)  # the restored ones: from the state's values
        for n in self.mutable:
            old, new = get_value(held, n), get_value(self.config, n)
            if old != new:
                changes.setdefault(n, (old, new))
        self._tell_hooks(changes)
