"""An idle service rests: `quanta serve` (on SQLite, local devices) and `quanta controller` (on SQLite,
with a real Redis as its broker and no worker node), with no search at all, each use under 2 % of a core.

Both run as real processes side by side. Once they are up and their start-up work is over (the server's
trial template imports torch after the server reports itself running), the CPU time (user + system) of
each process and of every process below it is read before and after about 5 s of wall time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest_services import RedisServer
from tests.integration.live_server import ROOT, start_server

MEASURE_S = 5.0
MAX_CORE_SHARE = 0.02
SETTLE_WINDOW_S = 0.5
SETTLE_TIMEOUT_S = 30.0


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) used so far by `pid` and its live descendants."""
    root = psutil.Process(pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def _settle(pids: list[int]) -> None:
    """Until each process tree has used less than `MAX_CORE_SHARE` of a core over a short window: its
    start-up is over. One that never rests is measured anyway when the time is up (and fails)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        before = [_cpu_seconds(pid) for pid in pids]
        time.sleep(SETTLE_WINDOW_S)
        if all(_cpu_seconds(pid) - b < MAX_CORE_SHARE * SETTLE_WINDOW_S for pid, b in zip(pids, before, strict=True)):
            return


def _wait_for_line(proc: subprocess.Popen, log: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
        if log.exists() and text in log.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise TimeoutError(f"no {text!r} after {timeout} s:\n{log.read_text(errors='replace')}")


def _start_controller(tmp: Path, broker: str) -> tuple[subprocess.Popen, Path]:
    log = tmp / "controller.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    cmd = [
        *(sys.executable, "-m", "quanta.cli", "controller", "--broker", broker),
        *("--db", f"sqlite:///{tmp / 'controller.db'}", "--checkpoints", str(tmp / "checkpoints")),
    ]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return proc, log


def test_an_idle_server_and_an_idle_controller_each_use_under_two_percent_of_a_core(tmp_path: Path) -> None:
    try:
        redis = RedisServer().start()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    serve_dir = tmp_path / "serve"
    serve_dir.mkdir()
    server = start_server(serve_dir, devices="cpu:1")
    controller, controller_log = _start_controller(tmp_path, redis.url)
    try:
        server.wait_ready(timeout=60)
        _wait_for_line(controller, controller_log, "quanta controller:", timeout=60)
        pids = {"quanta serve": server.proc.pid, "quanta controller": controller.pid}
        _settle(list(pids.values()))
        before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
        began = time.monotonic()
        time.sleep(MEASURE_S)
        wall = time.monotonic() - began
        share = {name: (_cpu_seconds(pid) - before[name]) / wall for name, pid in pids.items()}
        assert server.proc.poll() is None and controller.poll() is None
        assert all(v < MAX_CORE_SHARE for v in share.values()), {k: f"{v:.1%} of a core" for k, v in share.items()}
    finally:
        server.stop()
        if controller.poll() is None:
            controller.terminate()
            try:
                controller.wait(15)
            except subprocess.TimeoutExpired:
                controller.kill()
                controller.wait(5)
        redis.stop()
