"""What bench/ holds: maintained benchmarks whose imports form no circle, each exercised by a test here,
and one small set of canonical results named by what they measure."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
MODULES = sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__")


def bench_imports(name: str) -> set[str]:
    """The bench modules `bench/<name>.py` imports anywhere in it (functions included)."""
    tree = ast.parse((BENCH / f"{name}.py").read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bench."):
            out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("bench.")}
    return out


def test_no_bench_module_imports_itself_back_through_another():
    graph = {m: bench_imports(m) for m in MODULES}
    for start in MODULES:
        seen: set[str] = set()
        todo = [(m, start) for m in graph[start]]
        while todo:
            m, via = todo.pop()
            assert m != start, f"a circle: bench/{start}.py imports bench/{via}.py's chain, which imports it back"
            if m not in seen and m in graph:
                seen.add(m)
                todo += [(n, m) for n in graph[m]]


def test_every_bench_module_is_exercised_by_a_test_here():
    tests = "\n".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    used = set(re.findall(r"bench[./](\w+)", tests)) | {m for name in MODULES for m in bench_imports(name)}
    assert not set(MODULES) - used, f"no test here runs {sorted(set(MODULES) - used)}"


def test_results_are_small_named_by_what_they_measure_and_hold_no_run_logs():
    files = [p for p in RESULTS.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 5 * 2**20
    assert not [p.name for p in files if p.suffix == ".jsonl"], "run logs are regenerated, not committed"
    session = re.compile(r"stop\d|_before|_after|_rerun|_pilot", re.IGNORECASE)
    assert not [p.name for p in files if session.search(p.name)]
