"""bench/lcbench_rerun.py: a published Quanta run on LCBench re-runs to the same decisions."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.bench.test_layout import ROOT


def test_a_published_default_run_re_runs_to_the_same_seconds(yahpo: Path):
    # The surrogate's folder as the fixture found it (a skip without it), handed to the script's process.
    proc = subprocess.run(
        [sys.executable, "bench/lcbench_rerun.py", "--tasks", "167149", "--seeds", "1"],
        cwd=ROOT,
        env={**os.environ, "QUANTA_YAHPO_DATA": str(yahpo)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 same, 0 different" in proc.stdout
