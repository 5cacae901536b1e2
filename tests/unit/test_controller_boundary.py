"""Nothing outside the controller package touches a Controller's private state: every use the service,
the CLI, the simulator and the benchmarks make of it goes through its public API.

The check is syntactic: in each module of app/ (but app/controller/), bench/ and workers/, names bound
to a Controller (assigned `Controller(...)`, or annotated `Controller`, also `Controller | None`) must
not be followed by a `._private` attribute.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("app", "bench", "workers")


def _mentions_controller(node: ast.AST | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        return "Controller" in node.value.replace("ControllerOptions", "")
    return any(
        (isinstance(n, ast.Name) and n.id == "Controller") or (isinstance(n, ast.Attribute) and n.attr == "Controller")
        for n in ast.walk(node)
    )


def _controller_names(tree: ast.AST) -> set[str]:
    """Expressions (as source text: `ctl`, `self.ctl`) bound to a Controller anywhere in the module."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _mentions_controller(node.value.func):
            names.update(ast.unparse(t) for t in node.targets)
        elif isinstance(node, ast.AnnAssign) and _mentions_controller(node.annotation):
            names.add(ast.unparse(node.target))
        elif isinstance(node, ast.arg) and _mentions_controller(node.annotation):
            names.add(node.arg)
    return names


def private_accesses(source: str, where: str = "<source>") -> list[str]:
    """`where:line: expr._attr` for each private attribute read or written on a Controller."""
    tree = ast.parse(source)
    bound = _controller_names(tree)
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and ast.unparse(node.value) in bound
        ):
            out.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_module_outside_the_controller_touches_its_private_state():
    found = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] == ("app", "controller"):
                continue
            found += private_accesses(path.read_text(), str(rel))
    assert not found, "private Controller state used outside app/controller:\n" + "\n".join(found)


def test_the_check_sees_private_access_however_the_controller_was_bound():
    src = """
from quanta.controller import Controller

def drive(store, rt):
    ctl = Controller(store, rt)
    if not ctl._alive:
        ctl.step()

def check(c: Controller | None) -> None:
    print(c._index, c.alive())

class Loop:
    def __init__(self, store, rt):
        self.ctl = quanta.controller.Controller(store, rt)

    def go(self, other: "Controller"):
        self.ctl._signals.wake = True
        other.book.track(None, None)
"""
    assert [f.split(": ", 1)[1] for f in private_accesses(src)] == ["ctl._alive", "c._index", "self.ctl._signals"]


def test_known_residency_shows_only_the_trials_the_controller_knows():
    from quanta.controller.snapshot import KnownResidency
    from quanta.executor.actions import Residency

    seen = {1: Residency(("cpu:0",), True), 2: Residency(("cpu:1",), False), 3: Residency(("cpu:0", "cpu:1"), False)}
    known = {1: "t1", 3: "t3"}
    view = KnownResidency(seen, known.get)
    assert dict(view) == {1: ("cpu:0",), 3: ("cpu:0", "cpu:1")} and len(view) == 2
    assert 1 in view and 2 not in view and 4 not in view
    assert view.get(2) is None and view[3] == ("cpu:0", "cpu:1")
