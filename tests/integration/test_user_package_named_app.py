"""A user's own package named `app` (the most common name for one) runs beside Quanta: Quanta's import
package is `quanta`, so `trainable: app.model:train` is the user's module, in `quanta run` and in every
trial process, and the trainable imports `Trial` from `quanta`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

MODEL = """
from quanta import Trial

from app.scoring import score


def train(config: dict, trial: Trial) -> None:
    for step in trial.steps(trial.max_steps):
        if step % 5 == 4:
            trial.report(accuracy=score(config["lr"], step))
"""
SCORING = "def score(lr, step):\n    return min(1.0, 0.5 + step / 40)\n"


def test_a_user_package_named_app_is_the_trainable_and_quanta_is_imported_as_quanta(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "app").mkdir(parents=True)
    (project / "app" / "__init__.py").write_text("")
    (project / "app" / "model.py").write_text(MODEL)
    (project / "app" / "scoring.py").write_text(SCORING)
    spec = {
        "name": "own-app",
        "trainable": "app.model:train",
        "space": {"lr": {"loguniform": [0.001, 0.1]}},
        "metric": {"name": "accuracy", "goal": "maximize", "target": 0.9},
        "budget": {"max_trials": 2, "max_steps": 20},
        "parallelism": 1,
    }
    (project / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # Quanta as installed, nothing else
    proc = subprocess.run(
        [sys.executable, "-m", "quanta.cli", "run", "spec.yaml", "--devices", "cpu:1", "--output", "result.json"]
        + ["--db", f"sqlite:///{tmp_path}/q.db"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((project / "result.json").read_text())
    assert result["reached"] and all(t["error"] is None for t in result["trials"])
