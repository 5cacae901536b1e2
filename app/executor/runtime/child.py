"""The trial process: forked from the template, it connects to the runtime, runs the trainable with a
`Trial` bound to its devices, and reports how it ended.

Trial protocol (runtime <-> trial, pickled tuples over a Unix socket):
  trial -> runtime: ("hello", {"trial_id", "pid", "sent", "step"}), ("report", ...), ("profile", ...),
                    ("parked", ...), ("resumed", ...), ("checkpointed", ...),
                    ("done", {"status": completed|killed|failed, "steps", "error"})
  runtime -> trial: ("suspend", {"sent", "checkpoint"}), ("resume", {"devices", "sent"}),
                    ("checkpoint", {}), ("stop", {"reason"})
Exit codes: 0 after "done"; 3 when the runtime's connection closed (controller gone).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import time
import traceback
from multiprocessing.connection import Client
from typing import Any

from app.devices import Device, bind_process
from app.executor.runtime import trial_log
from app.executor.runtime.base import TrialLaunch
from app.sdk.trial import ControllerGone, Trial, TrialReleased, TrialStopped
from app.status import TrialStatus


def load_trainable(ref: str) -> Any:
    module, _, name = ref.partition(":")
    fn = getattr(importlib.import_module(module), name, None)
    if not callable(fn):
        raise AttributeError(f"trainable '{ref}': {module} has no callable '{name}'")
    return fn


def _redirect_output(path: str | None, fresh: bool) -> None:
    """stdout and stderr into the trial's log: appended to by a later process of the trial, emptied by its
    first (`fresh`), since a log already there is another search's (see `app.sdk.trial`'s spool)."""
    if not path:
        return
    fd = trial_log.open_log(path, fresh)  # 0600
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def run(address: str, authkey: bytes, launch: TrialLaunch, devices: list[Device], sent: float | None) -> None:
    """Body of a forked trial process. Always ends the process (os._exit)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _redirect_output(launch.log_path, fresh=not launch.resume)
    if launch.log_path:  # bounded: cut to its tail at start and while it runs
        trial_log.keep_bounded(launch.log_path)
        trial_log.watch(launch.log_path)
    try:
        conn = Client(address, family="AF_UNIX", authkey=authkey)
    except OSError:
        os._exit(3)
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
    try:
        conn.send(("done", {"status": status, "steps": trial.step, "error": error, "at": time.time()}))
        conn.close()
    except OSError:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
