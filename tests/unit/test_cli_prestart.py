"""`quanta run` launches its trial template before the CLI's own imports (`app.cli.prestart`): which
command lines it reads, and that a template nobody adopts does not outlive the command."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli.prestart import run_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("argv", "spec"),
    [
        (["quanta", "run", "s.yaml"], "s.yaml"),
        (["/venv/bin/quanta", "run", "--devices", "cpu:2", "s.yaml", "--db", "sqlite:///q.db"], "s.yaml"),
        (["-m", "run", "--devices=cpu:2", "-v", "s.yaml"], "s.yaml"),  # python -m app.cli
        (["quanta", "run", "--db", "x.db"], None),  # no spec
        (["quanta", "run", "s.yaml", "--help"], None),
        (["quanta", "serve", "s.yaml"], None),
        (["pytest", "run", "s.yaml"], None),  # not the quanta command
    ],
)
def test_the_spec_of_a_run_command_line(argv, spec):
    assert run_spec(argv) == spec


def _templates_under(tmp: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-f", f"runtime.template {tmp}"], capture_output=True, text=True)
    return out.stdout.split()


def test_a_template_nobody_adopts_ends_with_the_command(tmp_path):
    """A command line the CLI refuses after the template was launched (an unknown option) exits with
    its usage error, and takes the template and its socket folder with it."""
    spec = tmp_path / "spec.yaml"
    spec.write_text((ROOT / "examples" / "mnist1d.yaml").read_text())
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "app.cli", "run", str(spec), "--no-such-option"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no-such-option" in proc.stderr
    deadline = time.monotonic() + 10
    while _templates_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _templates_under(tmp_path)
    assert not list(tmp_path.glob("quanta-rt-*"))  # the socket's folder is gone too
