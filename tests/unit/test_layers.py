"""The layering rules of docs/architecture.md, enforced on the source tree.

Imports are read from the source (every `import`, also inside functions), except those under
`if TYPE_CHECKING:`: they never run, and annotations may name a type of a higher layer.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"
HEAVY = {"torch", "celery", "sqlmodel", "sqlalchemy", "redis", "fastapi"}
CLI = ("quanta.cli",)  # every `quanta` command is in the package app/cli/

# Imports that break a rule below and are being removed: (importing file, imported module). Empty:
# service wiring (`make_runtime`, the controller loop) moved out of the CLI into `app/service.py`.
KNOWN: set[tuple[str, str]] = set()


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def import_statements(path: Path) -> list[tuple[str, tuple[str, ...] | None]]:
    """Each import `path` makes at run time as (absolute module, the names imported from it; None for a
    plain `import m`), relative imports resolved."""
    tree = ast.parse(path.read_text())
    package = ".".join(("quanta", *path.relative_to(APP).with_suffix("").parts[:-1]))
    if path.name == "__init__.py":
        package = ".".join(("quanta", *path.relative_to(APP).parts[:-1]))
    out: list[tuple[str, tuple[str, ...] | None]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.Import):
            out.extend((a.name, None) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append((module, tuple(a.name for a in node.names)))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def imports(path: Path) -> set[str]:
    """Absolute module names `path` imports at run time (relative imports resolved)."""
    out: set[str] = set()
    for module, names in import_statements(path):
        out.add(module)
        # `from app.x import y` may import the module app.x.y
        out.update(f"{module}.{name}" for name in names or ())
    return out


def files(sub: str = "") -> list[Path]:
    return sorted((APP / sub).rglob("*.py"))


def rel(f: Path) -> str:
    return str(f.relative_to(APP))


def unit(module: str) -> str | None:
    """The package a module belongs to, for the package-level graph: `quanta.executor.policy` and
    `quanta.executor.runtime` stand apart from the rest of `quanta.executor` (actions, wire, reconcile);
    every other `app.<name>` (a package or a top-level module) is one unit."""
    parts = module.split(".")
    if parts[0] != "quanta" or len(parts) < 2:
        return None
    if parts[1] == "executor" and len(parts) > 2 and parts[2] in ("policy", "runtime"):
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def _exists(module: str) -> bool:
    top, *rest = module.split(".")
    if top != "quanta":
        return False
    p = APP.joinpath(*rest)
    return p.with_suffix(".py").exists() or (p / "__init__.py").exists()


def app_imports(f: Path) -> set[str]:
    """The app modules (files or packages) that `f` imports."""
    return {m for m in imports(f) if m.startswith("quanta.") and _exists(m)}


# Imports a layer makes by design, against its row below: (importing file, imported module).
# `quanta.sdk.run` runs a whole search in the user's process (a notebook's `quanta run`), so its module is a
# wiring entry point like the CLI: it calls the in-process search (`quanta.stored_search`), and only that (no
# runtime, db or controller). The edge is taken when `run` is called, never by a trial process (`quanta.sdk`
# loads its names on first use), so it is left out of the package graph too; it goes when `run` moves to the
# product's top package.
WIRING: set[tuple[str, str]] = {("sdk/local.py", "quanta.stored_search")}

# The wiring over the controller: the loop and the service (`quanta.service`), and a stored search driven in
# the caller's process over that loop (`quanta.stored_search`). The layers below import neither.
SERVICE = ("quanta.service", "quanta.stored_search")


def violations(layer: str, banned: tuple[str, ...]) -> list[str]:
    out = []
    for f in files(layer):
        for m in sorted(app_imports(f)):
            allowed = (rel(f), m) in KNOWN or (rel(f), m) in WIRING
            if any(m == b or m.startswith(b + ".") for b in banned) and not allowed:
                out.append(f"{rel(f)} imports {m}")
    return out


@pytest.mark.parametrize("layer", ["executor/policy", "search"])
def test_pure_layers_import_nothing_heavy(layer):
    for f in files(layer):
        bad = {m for m in imports(f) if m.split(".")[0] in HEAVY}
        assert not bad, f"{rel(f)} imports {bad}"


@pytest.mark.parametrize(
    ("layer", "banned"),
    [
        ("executor/runtime", ("quanta.db", "quanta.api", "quanta.controller", *SERVICE, *CLI)),
        ("sdk", ("quanta.executor.runtime", "quanta.controller", *SERVICE, "quanta.db", "quanta.api", *CLI)),
        # The integrations are the sdk for other libraries' loops: they see a Trial, nothing below it.
        (
            "integrations",
            (
                "quanta.executor",
                "quanta.controller",
                *SERVICE,
                "quanta.db",
                "quanta.api",
                "quanta.search",
                *CLI,
            ),
        ),
        ("db", ("quanta.api", "quanta.controller", *SERVICE, "quanta.executor.runtime", *CLI)),
        ("api", CLI),
    ],
)
def test_layer_does_not_reach_up(layer, banned):
    assert violations(layer, banned) == []


def test_only_the_cli_imports_the_cli_or_typer():
    """The SDK, the API and every other layer import no command and need no typer."""
    bad = []
    for f in files():
        if rel(f).startswith("cli/"):
            continue
        for m in sorted(imports(f)):
            if m == "typer" or m.startswith("typer.") or any(m == c or m.startswith(c + ".") for c in CLI):
                bad.append(f"{rel(f)} imports {m}")
    assert bad == []


def test_the_sdk_and_the_api_load_without_typer():
    """The SDK's client, the API's app and the service wiring, imported in a fresh interpreter: neither
    typer nor any command comes with them (every other module: `test_only_the_cli_imports_the_cli_or_typer`)."""
    code = (
        "import sys\n"
        "import quanta.sdk, quanta.sdk.client, quanta.api.main, quanta.service, quanta.stored_search\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'typer' or m.split('.')[:2] == ['quanta', 'cli']))\n"
    )
    # The caller's PYTHONPATH stays first: a checkout of its own (a git worktree) names its `quanta` there.
    path = [p for p in (os.environ.get("PYTHONPATH"), str(APP.parent)) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=APP.parent, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def calls(path: Path) -> set[str]:
    """The names of the methods `path` calls (`x.y(...)` -> `y`)."""
    tree = ast.parse(path.read_text())
    return {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}


def test_one_controller_loop():
    """`quanta run`, `quanta serve` and `quanta controller` run one loop, `quanta.service.ControllerLoop`: what
    a running controller does beside its tick (the lease check, the deletions the API asked for) is called
    there and nowhere else, so no second loop grows its own copy. (Its rest while idle is measured:
    tests/unit/test_service_loop.py, tests/integration/test_idle_cpu.py.) Besides: `delete_stored_search`
    deletes a search where no controller runs, under the database's lease, so no loop is there to do it."""
    duties = {"ensure", "pending_deletes", "delete_search"}
    no_loop = {"stored_search.py calls delete_search"}
    outside = {
        f"{rel(f)} calls {name}"
        for f in files()
        if rel(f) not in ("service.py", "controller/core.py")  # the loop; the controller's own step
        and not rel(f).startswith("db/")  # where the lease and the deletions are kept
        for name in calls(f) & duties
    }
    assert outside == no_loop


def test_app_never_imports_workers():
    for f in files():
        bad = {m for m in imports(f) if m == "workers" or m.startswith("workers.")}
        assert not bad, f"{rel(f)} imports {bad}"


def package_graph() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> the files whose imports make that edge."""
    graph: dict[str, dict[str, list[str]]] = {}
    for f in files():
        mod = module_name(f)
        u = unit(mod)
        if u is None:
            continue
        for m in app_imports(f):
            v = unit(m)
            if v is not None and v != u and (rel(f), m) not in KNOWN | WIRING:
                graph.setdefault(u, {}).setdefault(v, []).append(rel(f))
    return graph


def find_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str] | None:
    """A cycle as [a, b, ..., a], or None when the graph is acyclic (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def dfs(u: str) -> list[str] | None:
        state[u] = 1
        path.append(u)
        for v in sorted(graph.get(u, {})):
            if state.get(v) == 1:
                return path[path.index(v) :] + [v]
            if v not in state and (found := dfs(v)):
                return found
        path.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state and (found := dfs(u)):
            return found
    return None


def test_no_import_cycle_between_app_packages():
    graph = package_graph()
    cycle = find_cycle(graph)
    if cycle:
        edges = [f"{a} -> {b} ({', '.join(sorted(set(graph[a][b])))})" for a, b in zip(cycle, cycle[1:], strict=False)]
        pytest.fail("import cycle between app packages:\n  " + "\n  ".join(edges))


def test_find_cycle_sees_a_loop_through_three_packages():
    graph = {"a": {"b": ["x"]}, "b": {"c": ["y"]}, "c": {"a": ["z"]}, "d": {"a": ["w"]}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": ["x"]}, "b": {}}) is None


def test_known_exceptions_are_still_there():
    """An exception that no longer occurs must be removed from KNOWN (so it cannot come back unseen)."""
    for path, module in KNOWN:
        assert module in imports(APP / path), f"{path} no longer imports {module}: remove it from KNOWN"


def test_status_is_the_ground_floor():
    """app/status.py (the states' vocabulary) imports nothing from quanta: every layer may import it."""
    assert {m for m in imports(APP / "status.py") if m.startswith("quanta")} == set()


def test_the_api_reads_and_writes_only_through_the_store():
    """No API module but the shapes in models.py touches SQLModel/SQLAlchemy: queries are Store methods
    (app/db/searches.py, trials.py, monitoring.py) returning read models, so there is one data-access
    layer."""
    for f in files("api"):
        if rel(f) == "api/models.py":
            continue
        bad = {m for m in imports(f) if m.split(".")[0] in ("sqlmodel", "sqlalchemy")}
        assert not bad, f"{rel(f)} imports {bad}"


MODULE_GRAPH_LAYERS = ("search", "executor/policy")


def module_name(f: Path) -> str:
    """`f`'s import name: the folder app/ is the package `quanta`."""
    return ".".join(("quanta", *f.relative_to(APP).with_suffix("").parts)).removesuffix(".__init__")


def module_imports(f: Path) -> set[str]:
    """The app modules `f` imports, each as the module whose code the import needs: `from a.b import c`
    names the module `a.b.c` when there is one, and the package `a.b` (its `__init__`) when a name
    imported from it is not a module; the parent packages an import passes through are not counted."""
    out: set[str] = set()
    for module, names in import_statements(f):
        if not module.startswith("quanta") or not _exists(module):
            continue
        subs = {f"{module}.{n}" for n in names or () if _exists(f"{module}.{n}")}
        out |= subs
        if names is None or len(subs) < len(names):
            out.add(module)
    return out


def module_graph(layers: tuple[str, ...]) -> dict[str, dict[str, list[str]]]:
    """module -> imported module -> [the importing file], over the modules of `layers` (imports made only
    under `if TYPE_CHECKING:` left out, as everywhere here)."""
    inside = {module_name(f) for layer in layers for f in files(layer)}
    graph: dict[str, dict[str, list[str]]] = {}
    for layer in layers:
        for f in files(layer):
            u = module_name(f)
            for v in module_imports(f):
                if v in inside and v != u:
                    graph.setdefault(u, {}).setdefault(v, []).append(rel(f))
    return graph


def test_no_import_cycle_between_modules_of_search_and_policy():
    """Not only between packages: no module of app/search or app/executor/policy imports, through any
    chain, a module that imports it back (a circle such as a factory importing a subclass of its own
    module's class lazily, inside a function, counts: the test reads those imports too)."""
    graph = module_graph(MODULE_GRAPH_LAYERS)
    cycle = find_cycle(graph)
    if cycle:
        edges = [f"{a} -> {b}" for a, b in zip(cycle, cycle[1:], strict=False)]
        pytest.fail("import cycle between modules:\n  " + "\n  ".join(edges))


# ---- modules of app/db: no import cycle between them ------------------------------------------------


def test_no_import_cycle_between_db_modules():
    """The modules of app/db import each other without a cycle (the engine, the tables and the
    migrations sit beneath the store, distributed mode's ledger and the queries; a store that imported
    a module importing the store back, as the key/value import once did through distributed mode's
    tables, is caught here)."""
    graph = module_graph(("db",))
    cycle = find_cycle(graph)
    if cycle:
        edges = [f"{a} -> {b} ({', '.join(graph[a][b])})" for a, b in zip(cycle, cycle[1:], strict=False)]
        pytest.fail("import cycle between app/db modules:\n  " + "\n  ".join(edges))


def test_every_package_of_app_is_installed_as_quanta():
    """pyproject.toml lists the packages by name (`app/` is installed as `quanta`, which setuptools' finder
    cannot map): every folder of app/ holding Python modules is there, so an install misses none."""
    import tomllib

    listed = set(tomllib.loads((APP.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {p.parent for p in APP.rglob("*.py") if "__pycache__" not in p.parts}
    wanted = {".".join(("quanta", *f.relative_to(APP).parts)) for f in folders}
    assert wanted - listed == set()
