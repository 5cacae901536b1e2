"""Start `quanta serve` as a real subprocess on a free port (for the SDK, restart and browser tests)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token-0123456789abcdefghijklmn"


def same_pythonpath() -> str:
    """The PYTHONPATH a server started by the tests gets: this process's, then the repository's, so that it
    runs the `quanta` the tests import (a worktree's, when one is put first) and finds `tests.*`."""
    return os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveServer:
    proc: subprocess.Popen
    url: str
    token: str
    db_url: str
    workdir: Path
    log_path: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def get(self, path: str, **kw) -> httpx.Response:
        return httpx.get(self.url + path, headers=self.headers, timeout=30, **kw)

    def post(self, path: str, **kw) -> httpx.Response:
        return httpx.post(self.url + path, headers={**self.headers, **kw.pop("headers", {})}, timeout=30, **kw)

    def wait_ready(self, timeout: float = 120) -> None:
        """Until /healthz answers and the controller loop runs (the trial template has started)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"quanta serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                r = httpx.get(self.url + "/healthz", timeout=2)
                if r.status_code == 200 and r.json()["controller"] == "running":
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"quanta serve not ready after {timeout} s:\n{self.log()}")

    def stop(self, timeout: float = 30) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def start_server(
    tmp: Path,
    *,
    db_url: str | None = None,
    devices: str = "cpu:2",
    token: str = TOKEN,
    allowlist: str = "tests.,examples.",
    name: str = "serve",
    cwd: Path = ROOT,
    verbose: bool = False,
    env: dict[str, str] | None = None,
) -> LiveServer:
    port = free_port()
    db_url = db_url or f"sqlite:///{tmp / 'quanta.db'}"
    workdir = tmp / "work"
    log_path = tmp / f"{name}-{port}.log"
    env = {
        **os.environ,
        "QUANTA_TOKEN": token,
        "QUANTA_TRAINABLE_ALLOWLIST": allowlist,
        "PYTHONUNBUFFERED": "1",
        # serve imports nothing from its working directory: the tests' trainables come through PYTHONPATH
        "PYTHONPATH": same_pythonpath(),
        **(env or {}),
    }
    cmd = [
        sys.executable,
        "-m",
        "quanta.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--db",
        db_url,
        "--devices",
        devices,
        "--workdir",
        str(workdir),
        *(["--verbose"] if verbose else []),
    ]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return LiveServer(proc, f"http://127.0.0.1:{port}", token, db_url, workdir, log_path)


# ---- processes ---------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0]


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children, their children, ...)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None:
                parents.setdefault(st[0], []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[1] not in ("Z", "X")


def parent(pid: int) -> int | None:
    st = _stat(pid)
    return st[0] if st else None
