"""Issue 12 item 12: no secret on a command line (any user of the machine reads them in `ps` or
/proc/<pid>/cmdline), and nothing left behind in the temp directory when a runtime closes."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from quanta.devices import parse_devices
from quanta.executor.actions import Exited, Run
from quanta.executor.runtime.local import LocalRuntime
from tests.conftest_services import postgres_fixture
from tests.integration.helpers import collect_until_exit, launches
from tests.integration.live_server import cmdline, descendants

ROOT = Path(__file__).resolve().parents[2]


def rt_folders(where: Path) -> list[str]:
    return sorted(p.name for p in where.iterdir() if p.name.startswith("quanta-rt-"))


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp directory of this test's own (other tests on the machine make runtimes too)."""
    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setenv("TMPDIR", str(where))
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


def test_the_templates_authkey_is_not_on_its_command_line_and_close_leaves_no_folder(tmp_path, private_tmp):
    before = rt_folders(private_tmp)
    rt = LocalRuntime(
        parse_devices("cpu:1"),
        launches(tmp_path, {1: ("tests.trainables:linear", {"steps": 5})}),
        warm_modules=["tests.trainables"],
    )
    try:
        assert len(rt_folders(private_tmp)) == len(before) + 1  # the socket's folder, while it runs
        rt.wait_ready(120)  # the template connected: it got the key through its stdin pipe
        rt.apply(1, [Run(1, ("cpu:0",))])
        events = collect_until_exit(rt, {1})
        assert [e.status for e in events if isinstance(e, Exited)] == ["completed"]
        key = rt._template.start.authkey
        procs = [rt._template.process.pid, *descendants(rt._template.process.pid)]
        for pid in procs:
            line = Path(f"/proc/{pid}/cmdline").read_bytes()
            assert key.hex().encode() not in line and key not in line, cmdline(pid)
    finally:
        rt.close()
    assert rt_folders(private_tmp) == before


def test_closing_a_runtime_whose_template_is_still_warming_leaves_no_folder(private_tmp):
    before = rt_folders(private_tmp)
    rt = LocalRuntime(parse_devices("cpu:1"))
    rt.close()  # the template is still importing torch: it is killed
    assert rt_folders(private_tmp) == before


postgres = pytest.fixture(scope="module", name="postgres")(postgres_fixture)


def test_worker_urls_with_passwords_are_not_on_any_command_line(tmp_path, postgres):
    """`quanta worker --db postgresql://user:password@... --broker redis://:password@...` hands the URLs to
    the worker program in its environment: neither the worker nor its template shows them in `ps`.
    (The test server trusts loopback, so the password is accepted; nothing listens at the broker's
    URL: the worker is looked at while it starts, before it needs the broker.)"""
    secret_db, secret_broker = "pw-db-7f3a91", "pw-redis-c52e08"
    db_url = postgres.create_database().replace("quanta@", f"quanta:{secret_db}@", 1)
    assert secret_db in db_url
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    env.pop("QUANTA_DB_URL", None)
    env.pop("QUANTA_BROKER", None)
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "quanta.cli", "worker", "--node", "n1", "--devices", "cpu:1"),
            *("--db", db_url),
            *("--broker", f"redis://:{secret_broker}@127.0.0.1:9/0"),
            *("--checkpoints", str(tmp_path / "ckpt")),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        seen: dict[int, str] = {}
        end = time.monotonic() + 60
        # Until the exec into `python -m workers` has happened and the template has been started.
        while time.monotonic() < end and proc.poll() is None:
            seen[proc.pid] = cmdline(proc.pid)
            for pid in descendants(proc.pid):
                seen[pid] = cmdline(pid)
            if "-m workers" in seen[proc.pid] and any("runtime.template" in c for c in seen.values()):
                break
            time.sleep(0.02)
        assert "-m workers" in seen.get(proc.pid, ""), (seen, proc.poll())
        assert any("runtime.template" in c for c in seen.values()), seen
        for pid, line in seen.items():
            assert secret_db not in line and secret_broker not in line, (pid, line)
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        assert secret_db.encode() in environ  # where it went instead (readable by this user only)
    finally:
        proc.kill()
        proc.wait(10)
