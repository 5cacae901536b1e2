"""The pre-warmed template process: imports torch (and the trainables' modules) once, then forks one
child per trial on request, so a trial starts in milliseconds instead of paying seconds of imports.

Protocol with the runtime (over a `multiprocessing.connection` client to the runtime's listener):
  runtime -> template: ("fork", {"launch": TrialLaunch, "devices": [Device], "sent": monotonic})
                       ("warm", {"modules": [...]}), ("shutdown", {})
  template -> runtime: ("template", {"pid"}), ("forked", {"trial_id", "pid"}),
                       ("exited", {"trial_id", "pid", "code", "signal"}), ("warmed", {"module", "error"})
The child connects to the runtime itself and speaks the trial protocol (see `child.py`).

The template is single-threaded on purpose: forking a multi-threaded process is unsafe. It reaps its
children between messages and, when its connection to the runtime closes (the runtime died), kills
its children and exits, so no trial keeps burning a device after its controller is gone.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
from multiprocessing.connection import Client, Connection


def _warm(module: str) -> str | None:
    try:
        mod = importlib.import_module(module)
        prepare = getattr(mod, "prepare", None)
        if callable(prepare):
            prepare()  # e.g. load a data set once; forks share it copy-on-write
        return None
    except BaseException as exc:  # report, do not die: the trial itself will fail with the error
        return f"{type(exc).__name__}: {exc}"


def _reap(conn: Connection, children: dict[int, int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        trial_id = children.pop(pid, -1)
        code = os.waitstatus_to_exitcode(status)
        conn.send(
            (
                "exited",
                {
                    "trial_id": trial_id,
                    "pid": pid,
                    "code": code if code >= 0 else None,
                    "signal": -code if code < 0 else None,
                },
            )
        )


def _warm_torch() -> None:
    """Import torch and the lazily imported parts trainables hit first (building an optimizer pulls
    in torch._dynamo: about a second, 800 modules). No compute ops here: starting torch's thread
    pools before fork() would break them in the children."""
    import torch

    param = torch.zeros(1, requires_grad=True)
    for opt in (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD, torch.optim.RMSprop):
        opt([param])


def serve(address: str, authkey: bytes, warm: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the controller's to handle
    _warm_torch()  # the point of the template: pay these imports once

    import app.executor.runtime.child as child  # noqa: F401  (and the trial runtime)

    conn = Client(address, family="AF_UNIX", authkey=authkey)
    conn.send(("template", {"pid": os.getpid()}))
    for module in warm:
        conn.send(("warmed", {"module": module, "error": _warm(module)}))
    children: dict[int, int] = {}
    try:
        while True:
            _reap(conn, children)
            if not conn.poll(0.05):
                continue
            try:
                kind, msg = conn.recv()
            except (EOFError, OSError):
                break
            if kind == "fork":
                launch = msg["launch"]
                pid = os.fork()
                if pid == 0:  # child: never returns into this loop
                    conn.close()
                    child.run(address, authkey, launch, msg["devices"], msg.get("sent"))
                    os._exit(0)
                children[pid] = launch.trial_id
                conn.send(("forked", {"trial_id": launch.trial_id, "pid": pid}))
            elif kind == "warm":
                for module in msg["modules"]:
                    conn.send(("warmed", {"module": module, "error": _warm(module)}))
            elif kind == "shutdown":
                break
    except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
        pass
    finally:
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in list(children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def main() -> None:
    address, key_hex = sys.argv[1], sys.argv[2]
    warm = [m for m in sys.argv[3].split(",") if m] if len(sys.argv) > 3 else []
    serve(address, bytes.fromhex(key_hex), warm)


if __name__ == "__main__":
    main()
