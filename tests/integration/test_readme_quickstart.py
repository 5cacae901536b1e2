"""The README's quickstart, run as written: its files and commands are taken from README.md (the blocks
after `<!-- quickstart:file NAME -->` and `<!-- quickstart:run -->`) and run in an empty folder outside
the repository, with the `quanta` command of this environment and this tree's code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- quickstart:(?P<kind>[a-z]+)(?: (?P<name>\S+))? -->\n```[a-z]*\n(?P<body>.*?)```", re.DOTALL)


def quickstart_blocks(readme: str) -> list[tuple[str, str | None, str]]:
    """(kind, file name or None, body) of each marked block, in the README's order."""
    return [(m["kind"], m["name"], m["body"]) for m in BLOCK.finditer(readme)]


def test_the_readme_marks_its_quickstart():
    blocks = quickstart_blocks((ROOT / "README.md").read_text())
    kinds = [(kind, name) for kind, name, _ in blocks]
    assert kinds == [("install", None), ("file", "train.py"), ("file", "spec.yaml"), ("run", None)]
    install = blocks[0][2]
    assert "pip install" in install
    lines = sum(len(body.strip().splitlines()) for kind, _, body in blocks if kind != "install")
    assert lines <= 40  # a quickstart, not a tutorial


@pytest.mark.slow
def test_the_quickstart_runs_as_written(tmp_path):
    work = tmp_path / "my-project"
    work.mkdir()
    commands = []
    for kind, name, body in quickstart_blocks((ROOT / "README.md").read_text()):
        if kind == "file":
            (work / name).write_text(body)
        elif kind == "run":
            commands.append(body)
    assert commands
    env = {
        **os.environ,
        # `quanta` as installed beside this interpreter, running this tree's code.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
    }
    for command in commands:
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=420
        )
        # The README says the search reaches its target, so `quanta run` exits 0.
        assert proc.returncode == 0, proc.stdout + proc.stderr
    spec = yaml.safe_load((work / "spec.yaml").read_text())
    result = json.loads((work / "result.json").read_text())
    assert result["reached"] is True
    assert result["best_metric"] >= spec["metric"]["target"]
    assert set(result["best_params"]) == set(spec["space"])
    assert (work / "quanta.db").exists() and (work / ".quanta").is_dir()
    assert all(t["error"] is None for t in result["trials"]), [t["error"] for t in result["trials"]]
