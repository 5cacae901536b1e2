"""A real `quanta serve -v` started in a directory holding a module named like an allowed trainable:
that module is never imported (trainables come from the installed packages and PYTHONPATH), the
`?token=` of event streams never reaches the access log (nor `?%74oken=`, which the server reads as
`token`), concurrent event streams are capped per token and in all (429 beyond), and a trial's log is
readable by the server's user only. A `QUANTA_TOKEN` shorter than 32 characters stops `quanta serve`
before it opens anything."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx

from quanta.api import auth
from quanta.db.store import Store
from tests.integration.live_server import ROOT, TOKEN, free_port, start_server

SHADOW = """
from pathlib import Path
Path({marker!r}).write_text("imported from the working directory")

def train(config, trial):
    raise SystemExit("the shadow trainable ran")
"""

SPEC = {
    "name": "hygiene",
    "trainable": "examples.digits:train",
    "space": {"lr": {"loguniform": [0.01, 0.1]}, "hidden": {"choice": [32]}},
    "metric": {"name": "accuracy", "goal": "maximize"},
    "budget": {"max_trials": 1, "max_steps": 60, "max_seconds": 120},
    "parallelism": 1,
    "search": {"algorithm": "random"},
}


def _wait(predicate, timeout: float, what: str):  # noqa: ANN001, ANN202
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_serve_imports_nothing_from_its_directory_keeps_tokens_out_of_logs_and_caps_streams(tmp_path: Path) -> None:
    here = tmp_path / "cwd"
    (here / "examples").mkdir(parents=True)
    marker = tmp_path / "SHADOW-IMPORTED"
    (here / "examples" / "__init__.py").write_text("")
    (here / "examples" / "digits.py").write_text(SHADOW.format(marker=str(marker)))
    caps = {"QUANTA_EVENTS_MAX_STREAMS": "3", "QUANTA_EVENTS_MAX_STREAMS_PER_TOKEN": "2", "QUANTA_EVENTS_POLL_S": "0.1"}
    server = start_server(tmp_path, cwd=here, verbose=True, allowlist="examples.", devices="cpu:1", env=caps)
    try:
        server.wait_ready()
        other = "second-token-0123456789abcdefghijk"
        auth.ensure_token(Store(server.db_url), other, "second")

        # Streams: two per token, three in all.
        with contextlib.ExitStack() as streams, httpx.Client(timeout=30) as client:

            def open_stream(token: str) -> httpx.Response:
                r = streams.enter_context(client.stream("GET", f"{server.url}/api/v1/events", params={"token": token}))
                return r

            first = open_stream(TOKEN)
            assert first.status_code == 200
            assert open_stream(TOKEN).status_code == 200
            over_token = client.get(f"{server.url}/api/v1/events", params={"token": TOKEN})
            assert over_token.status_code == 429 and "for this token" in over_token.json()["detail"]
            assert open_stream(other).status_code == 200
            over_all = client.get(f"{server.url}/api/v1/events", params={"token": other})
            assert over_all.status_code == 429 and "in all" in over_all.json()["detail"]
            first.close()  # a slot comes back once the server sees the client gone

            def reopened() -> bool:
                r = client.get(f"{server.url}/api/v1/events", params={"token": other, "max_seconds": 0.3})
                return r.status_code == 200

            _wait(reopened, 15, "a closed stream's slot to come back")
            # The name percent-encoded: the server takes it as `token` (Starlette decodes query names).
            encoded = client.get(f"{server.url}/api/v1/events?%74oken={other}&max_seconds=0.3")
            assert encoded.status_code == 200

        # The allowed trainable is the installed one, not the file in the working directory.
        r = server.post("/api/v1/searches", json=SPEC)
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        ended = ("completed", "stopped", "failed")
        row = _wait(
            lambda: (s := server.get(f"/api/v1/searches/{sid}").json())["status"] in ended and s, 120, "the end"
        )
        trials = server.get(f"/api/v1/searches/{sid}/trials").json()["items"]
        assert row["status"] == "completed", (row, trials, server.log()[-3000:])
        assert [t["steps"] for t in trials] == [60], trials
        assert not marker.exists(), "a module of the working directory was imported"
        log_file = server.workdir / f"search-{sid}" / "logs" / f"trial-{trials[0]['id']}.log"
        assert stat.S_IMODE(log_file.stat().st_mode) == 0o600  # like the database: its owner only
    finally:
        server.stop()
    log = server.log()
    assert "GET /api/v1/events?token=[redacted]" in log, log[-3000:]
    assert "GET /api/v1/events?%74oken=[redacted]" in log, log[-3000:]
    assert TOKEN not in log and other not in log, "a token reached the log"


def test_serve_refuses_a_quanta_token_shorter_than_32_characters(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    env = {**os.environ, "QUANTA_TOKEN": "short-token", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "quanta.cli", "serve", "--db", f"sqlite:///{db}", "--port", str(free_port())]
    cmd += ["--devices", "cpu:1"]
    try:  # it exits at once (under a second); one that serves instead is stopped here
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        raise AssertionError("quanta serve started with a QUANTA_TOKEN of 11 characters") from None
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "QUANTA_TOKEN has 11 characters; it must have at least 32" in r.stderr
    assert not db.exists()  # refused before the database was opened (nothing stored, nothing shown)
