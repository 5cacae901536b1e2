"""The pre-warmed template process: imports torch (and the trainables' modules) once, then forks one
child per trial on request, so a trial starts in milliseconds instead of paying seconds of imports.

`start_template` launches it (the runtime's side: a listener and the process). It is the first thing
`quanta run` does, so the template's warm-up (torch, the trainable's module and its `prepare()`, about
as long as the controller's own start) overlaps the controller's start instead of following it. The
template warms everything before it connects: its "template" hello means trials can be forked now.

Protocol with the runtime (over a `multiprocessing.connection` client to the runtime's listener):
  runtime -> template: ("fork", {"launch": TrialLaunch, "devices": [Device], "sent": monotonic})
                       ("warm", {"modules": [...]}), ("shutdown", {})
  template -> runtime: ("template", {"pid"}), ("forked", {"trial_id", "pid"}),
                       ("exited", {"trial_id", "pid", "code", "signal"}), ("warmed", {"module", "error", "import"})
The child connects to the runtime itself and speaks the trial protocol (see `child.py`).

A fork of the warmed template costs 10-20 ms of its one thread (page tables of some 400 MB, on a
2-core machine), paid on every trial's start. So the template keeps `SPARES` children forked ahead,
whenever no request waits: each blocks on a pipe of its own until a "fork" hands it its launch, and
the request is answered without a fork in its path (`_Spares`). A spare forked before a "warm" lacks
what that warm imported, so a warm retires them all. A spare whose pipe closes (the template retired
it, or died) exits.

The template is single-threaded on purpose: forking a multi-threaded process is unsafe. It reaps its
children between messages and, when its connection to the runtime closes (the runtime died), kills
its children and exits, so no trial keeps burning a device after its controller is gone. Each child
leads a process group of its own (`child.run`), so what a trial started (data loader workers) is
killed with it. The template leaves with `os._exit`: the interpreter's teardown with torch loaded
takes a second of CPU, which a busy machine stretched to five and more after its runtime was gone.
A trial does not rely on the template to end with the runtime: it watches its own connection
(`child.end_with_runtime`), so one mid-mini-batch goes at once even while the template is busy.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pickle
import re
import secrets
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from quanta.import_check import import_failure


@dataclass
class TemplateStart:
    """A template process and the listener it connects to, started before (and handed to) the
    `LocalRuntime` that will accept its connection. `close()` if no runtime ever adopts it."""

    listener: Listener
    address: str
    authkey: bytes
    tmp: str  # directory of the socket
    process: subprocess.Popen
    warm_modules: tuple[str, ...]
    path: tuple[str, ...] = ()  # its sys.path entries (PYTHONPATH): what it can import from

    def close(self) -> None:
        """Stop the template (it has no children yet) and remove the socket."""
        with contextlib.suppress(OSError):
            self.listener.close()  # a template blocked in its handshake sees the socket close
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def start_template(warm_modules: Sequence[str] = (), workdir: str | None = None) -> TemplateStart:
    """Launch the template process: it imports torch, imports `warm_modules` and calls their
    `prepare()`, then connects to the returned listener. Returns at once (a few ms): the warm-up runs
    in the other process. The template inherits this process's `sys.path`, absolute entries only (put
    the trainable's directory on it first), and not the directory it runs in."""
    path = template_path()
    tmp = tempfile.mkdtemp(prefix="quanta-rt-", dir=workdir)
    address = os.path.join(tmp, "ctl.sock")
    authkey = secrets.token_bytes(16)
    listener = Listener(address, family="AF_UNIX", authkey=authkey)
    # The authkey goes through a pipe, not the command line: any user on the machine can read a
    # process's arguments (`ps`), and with the key a local process could join the runtime's socket.
    process = subprocess.Popen(
        # -P: the working directory is not put on the template's sys.path (only what this process has).
        [sys.executable, "-P", "-m", "quanta.executor.runtime.template", address, ",".join(warm_modules)],
        stdin=subprocess.PIPE,
        # numpy's BLAS pool would start threads in the template before it forks: keep it serial
        # (torch sizes its own pool per device in each trial).
        env={
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            **os.environ,
            "PYTHONPATH": os.pathsep.join(path),
        },
    )
    assert process.stdin is not None
    try:
        process.stdin.write(authkey.hex().encode() + b"\n")
        process.stdin.close()
    except OSError:  # it died at once: the runtime reports the exit when it waits for it
        pass
    return TemplateStart(listener, address, authkey, tmp, process, tuple(warm_modules), path)


def template_path() -> tuple[str, ...]:
    """The `sys.path` a template launched now inherits: this process's absolute entries."""
    return tuple(p for p in sys.path if p and os.path.isabs(p))


def spec_trainable(spec_path: str | Path) -> str | None:
    """The trainable a spec file names (`trainable: module:function`, or a file path), read without
    validating the spec (so without importing what validation needs), or None if it cannot be read.
    For launching the template early (`quanta.cli.prestart`); the spec is validated properly afterwards."""
    try:
        text = Path(spec_path).read_text()
        if str(spec_path).endswith(".json"):
            ref = str(json.loads(text)["trainable"]).strip()
        else:
            # Its top-level `trainable:` line only: no YAML is parsed before the spec is validated (the spec's
            # loader refuses what a plain one would expand, such as aliases). Anything else: None.
            found = _TRAINABLE_LINE.search(text)
            ref = found.group(1) if found else ""
        return ref if ref.partition(":")[0] and ref.partition(":")[2] else None
    except Exception:  # anything wrong is load_spec's to report
        return None


_TRAINABLE_LINE = re.compile(r"""^trainable:[ \t]*["']?([^"'\s#]+)["']?[ \t]*(?:#.*)?$""", re.MULTILINE)


def _warm(module: str) -> dict[str, Any]:
    """Import `module` and call its `prepare()`: the "warmed" message's body. `error`: what failed (None:
    nothing); `import`: when the import itself failed, `import_failure`'s report (every trial would fail
    the same way, so a run stops before its first trial), else None (a `prepare()` that failed is only
    logged: the trials may do without it)."""
    try:
        mod = importlib.import_module(module)
    except BaseException as exc:  # report, do not die: the runtime decides
        return {"module": module, "error": f"{type(exc).__name__}: {exc}", "import": import_failure(exc)}
    try:
        prepare = getattr(mod, "prepare", None)
        if callable(prepare):
            prepare()  # e.g. load a data set once; forks share it copy-on-write
    except BaseException as exc:
        return {"module": module, "error": f"{type(exc).__name__}: {exc}", "import": None}
    return {"module": module, "error": None, "import": None}


def kill_group(pid: int) -> None:
    """SIGKILL trial process `pid` and its process group (what it started), if still there."""
    for kill in (os.killpg, os.kill):  # the group may not exist yet: a child not yet in its own group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)


SPARES = 2  # children forked ahead: a round often starts one trial per freed device, and a host has a few


class _Spares:
    """Children forked ahead of the requests that will use them (see the module docstring). A spare is
    (pid, the write end of its pipe); only the template holds the write ends, and every child it forks
    closes the ones it inherited, so a spare sees its pipe close when the template retires it or dies."""

    def __init__(self) -> None:
        self.ready: list[tuple[int, int]] = []
        self.failed = False  # a spare could not be forked: fork on request only, as without spares

    def wanted(self) -> bool:
        return not self.failed and len(self.ready) < SPARES

    def fork(self, conn: Connection | None, address: str, authkey: bytes) -> None:
        """Fork one spare (in the template); the spare waits for its launch and runs it, or exits."""
        try:
            read_fd, write_fd = os.pipe()
        except OSError:
            self.failed = True
            return
        try:
            pid = os.fork()
        except OSError:  # no memory or processes to spare now: a request's own fork reports that
            os.close(read_fd)
            os.close(write_fd)
            self.failed = True
            return
        if pid == 0:
            os.close(write_fd)
            self.close_inherited()
            if conn is not None:
                conn.close()
            msg = _read_launch(read_fd)
            if msg is None:
                os._exit(0)  # retired, or the template is gone
            import quanta.executor.runtime.child as child  # imported by serve() already: a lookup

            child.run(address, authkey, msg["launch"], msg["devices"], msg.get("sent"))
            os._exit(0)
        os.close(read_fd)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # as a trial forked on request (see serve)
        self.ready.append((pid, write_fd))

    def hand(self, msg: dict[str, Any]) -> int | None:
        """Give `msg` (a "fork" request's body) to a ready spare and return its pid, or None: no spare,
        or the one there had died (then it is dropped and the next is tried)."""
        while self.ready:
            pid, write_fd = self.ready.pop(0)
            data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
            try:
                os.write(write_fd, struct.pack("!I", len(data)))  # whole: a pipe takes 4 bytes at once
                view = memoryview(data)
                while view:
                    view = view[os.write(write_fd, view) :]
                return pid
            except OSError:  # it died (its read end is gone): reaped as a spare, never reported
                continue
            finally:
                os.close(write_fd)
        return None

    def retire(self) -> None:
        """Close every ready spare's pipe: each exits at once (and is reaped as a spare)."""
        for _, write_fd in self.ready:
            with contextlib.suppress(OSError):
                os.close(write_fd)
        self.ready = []

    def close_inherited(self) -> None:
        """In a child just forked: close the spares' write ends it inherited from the template."""
        for _, write_fd in self.ready:
            with contextlib.suppress(OSError):
                os.close(write_fd)
        self.ready = []


def _read_launch(read_fd: int) -> dict[str, Any] | None:
    """A spare's wait: the "fork" body the template writes to its pipe, or None once the pipe closes."""
    data = b""
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        head = pipe.read(4)
        if len(head) < 4:
            return None
        size = struct.unpack("!I", head)[0]
        while len(data) < size:
            part = pipe.read(size - len(data))
            if not part:
                return None
            data += part
    body: dict[str, Any] = pickle.loads(data)  # written by the template that forked this process
    return body


def _reap(conn: Connection, children: dict[int, int]) -> None:
    """Reap every child that ended; report those that ran a trial (spares that never ran one are not
    the runtime's)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid not in children:
            continue  # a spare retired, or one that died before it was handed a trial
        trial_id = children.pop(pid)
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

    import quanta.executor.runtime.child as child  # noqa: F401  (and the trial runtime)

    # Warm before connecting: the runtime may still be starting (it accepts later), and nothing here
    # needs it. Once connected, the first fork can follow at once.
    warmed = [_warm(module) for module in warm]
    # One spare before connecting, for the first request (whose own fork it takes the place of, so
    # the first trial starts no later); the rest once connected, when no request waits.
    spares = _Spares()
    spares.fork(None, address, authkey)
    try:
        conn = Client(address, family="AF_UNIX", authkey=authkey)
    except (OSError, EOFError):  # the runtime's process gave up or died meanwhile
        spares.retire()
        return
    conn.send(("template", {"pid": os.getpid()}))
    for report in warmed:
        conn.send(("warmed", report))
    children: dict[int, int] = {}
    try:
        while True:
            _reap(conn, children)
            if spares.wanted() and not conn.poll(0):
                spares.fork(conn, address, authkey)  # nothing waits: fork ahead of the next request
                continue
            # Reaping a trial's exit is what the short wait is for: with no trial running, wake less often.
            if not conn.poll(0.05 if children else 0.5):
                continue
            try:
                kind, msg = conn.recv()
            except (EOFError, OSError):
                break
            if kind == "fork":
                launch = msg["launch"]
                pid = spares.hand(msg)
                if pid is None:
                    pid = os.fork()
                    if pid == 0:  # child: never returns into this loop
                        spares.close_inherited()
                        conn.close()
                        child.run(address, authkey, launch, msg["devices"], msg.get("sent"))
                        os._exit(0)
                    # The child puts itself in a group of its own too; whichever runs first wins the race
                    # (as shells do), so a kill of the group right after the fork reaches it.
                    with contextlib.suppress(OSError):
                        os.setpgid(pid, pid)
                children[pid] = launch.trial_id
                conn.send(("forked", {"trial_id": launch.trial_id, "pid": pid}))
            elif kind == "warm":
                spares.retire()  # forked before these imports: the next spares will have them
                for module in msg["modules"]:
                    conn.send(("warmed", _warm(module)))
            elif kind == "shutdown":
                break
    except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
        pass
    finally:
        spares.retire()
        for pid in list(children):
            kill_group(pid)
        for pid in list(children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def main() -> None:
    """`python -m quanta.executor.runtime.template ADDRESS [MODULES]`, the authkey (hex) on the first line
    of stdin."""
    address = sys.argv[1]
    warm = [m for m in sys.argv[2].split(",") if m] if len(sys.argv) > 2 else []
    key_hex = sys.stdin.readline().strip()
    if not key_hex:
        sys.exit("quanta template: no authkey on stdin")
    serve(address, bytes.fromhex(key_hex), warm)
    # Its children are dead and reaped: skip the interpreter's teardown (see the module docstring).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
