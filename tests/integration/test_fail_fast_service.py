"""Against a live `quanta serve`: a metric never reported is a warning the API serves and streams as a
`search` event, then the search fails; `quanta submit --wait` exits 4 for a failed search and 0 for one
without a target; the API and `quanta status` count parked trials apart from running ones."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml
from typer.testing import CliRunner

from quanta.cli import app as cli
from quanta.sdk import Client
from tests.integration.live_server import ROOT, TOKEN, start_server

TYPO = {
    "name": "typo",
    "trainable": "tests.trainables:chatty",  # reports `accuracy`
    "space": {"x": {"uniform": [0, 1]}},
    "metric": {"name": "acc", "target": 0.9},
    "budget": {"max_trials": 20, "max_steps": 40},
    "parallelism": 2,
}
BOOM = {**TYPO, "name": "boom", "trainable": "tests.trainables:boom", "metric": {"name": "accuracy", "target": 0.9}}
NO_TARGET = {**TYPO, "name": "no-target", "metric": {"name": "accuracy"}, "budget": {"max_trials": 2, "max_steps": 10}}
# Successive halving on two devices: trials run to a rung at 10 steps and wait there (parked) while new
# ones run, most of them until the search ends.
PARKING = {
    "name": "parking",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"loguniform": [0.003, 0.1]}},
    "metric": {"name": "accuracy", "target": 2.0},
    "budget": {"max_trials": 12, "max_steps": 270},
    "parallelism": 6,
    "scheduler": {"policy": "asha", "min_steps": 10, "eta": 3},
    "config": {"report_every": 5, "sleep_s": 0.02},
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("fail-fast"))
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server):
    with Client(server.url, server.token) as c:
        yield c


def _quanta(server, *args: str):
    return CliRunner().invoke(cli, [*args, "--url", server.url], env={"QUANTA_TOKEN": server.token})


def test_a_metric_never_reported_is_a_warning_event_then_the_search_fails(client, server):
    search = client.submit(TYPO)
    warning = None
    for event in client.events(search_id=search.id, max_seconds=90):
        if event.event == "search" and event.data.get("warning"):
            warning = event.data["warning"]
            break
    assert warning is not None and warning.startswith("metric 'acc' has not been reported: trials report 'accuracy'")
    search.wait(timeout=90, poll_s=0.3)
    assert search.status == "failed"
    assert search.data["error"].startswith("metric 'acc' was never reported")
    assert search.data["warning"] == warning
    assert search.data["progress"]["trials_created"] < 20  # it stopped early
    res = _quanta(server, "status", str(search.id))
    assert res.exit_code == 0, res.output
    assert f"warning: {warning}" in res.stdout and "error: metric 'acc' was never reported" in res.stdout


def _submit_wait(server, spec: dict, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    cmd = [sys.executable, "-m", "quanta.cli", "submit", str(path), "--wait", "--url", server.url]
    env = {**os.environ, "QUANTA_TOKEN": TOKEN}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)


def test_submit_wait_exits_4_for_a_failed_search_and_0_without_a_target(server, tmp_path):
    r = _submit_wait(server, BOOM, tmp_path)
    assert r.returncode == 4, r.stdout + r.stderr
    summary = json.loads(r.stdout[r.stdout.index("{") :])
    # 5 in a row stop it; trials that ended in the same round are counted too (6 seen)
    assert summary["status"] == "failed" and re.match(r"([5-9]|\d\d+) trials in a row failed", summary["error"])
    assert summary["trials"]["failed"] >= 5
    r = _submit_wait(server, NO_TARGET, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout[r.stdout.index("{") :])["status"] == "completed"


def test_the_api_and_quanta_status_count_parked_trials_apart(client, server):
    search = client.submit(PARKING)
    try:
        deadline = time.monotonic() + 90
        seen_api = seen_one = seen_list = False
        while not (seen_api and seen_one and seen_list):
            assert time.monotonic() < deadline, (search.refresh().data, server.log()[-3000:])
            progress = search.refresh().data["progress"]
            counts = progress.get("trials") or {}
            # Parked trials are counted apart, and progress moves while nothing has ended yet.
            if counts.get("parked") and counts["evaluated"] > progress["trials_done"]:
                assert counts["running"] <= 2  # two devices
                seen_api = True
            one = _quanta(server, "status", str(search.id))
            assert one.exit_code == 0, one.output
            trials_line = next(line for line in one.stdout.splitlines() if line.startswith("  trials: "))
            seen_one = seen_one or "parked" in trials_line
            listing = _quanta(server, "status")
            assert listing.exit_code == 0, listing.output
            seen_list = seen_list or any("parked" in line for line in listing.stdout.splitlines() if "parking" in line)
            time.sleep(0.2)
    finally:
        search.stop()
    assert search.wait(timeout=60, poll_s=0.3).status == "stopped"
    final = search.data["progress"]["trials"]
    assert final["running"] == final["parked"] == final["queued"] == 0
    assert final["stopped"] + final["completed"] + final["killed"] == search.data["progress"]["trials_created"]
