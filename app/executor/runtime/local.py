"""`LocalRuntime`: trials as OS processes on this machine's devices.

One pre-warmed template process forks a child per trial (`TemplateLink`, `template.py`); every child
keeps a Unix-socket connection to this runtime, which it polls between mini-batches. Suspend parks the
child at its next boundary (state moved to host memory on accelerators); resume rebinds it to the
devices it is given, so moving between devices of this node is a copy, not a restart; between CPU
devices, where the state stays in the same memory, a running trial is re-pinned at once from here
without parking it (`_move_running`). A reader thread (`MessageReader`) turns the children's messages
into events (`poll`), and measures device time: a trial accrues device seconds from the moment it is
told to run until it reports parked or exits. It also enforces the memory cap (`MemoryWatchdog`).

This module holds the runtime's protocol and the actions: what is sent to which process, in what
order. Each trial's record is its `TrialHandle`.

A population's exploit between two trials resident here is adopted in place (`adopts_in_place`): the
target's live process loads the staged state at its boundary (`Adopt`), so no process ends or starts.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Sequence

from quanta.devices import Device, repin_process
from quanta.executor.actions import (
    Action,
    Adopt,
    Adopted,
    Event,
    Fork,
    Forked,
    Migrate,
    Reconfigure,
    Release,
    Residency,
    Resumed,
    Run,
    Stop,
    Suspend,
)
from quanta.executor.policy.types import DeviceView
from quanta.executor.runtime.base import Launcher
from quanta.executor.runtime.memory_cap import MemoryWatchdog, env_rss_cap
from quanta.executor.runtime.message_reader import MessageReader
from quanta.executor.runtime.template import TemplateStart, start_template
from quanta.executor.runtime.template_link import TemplateLink
from quanta.executor.runtime.trial_handle import TrialHandle
from quanta.import_check import ImportProblem

log = logging.getLogger("quanta.runtime")


class LocalRuntime:
    """Runs trials on `devices` of this node. `launcher.launch(trial_id)` gives what a trial needs to
    start: given here, or bound later (`bind`, which the controller does) but before the first run.

    The trial template process is started here, or earlier by the caller (`template`, from
    `start_template`) so that its warm-up overlaps the caller's own start-up; the runtime adopts it."""

    adopts_in_place = True
    acks_by_polling = False

    def __init__(
        self,
        devices: Sequence[Device],
        launcher: Launcher | None = None,
        *,
        node: str = "local",
        warm_modules: Sequence[str] = (),
        park_timeout_s: float = 60.0,
        workdir: str | None = None,
        template: TemplateStart | None = None,
        max_trial_rss_mb: float | None = None,
    ):
        self.node = node
        self._devices = {d.id: d for d in devices}
        self._launcher = launcher
        self._park_timeout = park_timeout_s
        self._handles: dict[int, TrialHandle] = {}
        self._events: queue.Queue[Event] = queue.Queue()
        self._lock = threading.RLock()
        self._apply_lock = threading.Lock()
        self._applied: set[tuple[int, int]] = set()
        # A trial process whose resident memory passes the cap is killed and fails with the reason (None:
        # no cap). Default from QUANTA_TRIAL_MAX_RSS_MB, read before the template starts: a bad value
        # raises with no process to clean up.
        cap = max_trial_rss_mb if max_trial_rss_mb is not None else env_rss_cap()
        self._template = TemplateLink(template or start_template(warm_modules, workdir), warm_modules)
        self._memory = MemoryWatchdog(cap, self._handles, self._lock)
        self._reader = MessageReader(self._handles, self._lock, self._events, self._template, self._memory)
        self._reader.start()

    @property
    def max_trial_rss_mb(self) -> float | None:
        """The cap on a trial process's resident memory in MB (None: no cap)."""
        return self._memory.cap

    # ---- Runtime protocol ----------------------------------------------------------------------

    def devices(self) -> list[DeviceView]:
        return [DeviceView(d.id, self.node, d.placement_kind, d.memory_mb) for d in self._devices.values()]

    def bind(self, launcher: Launcher) -> None:
        self._launcher = launcher

    def now(self) -> float:
        return time.time()

    def warm(self, modules: Sequence[str]) -> None:
        """Import these modules (and call their `prepare()`) in the template before forking trials."""
        self._template.warm(modules)

    def import_problem(self, module: str, timeout: float = 120.0) -> ImportProblem | None:
        """Wait until the template has imported `module` (warming it, as it does before any trial starts)
        and return why that import failed, or None: it imported (a `prepare()` that failed is only
        logged), or no answer came within `timeout` or the template is gone (the trials then report
        what happened). A module the template was not told about is warmed now."""
        return self._template.import_problem(module, timeout)

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until the template process is up (torch imported, modules warmed)."""
        self._template.wait_ready(timeout)

    def apply(self, round_no: int, actions: Sequence[Action]) -> None:
        with self._apply_lock:
            todo = [a for a in actions if (a.trial_id, round_no) not in self._applied]
            self._applied.update((a.trial_id, round_no) for a in todo)
            waiting: list[TrialHandle] = []
            for a in todo:
                h = self._live(a.trial_id)
                if isinstance(a, Stop) and h is not None:
                    self._stop(h, a.reason, a.checkpoint)
                elif isinstance(a, Release) and h is not None:
                    h.state = "stopping"
                    h.send("release", {})
                elif isinstance(a, Fork):
                    self._fork(a, h)
                elif isinstance(a, Adopt):
                    self._adopt(a, h)
                elif isinstance(a, Reconfigure) and h is not None:
                    h.send("configure", {"values": dict(a.values)})
                elif isinstance(a, Suspend | Migrate) and h is not None and h.running:
                    if isinstance(a, Migrate) and tuple(sorted(a.devices)) == h.devices:
                        continue
                    if isinstance(a, Migrate) and self._move_running(h, tuple(sorted(a.devices)), a.until):
                        continue
                    self._suspend(h, getattr(a, "checkpoint", False))
                    waiting.append(h)
            deadline = time.monotonic() + self._park_timeout
            for h in waiting:
                if not h.parked.wait(max(0.0, deadline - time.monotonic())) and h.state != "exited":
                    log.warning("trial %s did not park within %.0f s", h.trial_id, self._park_timeout)
            for a in todo:
                if isinstance(a, Run | Migrate):
                    h = self._live(a.trial_id)
                    devices = tuple(sorted(a.devices))
                    if h is None:
                        self._start(a.trial_id, devices, a.until)
                    elif h.state == "parked":
                        self._resume(h, devices, a.until)

    def poll(self, timeout: float) -> list[Event]:
        out: list[Event] = []
        try:
            out.append(self._events.get(timeout=max(0.0, timeout)))
        except queue.Empty:
            return out
        while True:
            try:
                out.append(self._events.get_nowait())
            except queue.Empty:
                return out

    def residency(self) -> dict[int, Residency]:
        now = time.monotonic()
        with self._lock:
            out = {}
            for h in self._handles.values():
                if h.state == "exited":
                    continue
                live = (now - h.run_since) * len(h.devices) if h.run_since is not None else 0.0
                out[h.trial_id] = Residency(
                    h.devices, h.running, h.steps, h.device_seconds + live, h.elastic, {"pid": h.pid}
                )
            return out

    def checkpoint(self, trial_id: int) -> None:
        """Ask a resident trial to write its checkpoint now (parked or at its next boundary)."""
        h = self._live(trial_id)
        if h is not None:
            h.send("checkpoint", {})

    def redeliver(self) -> None:
        """Events live only in this process (its queue): nothing to read again."""

    def close(self) -> None:
        if self._reader.closing:
            return
        self._reader.closing = True
        with self._lock:
            handles = [h for h in self._handles.values() if h.state != "exited"]
        for h in handles:
            if h.conn is not None:
                with contextlib.suppress(OSError):
                    h.conn.close()
        self._template.close()
        self._reader.wake()  # its thread sees `closing` and ends

    # ---- actions -------------------------------------------------------------------------------

    def _live(self, trial_id: int) -> TrialHandle | None:
        with self._lock:
            h = self._handles.get(trial_id)
            return h if h is not None and h.state != "exited" else None

    def _start(self, trial_id: int, devices: tuple[str, ...], until: int | None = None) -> None:
        unknown = [d for d in devices if d not in self._devices]
        if unknown:
            raise ValueError(f"trial {trial_id}: unknown devices {unknown} on node {self.node}")
        if self._launcher is None:
            raise RuntimeError(f"trial {trial_id}: no launcher bound to this runtime")
        launch = self._launcher.launch(trial_id)
        h = TrialHandle(trial_id, devices, run_since=time.monotonic())
        if until is not None:  # handed over with the first commands once the process says hello
            h.pending.append(("limit", {"until": until}))
        with self._lock:
            self._handles[trial_id] = h
        payload = {"launch": launch, "devices": [self._devices[d] for d in devices], "sent": time.monotonic()}
        self._template.send("fork", payload)

    def _fork(self, a: Fork, h: TrialHandle | None) -> None:
        """Ask trial `a.trial_id` for its state at its next boundary, written to trial `a.into`'s
        checkpoint path (from the launcher); a `Forked` event answers, also when it cannot be asked (no
        live process: `gone`) or ends first (`MessageReader._finish`)."""
        if h is None:
            error = f"trial {a.trial_id} has no live process"
            self._events.put(Forked(a.trial_id, a.into, 0, time.time(), error, gone=True))
            return
        try:
            if self._launcher is None:
                raise RuntimeError("no launcher bound to this runtime")
            base = self._launcher.launch(a.into).checkpoint_path
            if not base:
                raise RuntimeError("it has none")
            path = base + a.suffix
        except Exception as exc:
            error = f"trial {a.into}: no checkpoint path to write to ({type(exc).__name__}: {exc})"
            self._events.put(Forked(a.trial_id, a.into, h.steps, time.time(), error))
            return
        with self._lock:  # against `MessageReader._finish`: either it answers for this fork, or the trial is asked
            if h.state == "exited":
                error = f"trial {a.trial_id} has no live process"
                self._events.put(Forked(a.trial_id, a.into, h.steps, time.time(), error, gone=True))
                return
            h.forks.add(a.into)
        # A suffix stages an exploit's state: written for the next moments (see `Trial._fork`).
        h.send("fork", {"into": a.into, "path": path, "staged": bool(a.suffix)})

    def _adopt(self, a: Adopt, h: TrialHandle | None) -> None:
        """Ask trial `a.trial_id`'s process to take the state staged at its checkpoint path plus `a.suffix`
        (from the launcher); an `Adopted` event answers, also when it has no live process (`gone`) or
        ends before it answers (`MessageReader._finish`)."""
        gone = f"trial {a.trial_id} has no live process"
        if h is None:
            self._events.put(Adopted(a.trial_id, 0, time.time(), gone, gone=True))
            return
        try:
            if self._launcher is None:
                raise RuntimeError("no launcher bound to this runtime")
            base = self._launcher.launch(a.trial_id).checkpoint_path
            if not base:
                raise RuntimeError("it has none")
        except Exception as exc:
            error = f"trial {a.trial_id}: no checkpoint path to adopt from ({type(exc).__name__}: {exc})"
            self._events.put(Adopted(a.trial_id, h.steps, time.time(), error))
            return
        with self._lock:  # against `MessageReader._finish`: either it answers for this adoption, or the trial is asked
            if h.state == "exited":
                self._events.put(Adopted(a.trial_id, h.steps, time.time(), gone, gone=True))
                return
            h.adopting = True
        h.send("adopt", {"path": base + a.suffix, "values": dict(a.values), "commit": a.commit})

    def _suspend(self, h: TrialHandle, checkpoint: bool) -> None:
        h.parked.clear()
        h.state = "parking"
        h.suspend_sent = time.monotonic()
        h.send("suspend", {"sent": h.suspend_sent, "checkpoint": checkpoint})

    def _resume(self, h: TrialHandle, devices: tuple[str, ...], until: int | None = None) -> None:
        h.migrating = devices != h.devices
        h.devices = devices
        h.state = "running"
        h.run_since = time.monotonic()
        h.parked.clear()
        msg = {"devices": [self._devices[d] for d in devices], "sent": h.run_since, "until": until}
        h.send("resume", msg)

    def _move_running(self, h: TrialHandle, devices: tuple[str, ...], until: int | None) -> bool:
        """Move a running trial between CPU devices without parking it: re-pin its threads to the new
        cores now (`repin_process`), so it computes there from this moment instead of after its current
        mini-batch, which is what a park would wait for (a mini-batch of a large model takes longer
        than the rest of a move). The trial is told with an in-place "resume" that it takes at its next
        boundary (its device, step limit and tracked state follow there, as after a park); the Resumed
        event is put out here, and the trial's reply is not announced again. Returns False, having done
        nothing, when the move needs the park: a device that is not a CPU device (state must be copied
        at a boundary), a trial not yet connected or not computing, or a process that cannot be re-pinned."""
        unknown = [d for d in devices if d not in self._devices]
        if unknown:
            raise ValueError(f"trial {h.trial_id}: unknown devices {unknown} on node {self.node}")
        old = [self._devices[d] for d in h.devices if d in self._devices]
        new = [self._devices[d] for d in devices]
        if h.state != "running" or h.conn is None or h.pid is None or not old:
            return False
        if any(d.kind != "cpu" for d in (*old, *new)):
            return False
        sent = time.monotonic()
        if not repin_process(h.pid, new):
            return False
        with self._lock:  # before the message: the reply may come back at once
            h.accrue()  # device time so far on the old devices
            h.devices = devices
            h.run_since = time.monotonic()
            h.migrating = True
            h.moves_in_place += 1
        h.send("resume", {"devices": new, "sent": sent, "until": until})
        self._events.put(Resumed(h.trial_id, devices, (time.monotonic() - sent) * 1000, True, time.time()))
        return True

    def _stop(self, h: TrialHandle, reason: str, checkpoint: bool = False) -> None:
        h.state = "stopping"
        h.send("stop", {"reason": reason, "checkpoint": checkpoint})
