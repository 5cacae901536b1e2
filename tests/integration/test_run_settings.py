"""`quanta run` reads the environment the other commands read (flags win), keeps each database's files
in a workdir of its own, warns when CPU devices outnumber the cores, and `quanta --version` answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import yaml
from typer.testing import CliRunner

from quanta.cli import app as cli
from quanta.workdir import MARKER

ROOT = Path(__file__).resolve().parents[2]
CORES = len(os.sched_getaffinity(0))

TINY = {
    "name": "tiny",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"loguniform": [0.003, 0.1]}},
    "metric": {"name": "accuracy", "goal": "maximize", "target": 0.0},  # reached at the first report
    "budget": {"max_trials": 1, "max_steps": 20},
    "parallelism": 1,
    "config": {"report_every": 5},
}


def quanta_run(folder: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, dict | None]:
    """`quanta run spec.yaml ARGS` started in `folder` (the tests' trainables through PYTHONPATH);
    (exit code, stdout and stderr, the result JSON or None)."""
    spec = folder / "spec.yaml"
    spec.write_text(yaml.safe_dump(TINY))
    out = folder / "result.json"
    out.unlink(missing_ok=True)
    base = {k: v for k, v in os.environ.items() if k not in ("QUANTA_DB_URL", "QUANTA_DEVICES", "QUANTA_WORKDIR")}
    proc = subprocess.run(
        [sys.executable, "-m", "quanta.cli", "run", str(spec), "--output", str(out), *args],
        cwd=folder,
        env={**base, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    result = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, proc.stdout + proc.stderr, result


def trial_logs(workdir: Path) -> list[Path]:
    return sorted(workdir.glob("search-*/logs/trial-*.log"))


def test_run_reads_the_environment_flags_win_and_each_database_has_its_own_workdir(tmp_path):
    a, b = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"
    env = {"QUANTA_DB_URL": a, "QUANTA_DEVICES": f"cpu:{CORES + 1}"}

    code, output, result = quanta_run(tmp_path, env=env)
    assert code == 0 and result is not None, output
    assert result["db"] == a and len(result["devices"]) == CORES + 1  # from the environment
    assert f"warning: {CORES + 1} CPU devices on {CORES} core" in output  # more devices than cores
    assert (tmp_path / "a.db").exists()

    code, output, result = quanta_run(tmp_path, "--db", b, "--devices", "cpu:1", env=env)
    assert code == 0 and result is not None, output
    assert result["db"] == b and result["devices"] == ["cpu:0"]  # the flags win
    assert "warning" not in output

    # Both searches are search 1 of their database; without --workdir each database has a folder of
    # its own under .quanta/, named for it, so neither overwrote the other's logs.
    folders = sorted(p for p in (tmp_path / ".quanta").iterdir() if p.is_dir())
    assert [p.name.rsplit("-", 1)[0] for p in folders] == ["a", "b"], folders
    for folder, db in zip(folders, ("a.db", "b.db"), strict=True):
        assert [p.relative_to(folder).as_posix() for p in trial_logs(folder)] == ["search-1/logs/trial-1.log"]
        assert (folder / MARKER).read_text().startswith(f"sqlite:///{tmp_path.resolve()}/{db}")
    assert f".quanta/{folders[1].name}" in output  # the summary says where they are


def test_a_workdir_named_explicitly_belongs_to_one_database(tmp_path):
    a, b = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"
    shared = tmp_path / "shared"
    code, output, _ = quanta_run(tmp_path, "--db", a, "--workdir", str(shared), "--devices", "cpu:1")
    assert code == 0, output
    logs = trial_logs(shared)
    assert len(logs) == 1
    before = logs[0].read_bytes()

    # Another database on the same workdir would write its search 1 over a.db's: refused, naming both,
    # before anything is stored.
    code, output, result = quanta_run(tmp_path, "--db", b, "--devices", "cpu:1", env={"QUANTA_WORKDIR": str(shared)})
    assert code == 2 and result is None, output
    assert "holds the checkpoints and trial logs of another database" in output
    assert f"{tmp_path.resolve()}/a.db" in output and f"{tmp_path.resolve()}/b.db" in output
    assert not (tmp_path / "b.db").exists()
    assert trial_logs(shared) == logs and logs[0].read_bytes() == before

    # `quanta serve` claims its workdir too.
    serve = subprocess.run(
        [sys.executable, "-m", "quanta.cli", "serve", "--db", b, "--workdir", str(shared), "--port", "1"],
        cwd=tmp_path,
        env={**os.environ, "QUANTA_TOKEN": "t" * 32},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert serve.returncode == 2 and "another database" in serve.stderr, serve.stdout + serve.stderr
    assert not (tmp_path / "b.db").exists()


def test_version():
    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == f"quanta {version('quanta')}"
