"""A new user's path, as a test: the README's trainable and spec copied into an empty folder outside the
repository, a fresh virtual environment (no system site-packages), Quanta installed into it with one pip
command, the search run with that environment's `quanta run`, and the result JSON read.

The machine's torch wheel is reused (`torch==2.13.0` is a file on disk here, found through pip's
configured `--find-links`); everything else comes from the package index as it would for a user. The
durations of each stage are printed (`pytest -s`) and recorded as test properties."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.integration.test_readme_quickstart import ROOT, quickstart_blocks

TORCH = "torch==2.13.0"  # the CPU build on this machine's disk (see the Makefile's TORCH_PIN)


def _clone(dest: Path) -> Path:
    """The repository's files as a clone has them (git's tracked files; without git, the tree less what
    building and running leave behind), copied to `dest`: pip builds a local project in its own folder
    (setuptools' build/ and *.egg-info), which must not be this checkout."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if listed.returncode == 0 and listed.stdout:
        for name in listed.stdout.decode().split("\0"):
            if name and (ROOT / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, dest / name)
    else:
        junk = shutil.ignore_patterns(".venv", "build", "*.egg-info", ".quanta", "__pycache__", ".*_cache", "*.db")
        shutil.copytree(ROOT, dest, ignore=junk, dirs_exist_ok=True)
    return dest


def _clean_env() -> dict[str, str]:
    """This process's environment without what would let the new environment see this tree or this venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    return env


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_new_user_installs_quanta_and_runs_a_search(tmp_path, record_property):
    folder = tmp_path / "wine-project"  # outside the repository, empty
    folder.mkdir()
    for kind, name, body in quickstart_blocks((ROOT / "README.md").read_text()):
        if kind == "file":
            (folder / name).write_text(body)
    env = _clean_env()
    times: dict[str, float] = {}

    began = time.monotonic()
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)  # a venv's python makes a venv of its base
    subprocess.run([base, "-m", "venv", str(venv)], check=True, env=env, timeout=120)
    cfg = (venv / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in cfg
    times["venv_s"] = time.monotonic() - began

    source = _clone(tmp_path / "quanta")  # the user's clone of the repository
    began = time.monotonic()
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--no-compile", "--disable-pip-version-check", TORCH, str(source)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=780,
    )
    times["pip_install_s"] = time.monotonic() - began
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]

    began = time.monotonic()
    run = subprocess.run(
        [str(venv / "bin" / "quanta"), "run", "spec.yaml", "--devices", "cpu:2", "--output", "result.json"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    times["quanta_run_s"] = time.monotonic() - began
    for name, seconds in times.items():
        record_property(name, round(seconds, 1))
    print(f"\nnew user's path: {', '.join(f'{k} {v:.1f}' for k, v in times.items())}", file=sys.stderr)
    assert run.returncode == 0, run.stdout + run.stderr

    # The environment ran its own copy of Quanta, not this tree, with the machine's torch. Where `quanta`
    # resolves and which torch is installed, read without importing them: the search above has imported
    # both in this environment, and another cold import of torch costs seconds (more when Python writes no
    # bytecode, PYTHONDONTWRITEBYTECODE).
    probe = (
        "import importlib.metadata as m, importlib.util as u; "
        "print(u.find_spec('quanta').origin); print(m.version('torch'))"
    )
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert where[0].startswith(str(venv)) and where[1].startswith("2.13.0")

    spec = yaml.safe_load((folder / "spec.yaml").read_text())
    result = json.loads((folder / "result.json").read_text())
    assert result["reached"] is True and result["best_metric"] >= spec["metric"]["target"]
    assert set(result["best_params"]) == set(spec["space"])
    assert result["trials"] and all(t["error"] is None for t in result["trials"])
