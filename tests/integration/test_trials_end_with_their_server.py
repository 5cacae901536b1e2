"""A trial process ends with its server, busy machine or not: kill -9 `quanta serve` while its trials are
in the middle of long mini-batches, with the machine loaded by spinning processes and the trial template
stopped (busy elsewhere, so it cannot kill them): within 2 s the trial processes and the processes they
started are gone (each trial watches its own connection and kills its process group). Once the template
runs again it exits within 2 s too (it leaves without the interpreter's slow teardown)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.live_server import alive, parent, start_server

GONE_WITHIN_S = 2.0


def _until_gone(pids: list[int], limit_s: float) -> float:
    """Seconds until none of `pids` is alive (a zombie counts as gone), or `limit_s` when some still are."""
    t0 = time.monotonic()
    while any(alive(p) for p in pids):
        if time.monotonic() - t0 > limit_s:
            return limit_s
        time.sleep(0.02)
    return time.monotonic() - t0


@pytest.mark.slow
def test_trials_and_their_children_end_within_2_s_of_a_kill_9_of_their_server(tmp_path: Path) -> None:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    spec = {
        "name": "long-batches",
        "trainable": "tests.trainables:long_batches",
        "space": {"lr": {"uniform": [0.0, 1.0]}},
        "metric": {"name": "step", "goal": "maximize"},
        "budget": {"max_trials": 2, "max_steps": 100},
        "parallelism": 2,
        "search": {"algorithm": "random"},
        "scheduler": {"policy": "fifo"},
        "config": {"batch_s": 120.0, "pid_dir": str(pid_dir)},
    }
    server = start_server(tmp_path, devices="cpu:2")
    spinners: list[subprocess.Popen] = []
    ours: list[int] = []
    try:
        server.wait_ready()
        r = server.post("/api/v1/searches", json=spec)
        assert r.status_code == 201, r.text
        deadline = time.monotonic() + 90
        while len(files := list(pid_dir.iterdir())) < 2:
            assert time.monotonic() < deadline, f"the trials did not start:\n{server.log()}"
            time.sleep(0.1)
        time.sleep(0.2)  # both files written in full
        pairs = [tuple(int(x) for x in f.read_text().split()) for f in files]
        trials, helpers = [t for t, _ in pairs], [h for _, h in pairs]
        template = parent(trials[0])
        assert template is not None and all(parent(t) == template for t in trials)
        ours = [*trials, *helpers, template]
        assert all(alive(p) for p in ours)

        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]  # busy
        os.kill(template, signal.SIGSTOP)  # the template cannot help: the trials must go by themselves
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(10)
        took = _until_gone([*trials, *helpers], 10.0)
        left = [p for p in [*trials, *helpers] if alive(p)]
        assert took <= GONE_WITHIN_S and not left, f"still running {took:.2f} s after kill -9: {left}"

        os.kill(template, signal.SIGCONT)
        took = _until_gone([template], 10.0)
        assert took <= GONE_WITHIN_S, f"the template still ran {took:.2f} s after it was let go"
    finally:
        for s in spinners:
            s.kill()
            s.wait()
        for p in ours:  # whatever is left of this test's processes, on failure
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGCONT)
                os.kill(p, signal.SIGKILL)
        server.stop()
