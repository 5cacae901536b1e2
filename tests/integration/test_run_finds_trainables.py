"""`quanta run` finds trainables where users keep them: a module beside the spec file (run from another
folder), a file named by its path relative to the spec; trial processes import it too. What cannot be
found is refused before anything starts, saying where it looked and what to do, and never of a server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

# A trainable without torch: the score rises with the step, `helpers` is a module beside it (imported by
# the trial processes from the same folder).
TRAINABLE = """
from quanta.sdk import Trial
from {helpers} import score


def train(config: dict, trial: Trial) -> None:
    for step in trial.steps(trial.max_steps):
        if step % 5 == 4:
            trial.report(accuracy=score(config["lr"], step))
"""
HELPERS = "def score(lr, step):\n    return min(1.0, 0.5 + step / 40)\n"


def spec(trainable: str) -> dict:
    return {
        "name": "wine",
        "trainable": trainable,
        "space": {"lr": {"loguniform": [0.001, 0.1]}},
        "metric": {"name": "accuracy", "goal": "maximize", "target": 0.9},
        "budget": {"max_trials": 2, "max_steps": 20},
        "parallelism": 1,
    }


def quanta_run(cwd: Path, spec_path: Path, db: Path) -> tuple[int, str, dict | None]:
    """`quanta run SPEC` in `cwd`, with Quanta on PYTHONPATH (as installed) and not the spec's folder."""
    out = db.with_suffix(".json")
    proc = subprocess.run(
        [sys.executable, "-m", "quanta.cli", "run", os.path.relpath(spec_path, cwd), "--devices", "cpu:1"]
        + ["--db", f"sqlite:///{db}", "--output", str(out)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    result = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, proc.stdout + proc.stderr, result


def test_a_module_beside_the_spec_is_found_when_run_from_another_folder(tmp_path):
    project, elsewhere = tmp_path / "wine-project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "wine_mlp.py").write_text(TRAINABLE.format(helpers="wine_helpers"))
    (project / "wine_helpers.py").write_text(HELPERS)
    (project / "spec.yaml").write_text(yaml.safe_dump(spec("wine_mlp:train")))

    code, output, result = quanta_run(elsewhere, project / "spec.yaml", tmp_path / "a.db")
    assert code == 0 and result is not None, output
    assert result["reached"] and all(t["error"] is None for t in result["trials"])
    assert "server" not in output


def test_a_trainable_named_by_its_path_relative_to_the_spec(tmp_path):
    project = tmp_path / "project"
    package = project / "src" / "winepkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(TRAINABLE.format(helpers=".helpers"))  # a relative import
    (package / "helpers.py").write_text(HELPERS)
    (project / "spec.yaml").write_text(yaml.safe_dump(spec("src/winepkg/train.py:train")))

    code, output, result = quanta_run(tmp_path, project / "spec.yaml", tmp_path / "b.db")
    assert code == 0 and result is not None, output
    assert result["reached"] and all(t["error"] is None for t in result["trials"])


def test_what_cannot_be_found_says_where_it_looked_and_what_to_do(tmp_path):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()

    (project / "spec.yaml").write_text(yaml.safe_dump(spec("wine_mlp:train")))
    code, output, _ = quanta_run(elsewhere, project / "spec.yaml", tmp_path / "c.db")
    assert code == 2, output
    flat = " ".join(output.split())  # the message may be wrapped
    assert "module 'wine_mlp' cannot be found" in flat
    assert str(elsewhere) in flat and str(project) in flat and "PYTHONPATH" in flat
    assert "wine_mlp.py" in flat and "server" not in flat
    assert not (tmp_path / "c.db").exists()

    (project / "spec.yaml").write_text(yaml.safe_dump(spec("src/train.py:train")))
    code, output, _ = quanta_run(elsewhere, project / "spec.yaml", tmp_path / "c.db")
    assert code == 2, output
    flat = " ".join(output.split())
    assert f"file src/train.py not found: looked for {project / 'src' / 'train.py'}" in flat
    assert "server" not in flat and not (tmp_path / "c.db").exists()


def test_a_missing_package_stops_the_run_before_any_trial_naming_it(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "needs_missing.py").write_text(
        "import quanta_no_such_package_xyz\n\n\ndef train(config, trial):\n    pass\n"
    )
    (project / "spec.yaml").write_text(yaml.safe_dump(spec("needs_missing:train")))
    code, output, result = quanta_run(project, project / "spec.yaml", tmp_path / "d.db")
    assert code == 2 and result is None, output
    flat = " ".join(output.split())
    assert "importing module 'needs_missing' failed with ModuleNotFoundError" in flat
    assert "the quanta_no_such_package_xyz package is not installed" in flat
    assert not (tmp_path / "d.db").exists()  # nothing stored, so no trial ran
    assert not list(tmp_path.rglob("trial-*.log"))


def test_the_lightning_example_without_lightning_names_the_extra(tmp_path):
    """The example that ran 100 trials to 100 ModuleNotFoundErrors without Lightning: refused at once."""
    blocker = tmp_path / "no-lightning"  # first on the path: `import lightning` fails as when not installed
    (blocker / "lightning").mkdir(parents=True)
    (blocker / "lightning" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'lightning'\", name='lightning')\n"
    )
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "quanta.cli", "run", "examples/lightning_mnist1d.yaml", "--devices", "cpu:1"]
        + ["--db", f"sqlite:///{tmp_path}/e.db", "--output", str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{blocker}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, output
    assert "No module named 'lightning'" in output
    assert "it comes with Quanta's `integrations` extra: pip install 'quanta[integrations]'" in output
    assert not out.exists() and not (tmp_path / "e.db").exists()


def test_app_sdk_run_finds_the_module_beside_its_spec_and_refuses_a_missing_package(tmp_path, monkeypatch):
    """The notebook's in-process run places trainables as `quanta run` does."""
    from quanta.sdk import run
    from quanta.spec import SpecError

    pytest.importorskip("pandas")
    monkeypatch.setattr(sys, "path", sys.path[:])  # the spec's folder goes on it: keep it to this test
    monkeypatch.chdir(tmp_path)  # the default workdir: .quanta/<the database's folder>/ here
    project = tmp_path / "project"
    project.mkdir()
    (project / "nb_wine.py").write_text(TRAINABLE.format(helpers="nb_helpers"))
    (project / "nb_helpers.py").write_text(HELPERS)
    (project / "spec.yaml").write_text(yaml.safe_dump(spec("nb_wine:train")))
    result, trials = run(project / "spec.yaml", devices="cpu:1", db=f"sqlite:///{tmp_path}/f.db", progress=False)
    assert result["reached"] and len(trials) >= 1 and all(t["error"] is None for t in result["trials"])
    assert list((tmp_path / ".quanta").glob("f-*/search-1/logs/trial-*.log"))

    (project / "nb_missing.py").write_text(
        "import quanta_no_such_package_xyz\n\n\ndef train(config, trial):\n    pass\n"
    )
    (project / "spec.yaml").write_text(yaml.safe_dump(spec("nb_missing:train")))
    with pytest.raises(SpecError, match="the quanta_no_such_package_xyz package is not installed"):
        run(project / "spec.yaml", devices="cpu:1", db=f"sqlite:///{tmp_path}/g.db", progress=False)
