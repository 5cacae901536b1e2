"""The e2e tests' server: `quanta serve` as a real subprocess on a free port with a temporary SQLite
database (`tmp_path/q.db`, which a test may also open) and two CPU devices."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "e2e-token-0123456789abcdefghijklmno"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def server(tmp_path):
    port = _free_port()
    env = dict(os.environ, QUANTA_TOKEN=TOKEN, QUANTA_TRAINABLE_ALLOWLIST="tests.,examples.", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(ROOT)  # serve imports nothing from its working directory: tests.* via PYTHONPATH
    log_path = tmp_path / "serve.log"
    log = log_path.open("w")  # noqa: SIM115 (closed in the finally below)
    cmd = [
        sys.executable, "-m", "app.cli", "serve",
        "--host", "127.0.0.1", "--port", str(port),
        "--db", f"sqlite:///{tmp_path}/q.db", "--devices", "cpu:2", "--workdir", str(tmp_path),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"quanta serve exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"quanta serve did not answer /healthz:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        log.close()
