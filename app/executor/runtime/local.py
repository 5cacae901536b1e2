"""`LocalRuntime`: trials as OS processes on this machine's devices.

One pre-warmed template process forks a child per trial; every child keeps a Unix-socket connection to
this runtime, which it polls between mini-batches. Suspend parks the child at its next boundary
(state moved to host memory on accelerators); resume rebinds it to the devices it is given, so moving
between devices of this node is a copy, not a restart; between CPU devices, where the state stays in
the same memory, a running trial is re-pinned at once from here without parking it (`_move_running`).
A reader thread turns the children's messages
into events (`poll`), and measures device time: a trial accrues device seconds from the moment it is
told to run until it reports parked or exits.

A population's exploit between two trials resident here is adopted in place (`adopts_in_place`): the
target's live process loads the staged state at its boundary (`Adopt`), so no process ends or starts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from quanta.devices import Device, repin_process
from quanta.executor.actions import (
    Action,
    Adopt,
    Adopted,
    Checkpointed,
    Configured,
    Event,
    Exited,
    Fork,
    Forked,
    Migrate,
    Parked,
    Profiled,
    Reconfigure,
    Release,
    Residency,
    Resumed,
    Run,
    Started,
    Stop,
    Suspend,
    reported,
)
from quanta.executor.policy.types import DeviceView
from quanta.executor.runtime.base import Launcher
from quanta.executor.runtime.template import TemplateStart, kill_group, start_template
from quanta.import_check import ImportProblem

log = logging.getLogger("quanta.runtime")

_SIGNALS = {9: "SIGKILL (killed; the OOM killer does this)", 11: "SIGSEGV (segmentation fault)", 6: "SIGABRT"}
_MEMORY_EVERY_S = 0.25  # how often the memory watchdog reads the trials' resident memory
_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20


def rss_mb(pid: int) -> float | None:
    """Resident memory of process `pid` in MB (Linux /proc), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE_MB
    except (OSError, ValueError, IndexError):
        return None


def _env_rss_cap() -> float | None:
    """QUANTA_TRIAL_MAX_RSS_MB as a positive number of MB, or None when unset or empty."""
    text = os.environ.get("QUANTA_TRIAL_MAX_RSS_MB", "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"QUANTA_TRIAL_MAX_RSS_MB: expected a number of MB, got {text!r}") from None
    if not value > 0:
        raise ValueError(f"QUANTA_TRIAL_MAX_RSS_MB: must be positive, got {text!r}")
    return value


@dataclass
class _Handle:
    trial_id: int
    devices: tuple[str, ...]
    state: str = "starting"  # starting | running | parking | parked | stopping | exited
    conn: Connection | None = None
    pid: int | None = None
    steps: int = 0
    device_seconds: float = 0.0
    run_since: float | None = None  # monotonic time it was told to compute
    parked: threading.Event = field(default_factory=threading.Event)
    suspend_sent: float = 0.0
    done: dict[str, Any] | None = None
    lost_at: float | None = None  # connection closed without "done": waiting for the exit code
    exit_info: dict[str, Any] | None = None
    elastic: bool = False
    migrating: bool = False
    # "resumed" replies still to come for moves made without a park (announced when made, see _move_running)
    moves_in_place: int = 0
    pending: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # commands before hello
    over_memory: str | None = None  # why the memory watchdog killed it
    forks: set[int] = field(default_factory=set)  # trials waiting for its state (`Fork`)
    adopting: bool = False  # an `Adopt` sent, its answer not in yet

    @property
    def running(self) -> bool:
        return self.state in ("starting", "running", "parking")


class LocalRuntime:
    """Runs trials on `devices` of this node. `launcher.launch(trial_id)` gives what a trial needs to
    start: given here, or bound later (`bind`, which the controller does) but before the first run.

    The trial template process is started here, or earlier by the caller (`template`, from
    `start_template`) so that its warm-up overlaps the caller's own start-up; the runtime adopts it."""

    adopts_in_place = True

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
        # A trial process whose resident memory passes this is killed and fails with the reason (None:
        # no cap). Default from QUANTA_TRIAL_MAX_RSS_MB. RSS counts the pages a forked trial shares with
        # the template (torch's libraries, a prepared data set), so the cap must sit above that.
        self.max_trial_rss_mb = max_trial_rss_mb if max_trial_rss_mb is not None else _env_rss_cap()
        self._memory_checked = 0.0
        self._devices = {d.id: d for d in devices}
        self._launcher = launcher
        self._park_timeout = park_timeout_s
        self._handles: dict[int, _Handle] = {}
        self._by_pid: dict[int, _Handle] = {}
        self._events: queue.Queue[Event] = queue.Queue()
        self._lock = threading.RLock()
        self._apply_lock = threading.Lock()
        self._applied: set[tuple[int, int]] = set()
        self._closing = False
        self._template_start = template or start_template(warm_modules, workdir)
        self._tmp = self._template_start.tmp
        self._listener = self._template_start.listener
        self._template = self._template_start.process
        self._template_conn: Connection | None = None
        self._template_ready = threading.Event()
        self._template_lock = threading.Lock()
        self._warm_errors: dict[str, str | None] = {}
        self._import_failures: dict[str, dict[str, Any] | None] = {}  # by module: the import's failure
        self._warm_done = threading.Condition()  # notified as each module's "warmed" arrives
        self._warmed: set[str] = set(warm_modules) | set(self._template_start.warm_modules)
        # The template imports torch and warms its modules in the background; the first fork waits for
        # it (see _send_template), so a caller can do its own start-up meanwhile. Modules a pre-started
        # template was not told about are warmed as soon as it connects.
        self._warm_on_connect = [m for m in warm_modules if m not in self._template_start.warm_modules]
        self._conns: list[Connection] = []
        self._wake_r, self._wake_w = os.pipe()
        self._accept_thread = threading.Thread(target=self._accept_loop, name="quanta-accept", daemon=True)
        self._reader_thread = threading.Thread(target=self._reader_loop, name="quanta-reader", daemon=True)
        self._accept_thread.start()
        self._reader_thread.start()

    # ---- Runtime protocol ----------------------------------------------------------------------

    def devices(self) -> list[DeviceView]:
        return [DeviceView(d.id, self.node, d.placement_kind, d.memory_mb) for d in self._devices.values()]

    def bind(self, launcher: Launcher) -> None:
        self._launcher = launcher

    def now(self) -> float:
        return time.time()

    def warm(self, modules: Sequence[str]) -> None:
        """Import these modules (and call their `prepare()`) in the template before forking trials."""
        new = [m for m in modules if m not in self._warmed]
        if new:
            self._warmed.update(new)
            self._send_template("warm", {"modules": new})

    def import_problem(self, module: str, timeout: float = 120.0) -> ImportProblem | None:
        """Wait until the template has imported `module` (warming it, as it does before any trial starts)
        and return why that import failed, or None: it imported (a `prepare()` that failed is only
        logged), or no answer came within `timeout` or the template is gone (the trials then report
        what happened). A module the template was not told about is warmed now."""
        deadline = time.monotonic() + timeout
        try:
            self.warm([module])
            self.wait_ready(timeout)
        except RuntimeError as exc:
            log.warning("cannot check that %s imports: %s", module, exc)
            return None
        with self._warm_done:
            while module not in self._import_failures:
                left = deadline - time.monotonic()
                if left <= 0 or self._closing or self._template.poll() is not None:
                    return None
                self._warm_done.wait(min(left, 0.5))
            failure = self._import_failures[module]
        return ImportProblem.of(module, failure) if failure else None

    def apply(self, round_no: int, actions: Sequence[Action]) -> None:
        with self._apply_lock:
            todo = [a for a in actions if (a.trial_id, round_no) not in self._applied]
            self._applied.update((a.trial_id, round_no) for a in todo)
            waiting: list[_Handle] = []
            for a in todo:
                h = self._live(a.trial_id)
                if isinstance(a, Stop) and h is not None:
                    self._stop(h, a.reason, a.checkpoint)
                elif isinstance(a, Release) and h is not None:
                    h.state = "stopping"
                    self._send(h, "release", {})
                elif isinstance(a, Fork):
                    self._fork(a, h)
                elif isinstance(a, Adopt):
                    self._adopt(a, h)
                elif isinstance(a, Reconfigure) and h is not None:
                    self._send(h, "configure", {"values": dict(a.values)})
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
            self._send(h, "checkpoint", {})

    def redeliver(self) -> None:
        """Events live only in this process (its queue): nothing to read again."""

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        with self._lock:
            handles = [h for h in self._handles.values() if h.state != "exited"]
        for h in handles:
            if h.conn is not None:
                with contextlib.suppress(OSError):
                    h.conn.close()
        if self._template_ready.is_set():  # it may have children: let it stop them
            with contextlib.suppress(Exception):
                self._send_template("shutdown", {})
            try:
                self._template.wait(10)
            except subprocess.TimeoutExpired:
                self._template.kill()
        else:  # still warming up, so no trial forked yet: do not wait for it
            self._template.kill()
        self._template.wait()
        with contextlib.suppress(OSError):
            self._listener.close()
        os.write(self._wake_w, b"x")
        shutil.rmtree(self._tmp, ignore_errors=True)  # the socket (closing the listener may remove it)

    # ---- actions -------------------------------------------------------------------------------

    def _live(self, trial_id: int) -> _Handle | None:
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
        h = _Handle(trial_id, devices, run_since=time.monotonic())
        if until is not None:  # handed over with the first commands once the process says hello
            h.pending.append(("limit", {"until": until}))
        with self._lock:
            self._handles[trial_id] = h
        payload = {"launch": launch, "devices": [self._devices[d] for d in devices], "sent": time.monotonic()}
        self._send_template("fork", payload)

    def _fork(self, a: Fork, h: _Handle | None) -> None:
        """Ask trial `a.trial_id` for its state at its next boundary, written to trial `a.into`'s
        checkpoint path (from the launcher); a `Forked` event answers, also when it cannot be asked (no
        live process: `gone`) or ends first (`_finish`)."""
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
        with self._lock:  # against `_finish`: either it answers for this fork, or the trial is asked
            if h.state == "exited":
                error = f"trial {a.trial_id} has no live process"
                self._events.put(Forked(a.trial_id, a.into, h.steps, time.time(), error, gone=True))
                return
            h.forks.add(a.into)
        # A suffix stages an exploit's state: written for the next moments (see `Trial._fork`).
        self._send(h, "fork", {"into": a.into, "path": path, "staged": bool(a.suffix)})

    def _adopt(self, a: Adopt, h: _Handle | None) -> None:
        """Ask trial `a.trial_id`'s process to take the state staged at its checkpoint path plus `a.suffix`
        (from the launcher); an `Adopted` event answers, also when it has no live process (`gone`) or
        ends before it answers (`_finish`)."""
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
        with self._lock:  # against `_finish`: either it answers for this adoption, or the trial is asked
            if h.state == "exited":
                self._events.put(Adopted(a.trial_id, h.steps, time.time(), gone, gone=True))
                return
            h.adopting = True
        self._send(h, "adopt", {"path": base + a.suffix, "values": dict(a.values)})

    def _suspend(self, h: _Handle, checkpoint: bool) -> None:
        h.parked.clear()
        h.state = "parking"
        h.suspend_sent = time.monotonic()
        self._send(h, "suspend", {"sent": h.suspend_sent, "checkpoint": checkpoint})

    def _resume(self, h: _Handle, devices: tuple[str, ...], until: int | None = None) -> None:
        h.migrating = devices != h.devices
        h.devices = devices
        h.state = "running"
        h.run_since = time.monotonic()
        h.parked.clear()
        msg = {"devices": [self._devices[d] for d in devices], "sent": h.run_since, "until": until}
        self._send(h, "resume", msg)

    def _move_running(self, h: _Handle, devices: tuple[str, ...], until: int | None) -> bool:
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
            self._accrue(h)  # device time so far on the old devices
            h.devices = devices
            h.run_since = time.monotonic()
            h.migrating = True
            h.moves_in_place += 1
        self._send(h, "resume", {"devices": new, "sent": sent, "until": until})
        self._events.put(Resumed(h.trial_id, devices, (time.monotonic() - sent) * 1000, True, time.time()))
        return True

    def _stop(self, h: _Handle, reason: str, checkpoint: bool = False) -> None:
        h.state = "stopping"
        self._send(h, "stop", {"reason": reason, "checkpoint": checkpoint})

    def _send(self, h: _Handle, kind: str, msg: dict[str, Any]) -> None:
        if h.conn is None:  # not connected yet: the child picks commands up once it says hello
            h.pending.append((kind, msg))
            return
        with contextlib.suppress(OSError):  # the reader sees the closed connection and reports the exit
            h.conn.send((kind, msg))

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until the template process is up (torch imported, modules warmed)."""
        deadline = time.monotonic() + timeout
        while not self._template_ready.wait(0.1):
            if self._template.poll() is not None:
                raise RuntimeError(f"trial template process exited with code {self._template.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"trial template process did not start within {timeout:.0f} s")

    def _send_template(self, kind: str, msg: dict[str, Any]) -> None:
        self.wait_ready()
        with self._template_lock:
            if self._template_conn is None:
                raise RuntimeError("trial template is not running")
            self._template_conn.send((kind, msg))

    # ---- message pump --------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._closing:
            try:
                conn = self._listener.accept()
            except (OSError, EOFError):
                if self._closing:
                    return
                continue
            except Exception:  # a bad handshake (wrong key): ignore that client
                continue
            try:
                kind, msg = conn.recv()
            except (EOFError, OSError):
                continue
            if kind == "template":
                with self._template_lock:
                    self._template_conn = conn
                    if self._warm_on_connect:  # before any fork: forks wait for _template_ready
                        conn.send(("warm", {"modules": self._warm_on_connect}))
                with self._lock:
                    self._conns.append(conn)
                self._template_ready.set()
            elif kind == "hello":
                self._on_hello(conn, msg)
            os.write(self._wake_w, b"x")

    def _on_hello(self, conn: Connection, msg: dict[str, Any]) -> None:
        now = time.monotonic()
        with self._lock:
            h = self._handles.get(msg["trial_id"])
            if h is None or h.state == "exited":
                conn.close()  # a stale child: its trial was stopped meanwhile
                return
            h.conn = conn
            h.pid = msg["pid"]
            self._by_pid[h.pid] = h
            self._conns.append(conn)
            pending, h.pending = h.pending, []
            if h.state == "starting":
                h.state = "running"
        start_ms = (now - msg["sent"]) * 1000 if msg.get("sent") else 0.0
        self._events.put(Started(h.trial_id, h.devices, start_ms, 0, time.time()))
        for kind, payload in pending:
            self._send(h, kind, payload)

    def _reader_loop(self) -> None:
        while not self._closing:
            with self._lock:
                conns = list(self._conns)
            try:
                ready = wait([*conns, self._wake_r], timeout=0.25)
            except OSError:
                ready = []
            for c in ready:
                if c == self._wake_r:
                    os.read(self._wake_r, 4096)
                    continue
                assert isinstance(c, Connection)
                self._drain(c)
            self._watch_memory()
            self._expire_lost()

    def _watch_memory(self) -> None:
        """Kill trial processes over `max_trial_rss_mb` (checked every `_MEMORY_EVERY_S`)."""
        cap = self.max_trial_rss_mb
        now = time.monotonic()
        if cap is None or now - self._memory_checked < _MEMORY_EVERY_S:
            return
        self._memory_checked = now
        with self._lock:
            live = [
                h for h in self._handles.values() if h.pid is not None and h.state != "exited" and not h.over_memory
            ]
        for h in live:
            assert h.pid is not None
            rss = rss_mb(h.pid)
            if rss is None or rss <= cap:
                continue
            h.over_memory = (
                f"trial process used {rss:.0f} MB of memory, over the limit of {cap:.0f} MB "
                f"(QUANTA_TRIAL_MAX_RSS_MB): killed"
            )
            log.warning("trial %s: %s", h.trial_id, h.over_memory)
            kill_group(h.pid)  # with what it started

    def _drain(self, conn: Connection) -> None:
        try:
            while conn.poll():
                kind, msg = conn.recv()
                if conn is self._template_conn:
                    self._on_template(kind, msg)
                else:
                    self._on_trial(conn, kind, msg)
        except (EOFError, OSError):
            with self._lock:
                if conn in self._conns:
                    self._conns.remove(conn)
            if conn is self._template_conn:
                if not self._closing:
                    log.error("trial template process exited")
                return
            self._on_lost(conn)

    def _handle_of(self, conn: Connection) -> _Handle | None:
        with self._lock:
            for h in self._handles.values():
                if h.conn is conn:
                    return h
        return None

    def _on_template(self, kind: str, msg: dict[str, Any]) -> None:
        if kind == "forked":
            with self._lock:
                h = self._handles.get(msg["trial_id"])
                if h is not None and h.pid is None:
                    h.pid = msg["pid"]
                    self._by_pid[h.pid] = h
        elif kind == "exited":
            with self._lock:
                h = self._by_pid.get(msg["pid"])
                if h is not None:
                    h.exit_info = msg
                    if h.conn is None and h.state != "exited":
                        h.lost_at = time.monotonic()  # died before it ever connected
        elif kind == "warmed":
            with self._warm_done:
                self._warm_errors[msg["module"]] = msg["error"]
                self._import_failures[msg["module"]] = msg.get("import")
                self._warm_done.notify_all()
            if msg["error"]:  # a failed import is `import_problem`'s to report (quanta run stops on it)
                level = logging.INFO if msg.get("import") else logging.WARNING
                log.log(level, "warming %s failed: %s", msg["module"], msg["error"])

    def _accrue(self, h: _Handle) -> None:
        if h.run_since is not None:
            h.device_seconds += (time.monotonic() - h.run_since) * len(h.devices)
            h.run_since = None

    def _co_running(self, h: _Handle) -> tuple[int, ...]:
        with self._lock:
            return tuple(
                sorted(
                    o.trial_id
                    for o in self._handles.values()
                    if o is not h and o.running and o.state != "exited" and set(o.devices) & set(h.devices)
                )
            )

    def _on_trial(self, conn: Connection, kind: str, msg: dict[str, Any]) -> None:
        h = self._handle_of(conn)
        if h is None:
            return
        now = time.time()
        if kind == "report":
            h.steps = max(h.steps, msg["step"])
            replay, attempt = bool(msg.get("replay")), int(msg.get("attempt", 0))
            self._events.put(reported(h.trial_id, msg["step"], msg["metrics"], msg["at"], replay, attempt))
        elif kind == "profile":
            h.steps = msg["step"]
            h.elastic = bool(msg.get("elastic"))
            self._events.put(
                Profiled(
                    h.trial_id,
                    h.devices,
                    msg["steps"],
                    msg["seconds"],
                    msg["rss_mb"],
                    msg["at"],
                    msg["started_at"],
                    self._co_running(h),
                )
            )
        elif kind == "parked":
            self._accrue(h)
            h.steps = msg["step"]
            h.state = "parked"
            park_ms = (time.monotonic() - msg["sent"]) * 1000 if msg.get("sent") else 0.0
            h.parked.set()
            self._events.put(Parked(h.trial_id, msg["step"], park_ms, now, bool(msg.get("at_limit"))))
        elif kind == "resumed":
            with self._lock:
                in_place = h.moves_in_place > 0
                if in_place:
                    h.moves_in_place -= 1
                    if h.state != "parked":
                        return  # a move without a park: announced when it was made
                    # It parked itself (at its step limit) before the move reached it, and the move's
                    # message resumed it: it computes again, on the devices of the move.
                    h.state = "running"
                    h.run_since = time.monotonic()
                    h.parked.clear()
            resume_ms = (time.monotonic() - msg["sent"]) * 1000 if msg.get("sent") else 0.0
            self._events.put(Resumed(h.trial_id, h.devices, resume_ms, h.migrating, now))
        elif kind == "checkpointed":
            self._events.put(Checkpointed(h.trial_id, msg["step"], msg["path"], msg["at"]))
        elif kind == "forked":
            h.forks.discard(msg["into"])
            self._events.put(Forked(h.trial_id, msg["into"], msg["step"], msg["at"], msg.get("error")))
        elif kind == "adopted":
            with self._lock:
                h.adopting = False
                if msg.get("error") is None:
                    h.steps = msg["step"]
            self._events.put(Adopted(h.trial_id, msg["step"], msg["at"], msg.get("error")))
        elif kind == "configured":
            self._events.put(Configured(h.trial_id, msg["step"], dict(msg["values"]), msg["at"]))
        elif kind == "done":
            h.done = msg
            h.steps = msg["steps"]

    def _on_lost(self, conn: Connection) -> None:
        h = self._handle_of(conn)
        if h is None:
            return
        self._accrue(h)
        if h.done is not None:
            self._finish(h, h.done["status"], h.done.get("error"))
        else:
            h.lost_at = time.monotonic()  # wait briefly for the template to tell how it died

    def _expire_lost(self) -> None:
        with self._lock:
            lost = [h for h in self._handles.values() if h.lost_at is not None and h.state != "exited"]
        for h in lost:
            if h.over_memory:  # not a crash to restart from: it would grow past the limit again
                self._finish(h, "failed", h.over_memory)
                continue
            if h.exit_info is None and time.monotonic() - (h.lost_at or 0) < 2.0:
                continue
            info = h.exit_info or {}
            if info.get("signal"):
                sig = info["signal"]
                error = f"trial process died: signal {sig} {_SIGNALS.get(sig, '')}".strip()
            elif info.get("code") == 3:
                error = "trial process lost its controller connection"
            elif info:
                error = f"trial process exited with code {info.get('code')} without finishing"
            else:
                error = "trial process disappeared (connection closed without a final status)"
            self._finish(h, "crashed", error)

    def _finish(self, h: _Handle, status: str, error: str | None) -> None:
        with self._lock:
            if h.state == "exited":
                return
            self._accrue(h)
            h.state = "exited"
            h.lost_at = None
            h.parked.set()  # release an apply() waiting for it to park
            waiting, h.forks = sorted(h.forks), set()
            adopting, h.adopting = h.adopting, False
        if adopting:  # asked to adopt and ended before it answered: its checkpoint file is what is left
            why = f"trial {h.trial_id} ended ({status}) before it adopted the state"
            self._events.put(Adopted(h.trial_id, h.steps, time.time(), why, gone=True))
        for into in waiting:  # asked for its state and ended before it took it: its checkpoint is what is left
            why = f"trial {h.trial_id} ended ({status}) before its state was taken"
            self._events.put(Forked(h.trial_id, into, h.steps, time.time(), why, gone=True))
        self._events.put(Exited(h.trial_id, status, h.steps, error, time.time(), h.elastic, h.device_seconds))
