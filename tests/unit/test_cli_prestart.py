"""`quanta run` launches its trial template before the CLI's own imports (`quanta.cli.prestart`): which
command lines it reads, that `run` takes it over only when it is the template it would launch itself,
and that a template nobody takes over does not outlive the command."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quanta.cli import prestart
from quanta.executor.runtime.template import template_path

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("argv", "spec"),
    [
        (["quanta", "run", "s.yaml"], "s.yaml"),
        (["/venv/bin/quanta", "run", "--devices", "cpu:2", "s.yaml", "--db", "sqlite:///q.db"], "s.yaml"),
        (["-m", "run", "--devices=cpu:2", "-v", "s.yaml"], "s.yaml"),  # python -m quanta.cli
        (["quanta", "run", "--db", "x.db"], None),  # no spec
        (["quanta", "run", "s.yaml", "--help"], None),
        (["quanta", "serve", "s.yaml"], None),
        (["pytest", "run", "s.yaml"], None),  # not the quanta command
    ],
)
def test_the_spec_of_a_run_command_line(argv, spec):
    assert prestart.run_spec(argv) == spec


def test_run_takes_the_early_template_over_only_when_it_would_launch_the_same(tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    (project / "beside_spec.py").write_text("def train(config, trial):\n    pass\n")
    (project / "spec.yaml").write_text("name: x\ntrainable: beside_spec:train\n")
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    prestart.start_early(["quanta", "run", str(project / "spec.yaml")])
    assert sys.path == before  # the user's folders were on the template's path only
    # What `run` has on its path once the spec is placed: the trainable's folder, then the working directory.
    path = (str(project), str(tmp_path), *template_path())
    early = prestart._started
    assert early is not None and early.warm_modules == ("beside_spec",) and early.path == path
    got = prestart.claim("beside_spec", path)
    assert got is early and prestart.claim("beside_spec", path) is None  # handed over once
    got.close()
    # Another module than the one validated (or another path): stopped, and `run` launches its own.
    prestart.start_early(["quanta", "run", str(project / "spec.yaml")])
    other = prestart._started
    assert other is not None
    assert prestart.claim("another_module", path) is None
    assert other.process.poll() is not None and not os.path.exists(other.tmp)


def test_a_spec_whose_trainable_cannot_be_placed_launches_nothing_early(tmp_path, monkeypatch):
    (tmp_path / "spec.yaml").write_text("name: x\ntrainable: src/missing.py:train\n")
    monkeypatch.chdir(tmp_path)
    prestart.start_early(["quanta", "run", str(tmp_path / "spec.yaml")])
    assert prestart._started is None


def _templates_under(tmp: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-f", f"runtime.template {tmp}"], capture_output=True, text=True)
    return out.stdout.split()


def test_a_template_nobody_takes_over_ends_with_the_command(tmp_path):
    """A command line the CLI refuses after the template was launched (an unknown option) exits with
    its usage error, and takes the template and its socket folder with it."""
    spec = tmp_path / "spec.yaml"
    spec.write_text((ROOT / "examples" / "mnist1d.yaml").read_text())
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "quanta.cli", "run", str(spec), "--no-such-option"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no-such-option" in proc.stderr
    deadline = time.monotonic() + 10
    while _templates_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _templates_under(tmp_path)
    assert not list(tmp_path.glob("quanta-rt-*"))  # the socket's folder is gone too
