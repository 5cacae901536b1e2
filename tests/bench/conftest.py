"""Fixtures of the benchmark tests: the data sets some benchmarks read (or a skip naming what is
missing), and a way to run a benchmark script as a user does, in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def yahpo() -> Path:
    """YAHPO Gym's data folder (LCBench's surrogate), or a skip."""
    from quanta.sim.lcbench import data_dir

    try:
        return data_dir()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def traces() -> Path:
    """The Philly and Tiresias traces folder, or a skip."""
    from quanta.sim.traces import traces_dir

    folder = traces_dir()
    if not (folder / "tiresias" / "60_job.csv").is_file():
        pytest.skip(f"no traces under {folder} (set QUANTA_TRACES)")
    return folder


def run_script(name: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """`python bench/<name>.py ARGS` from the repository root, with this tree first on the path; fails
    the test with the script's output if it exits non-zero."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{name}.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        pytest.fail(f"bench/{name}.py exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc
