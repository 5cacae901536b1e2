"""The layering rules of docs/architecture.md, enforced on the source tree."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"
HEAVY = {"torch", "celery", "sqlmodel", "sqlalchemy", "redis", "fastapi"}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def files(sub: str) -> list[Path]:
    return sorted((APP / sub).rglob("*.py"))


@pytest.mark.parametrize("layer", ["executor/policy", "search"])
def test_pure_layers_import_nothing_heavy(layer):
    for f in files(layer):
        bad = {m for m in imports(f) if m.split(".")[0] in HEAVY}
        assert not bad, f"{f.relative_to(APP)} imports {bad}"


def test_runtime_does_not_reach_up():
    for f in files("executor/runtime"):
        bad = {m for m in imports(f) if m.startswith(("app.db", "app.api", "app.controller", "app.cli"))}
        assert not bad, f"{f.relative_to(APP)} imports {bad}"


def test_app_never_imports_workers():
    for f in APP.rglob("*.py"):
        bad = {m for m in imports(f) if m == "workers" or m.startswith("workers.")}
        assert not bad, f"{f.relative_to(APP)} imports {bad}"
