"""The trial process: forked from the template, it connects to the runtime, runs the trainable with a
`Trial` bound to its devices, and reports how it ended.

Trial protocol (runtime <-> trial, pickled tuples over a Unix socket):
  trial -> runtime: ("hello", {"trial_id", "pid", "sent", "step"}), ("report", ...), ("profile", ...),
                    ("parked", ...), ("resumed", ...), ("checkpointed", ...),
                    ("forked", {"into", "step", "error"}), ("configured", {"step", "values"}),
                    ("adopted", {"step", "error", "committed"}),
                    ("done", {"status": completed|killed|failed, "steps", "error"})
  runtime -> trial: ("suspend", {"sent", "checkpoint"}), ("resume", {"devices", "sent"}),
                    ("checkpoint", {}), ("stop", {"reason", "checkpoint"}),
                    ("fork", {"into", "path", "staged"}): write the state at the next boundary (now,
                    when parked) to another trial's checkpoint path (`staged`: an exploit's staged
                    state, not flushed to disk by the trial); ("configure", {"values"}): new values of
                    mutable parameters, taken at the next boundary (now, when parked);
                    ("adopt", {"path", "values", "commit"}): take the state staged at `path` in this
                    process, at the next boundary (now, when parked), with new values, and stay parked
                    (`commit`: then rename `path` over its own checkpoint, before anything else)
Exit codes: 0 after "done"; 3 when the runtime's connection closed (controller gone) at a boundary.

A trial process ends with its runtime, busy or not: it leads a process group of its own, and a thread
(`end_with_runtime`) waits for the runtime's end of the connection to close and then kills that group
(the trial and whatever it started: data loader workers, a tool it launched) at once, in the middle of
a mini-batch too. Between mini-batches `Trial` notices the same and exits 3 (`ControllerGone`).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import os
import select
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import Client, Connection
from typing import Any

from quanta.devices import Device, bind_process
from quanta.executor.runtime import trial_log
from quanta.executor.runtime.base import TrialLaunch
from quanta.sdk.trial import ControllerGone, Trial, TrialReleased, TrialStopped
from quanta.status import TrialStatus


def load_trainable(ref: str) -> Any:
    module, _, name = ref.partition(":")
    fn = getattr(importlib.import_module(module), name, None)
    if not callable(fn):
        raise AttributeError(f"trainable '{ref}': {module} has no callable '{name}'")
    return fn


def _redirect_output(path: str | None, fresh: bool) -> None:
    """stdout and stderr into the trial's log: appended to by a later process of the trial, emptied by its
    first (`fresh`), since a log already there is another search's (see the spool in
    `quanta.sdk.mechanism`)."""
    if not path:
        return
    fd = trial_log.open_log(path, fresh)  # 0600
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


# What `poll` reports when the other end of a stream socket is gone (POLLHUP, POLLERR and POLLNVAL are
# reported whether asked for or not; POLLIN, an ordinary message, is not asked for).
_HANGUP = select.POLLRDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL


def end_with_runtime(conn: Connection, finishing: threading.Event) -> threading.Thread:
    """Start a daemon thread that kills this process's group (SIGKILL: this process and everything it
    started) as soon as the runtime's end of `conn` closes, unless `finishing` is set by then (the trial
    is saying "done", after which the runtime may close first). It only polls the socket for a hang-up,
    reading nothing, so the trial's own sends and receives are untouched; the kernel wakes it, so it
    needs no CPU until then and reacts within milliseconds however busy the machine is."""

    def watch() -> None:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLRDHUP)
        while True:
            events = poller.poll()
            if finishing.is_set():
                return
            if any(mask & _HANGUP for _, mask in events):
                # Its own group only: never the group it came from (the runtime's, when setpgid failed).
                if os.getpgrp() == os.getpid():
                    os.killpg(0, signal.SIGKILL)
                os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="quanta-runtime-watch", daemon=True)
    thread.start()
    return thread


def claim_attempt(checkpoint_path: str | None, first: bool) -> int:
    """This process's attempt: which process of the trial it is (0 for the first, then one more for each
    process started after it, whatever started it: a restart after a crash or a lost server or node, a
    release, a move to another node, a stale process replaced). Its reports carry it, so that a step it
    runs again is told apart from the same step of an earlier process (`ReportRow`).

    The count is kept beside the checkpoint (`<checkpoint>.attempt`, on the store every node reads),
    read and raised under an exclusive lock, so each process of a trial gets a number of its own and a
    later process a higher one, with no database or controller involved (the controller's count of
    retries can lag the processes a node starts). A trial's first process (`first`: not resuming) owns
    nothing at its paths yet and starts the count at 0 (as it starts its spool afresh). When the file
    cannot be written (no checkpoint path, an unwritable folder), the time in milliseconds stands in:
    above any count, and rising."""
    fallback = int(time.time() * 1000)
    if not checkpoint_path:
        return fallback
    path = checkpoint_path + ".attempt"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return fallback
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = b"" if first else os.pread(fd, 32, 0)
        try:
            attempt = int(text.decode().strip()) + 1 if text.strip() else 0
        except ValueError:  # a torn or foreign file: the time keeps later processes above it
            attempt = fallback
        data = str(attempt).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
        return attempt
    except OSError:
        return fallback
    finally:
        os.close(fd)  # releases the lock


def run(address: str, authkey: bytes, launch: TrialLaunch, devices: list[Device], sent: float | None) -> None:
    """Body of a forked trial process. Always ends the process (os._exit)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError):  # a group of its own, led by it (the template does the same)
        os.setpgid(0, 0)
    _redirect_output(launch.log_path, fresh=not launch.resume)
    if launch.log_path:  # bounded: cut to its tail at start and while it runs
        trial_log.keep_bounded(launch.log_path)
        trial_log.watch(launch.log_path)
    try:
        conn = Client(address, family="AF_UNIX", authkey=authkey)
    except OSError:
        os._exit(3)
    finishing = threading.Event()
    end_with_runtime(conn, finishing)
    trial = Trial(
        launch.trial_id,
        {**launch.config},
        launch.max_steps,
        devices,
        conn=conn,
        checkpoint_path=launch.checkpoint_path,
        resume=launch.resume,
        checkpoint_every_quanta=launch.checkpoint_every_quanta,
        checkpoint_every_s=launch.checkpoint_every_s,
        metric=launch.metric,
        metrics=launch.metrics,
        attempt=claim_attempt(launch.checkpoint_path, first=not launch.resume),
        mutable=launch.mutable,
        # An adopted state is computed on as a later process of the trial would: under an attempt of its own.
        claim_attempt=lambda: claim_attempt(launch.checkpoint_path, first=False),
    )
    status: str = TrialStatus.COMPLETED
    error: str | None = None
    try:
        # The only place torch's thread count is set: one per core of the first devices, unless the
        # trainable sets its own. Resumes and migrations re-pin cores only (Trial._bind).
        bind_process(devices)
        conn.send(("hello", {"trial_id": launch.trial_id, "pid": os.getpid(), "sent": sent, "at": time.time()}))
        fn = load_trainable(launch.trainable)
        fn(trial.config, trial)
        trial.finish()
    except TrialReleased:
        status = "released"  # checkpointed on request: the controller queues it to resume later
    except TrialStopped:
        status = TrialStatus.KILLED
    except ControllerGone:
        os._exit(3)
    except BaseException as exc:  # the trainable's own failure: report it with its traceback
        status = TrialStatus.FAILED
        error = "".join(traceback.format_exception(exc)).strip()[-8000:]
        with contextlib.suppress(Exception):
            print(error, file=sys.stderr, flush=True)
    finishing.set()
    try:
        conn.send(("done", {"status": status, "steps": trial.step, "error": error, "at": time.time()}))
        conn.close()
    except OSError:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
