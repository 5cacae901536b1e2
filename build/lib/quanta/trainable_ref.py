"""Checking a trainable reference (`package.module:function`) without running any of its code.

The API validates posted specs in the server's process: importing the trainable's module there would
run it (and its parent packages' `__init__`) in the server, costing seconds for a module that imports
torch and running code on the server's side. `trainable_problem` instead locates the module the way
the import system would (the same finders, the parent packages' search paths) without executing a
package, then reads the module's source and checks that it binds the function's name at top level.

What the static check accepts: a top-level `def` or `async def`, an assignment (`train = make()`), or a
`from x import name` that imports something other than a module, binding the name, also inside top-level
`if`/`try`/`with` blocks (bindings made conditionally), and any module with `from x import *` or whose
code is not Python source (an extension module): the name may be bound in ways a reader cannot see
without running it. It refuses a name bound only to a module (`import numpy as np`, `from torch import
nn`) or a class: a trainable is a function `train(config, trial)`. The trial process imports the module
for real and fails the trial with the import's error if this check was too lenient.

Parsed modules are cached by (file, modification time, size): a changed file is read again.

Where a trainable is looked for depends on who runs it. A server (the API, its controller, the workers)
imports trainables from installed packages and PYTHONPATH only, under QUANTA_TRAINABLE_ALLOWLIST. `quanta
run` and `quanta.sdk.run` run the user's own code on their own machine: `place_trainable` also finds a module
beside the spec file (`wine_mlp:train` with `wine_mlp.py` in the spec's folder) and takes a file path
relative to the spec (`src/train.py:train`), and says which folder must go on `sys.path` (the trial
processes inherit it) and the `module:function` the trial processes import. Every "cannot be found" says
where it looked and what to do (`local_hint`, `SERVER_HINT`).
"""

from __future__ import annotations

import ast
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

_ANY = "*"  # the module binds names a reader cannot list (star import, extension module)

# The two shapes a spec's `trainable` may take: a dotted module, or (for `quanta run`) a .py file's path
# relative to the spec file, each with the function's name after the last colon.
MODULE_REF = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*", re.ASCII)
FILE_REF = re.compile(r"[^:\n]*[^:\n/\\]\.py:[A-Za-z_]\w*", re.ASCII)

DOCS_SERVING = 'docs/deploy.md, "Serving your own trainables"'
SERVER_HINT = (
    "on the server's import path (its installed packages and PYTHONPATH; a server never looks in the folder "
    "it was started in): start the server with the module's folder on PYTHONPATH and the module in "
    f"QUANTA_TRAINABLE_ALLOWLIST, as {DOCS_SERVING} shows"
)


def is_file_ref(ref: str) -> bool:
    """True when `ref` names a .py file (`train.py:train`, `src/train.py:train`) rather than a module."""
    return FILE_REF.fullmatch(ref) is not None


def file_ref_problem(ref: str) -> str:
    """Why a file path cannot name a trainable posted to a server."""
    return (
        f"'{ref}' names a file, which `quanta run` reads relative to the spec file; a server imports "
        f"trainables by module name (package.module:function): put the file's folder on the server's "
        f"PYTHONPATH and name its module, as {DOCS_SERVING} shows"
    )


def local_hint(ref: str, spec_dir: str | Path | None) -> str:
    """What `quanta run` (or `quanta.sdk.run`) says after "module 'x' cannot be found": the folders it looked
    in and the three ways to make the module found. No word of a server: none is involved."""
    module, _, function = ref.rpartition(":")
    top = module.partition(".")[0]
    here = os.getcwd()
    spec_folder = os.path.realpath(spec_dir) if spec_dir is not None else here
    folders = f"in {here} (the working directory)"
    if spec_folder != os.path.realpath(here):
        folders += f", beside the spec in {spec_folder}"
    file = module.replace(".", "/") + ".py"
    return (
        f"(looked {folders}, on PYTHONPATH and among installed packages): put {top}.py (or the package "
        f"{top}/) beside the spec, name the file relative to the spec (trainable: path/to/{file}:{function}), "
        f"or add the folder that holds {top} to PYTHONPATH"
    )


class TrainableNotFound(ValueError):
    """A trainable that `place_trainable` cannot place; the message says where it looked and what to do."""


@dataclass(frozen=True)
class Placement:
    """Where a local run finds its trainable: `ref`, the `module:function` trial processes import, and
    `folder`, to put first on `sys.path` before the trial template starts (None: found already)."""

    ref: str
    folder: str | None

    @property
    def module(self) -> str:
        return self.ref.rpartition(":")[0]


def place_trainable(ref: str, spec_dir: str | Path) -> Placement:
    """Where `quanta run` finds the trainable `ref` of a spec in `spec_dir` (on this process's `sys.path`
    as it stands): a file path (`src/train.py:train`, relative to `spec_dir`) becomes its module (dotted
    through the packages, folders with `__init__.py`, it sits in) and the folder above them; a module not
    on the path but beside the spec (`wine_mlp.py` or `wine_mlp/` in `spec_dir`) is found there. Anything
    else is returned as it is (`trainable_problem` then says what is wrong). Raises `TrainableNotFound`
    for a file that does not exist or cannot be a module, or that another module of its name shadows.
    Reads the filesystem only; imports nothing."""
    module, _, function = ref.rpartition(":")
    base = Path(spec_dir)
    if is_file_ref(ref):
        path = Path(os.path.realpath(base / Path(module).expanduser()))
        if not path.is_file():
            raise TrainableNotFound(
                f"file {module} not found: looked for {path} (a path is relative to the spec file's folder, "
                f"{os.path.realpath(base)})"
            )
        if not path.stem.isidentifier():
            raise TrainableNotFound(
                f"{path}: a trainable's file name must be a Python module name (letters, digits and "
                f"underscores, not starting with a digit): rename it"
            )
        parts = [path.stem]
        folder = path.parent
        while (folder / "__init__.py").is_file() and folder.name.isidentifier():  # inside a package
            parts.insert(0, folder.name)
            folder = folder.parent
        dotted = ".".join(parts)
        found = _origin_on(dotted, [str(folder), *sys.path])
        if found is not None and os.path.realpath(found) != str(path):
            raise TrainableNotFound(
                f"{path} would be imported as module '{dotted}', but that name is taken by {found}: rename the file"
            )
        return Placement(f"{dotted}:{function}", str(folder))
    try:
        on_path = locate(module) is not None
    except (ImportError, OSError, ValueError):
        on_path = True  # found, but something is wrong with it: trainable_problem says what
    top = module.partition(".")[0]
    if not on_path and ((base / f"{top}.py").is_file() or (base / top).is_dir()):
        return Placement(ref, os.path.realpath(base))
    return Placement(ref, None)


def _origin_on(module: str, path: list[str]) -> str | None:
    """The file `module` would be imported from with `path` as `sys.path` (None: not found, or not from a
    file); a module already imported answers with its own file."""
    loaded = sys.modules.get(module)
    if loaded is not None:
        return getattr(loaded, "__file__", None) or "a module already imported"
    saved = sys.path[:]
    try:
        sys.path[:] = path
        spec = locate(module)
    except (ImportError, OSError, ValueError):
        return None
    finally:
        sys.path[:] = saved
    if spec is None:
        return None
    return spec.origin if spec.origin and spec.has_location else f"Python's own module {module}"


def trainable_problem(ref: str, not_found: str = SERVER_HINT) -> str | None:
    """None when `ref` names a module on this machine's import path that binds the function at top
    level; otherwise why not, as a sentence naming the module or the function. A module that cannot be
    found is said to be so followed by `not_found`: where it was looked for and what to do (the server's
    path and allowlist by default; `local_hint` for `quanta run`). Imports nothing (a module already
    imported is looked up in `sys.modules`)."""
    if is_file_ref(ref):
        return file_ref_problem(ref)
    module, _, function = ref.partition(":")
    if not module or not function:
        return f"'{ref}' is not of the form package.module:function"
    loaded = sys.modules.get(module)
    if loaded is not None:
        value = getattr(loaded, function, None)
        if isinstance(value, ModuleType):
            return _not_a_function(module, function, f"the module {value.__name__}")
        if isinstance(value, type):
            return _not_a_function(module, function, "a class")
        return None if callable(value) else f"module '{module}' has no function '{function}'"
    try:
        spec = locate(module)
    except (ImportError, OSError, ValueError) as exc:
        return f"module '{module}' cannot be found ({exc}) {not_found}"
    if spec is None:
        return f"module '{module}' cannot be found {not_found}"
    names = _bound_names_of(spec)
    if _ANY in names:
        return None
    bindings = names.get(function)
    if not bindings:
        return f"module '{module}' has no function '{function}'"
    what = _what_not_a_function(module, spec, bindings)
    return None if what is None else _not_a_function(module, function, what)


def _not_a_function(module: str, function: str, what: str) -> str:
    return (
        f"'{function}' in module '{module}' is {what}, not a function: a trainable names a function "
        f"of its module, module:name for a `def name(config, trial)`"
    )


def _what_not_a_function(module: str, spec: ModuleSpec, bindings: tuple[Binding, ...]) -> str | None:
    """None when one of the name's top-level bindings may be a function (a `def`, an assignment, or a
    `from` import of something that is not a module); else what it is bound to, for the error."""
    what = None
    for kind, target in bindings:
        if kind in ("function", "other"):
            return None
        if kind == "from":
            full = _absolute(target, module, spec)
            try:
                found = locate(full) if full else None
            except (ImportError, OSError, ValueError):
                found = None
            if found is None:
                return None  # not a module: a function, maybe
            what = f"the module {full}"
        elif kind == "module":
            what = f"the module {target}"
        elif what is None:
            what = "a class"
    return what


def _absolute(target: str, module: str, spec: ModuleSpec) -> str | None:
    """The absolute dotted name of a `from` import's target (`..pkg.name`, relative to `module`); None
    when it climbs above the top package."""
    level = len(target) - len(target.lstrip("."))
    if level == 0:
        return target
    package = module if spec.submodule_search_locations is not None else module.rpartition(".")[0]
    parts = package.split(".") if package else []
    if level - 1 > len(parts) or (level - 1 == len(parts) and not target.lstrip(".")):
        return None
    base = parts[: len(parts) - (level - 1)]
    rest = target[level:]
    return ".".join([*base, rest]) if rest else ".".join(base)


def locate(module: str) -> ModuleSpec | None:
    """The module's spec as the import system would find it, without importing its parent packages:
    each package along the dotted name is located (never executed) and its search path used for the
    next component. None when some component is not found or is not a package."""
    path: Sequence[str] | None = None
    parts = module.split(".")
    spec: ModuleSpec | None = None
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        loaded = sys.modules.get(name)
        if loaded is not None and getattr(loaded, "__spec__", None) is not None:
            spec = loaded.__spec__
        else:
            try:
                spec = _find(name, path)
            except KeyError:  # a namespace package: the path finder wants its parent imported to list it
                spec = _namespace(name, path or sys.path)
        if spec is None:
            return None
        if i < len(parts) - 1:
            if spec.submodule_search_locations is None:
                raise ImportError(f"'{name}' is not a package")
            path = list(spec.submodule_search_locations)
    return spec


def _find(fullname: str, path: Sequence[str] | None) -> ModuleSpec | None:
    """What `importlib._bootstrap._find_spec` does for one name: ask each meta path finder in turn
    (the standard path finder, editable installs' finders, ...). Finders locate; they do not execute."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(fullname, path)
        if spec is not None:
            return spec
    return None


def _namespace(name: str, path: Sequence[str]) -> ModuleSpec | None:
    """A namespace package (PEP 420: folders without `__init__.py`) named `name`, found on `path`."""
    tail = name.rpartition(".")[2]
    folders = [os.path.join(p, tail) for p in path if os.path.isdir(os.path.join(p or ".", tail))]
    if not folders:
        return None
    spec = ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = folders
    return spec


# How a top-level name is bound: ("function", ""), ("class", ""), ("module", its dotted name) for
# `import x`, ("from", the dotted name it imports, dots first when relative) for `from x import y`, or
# ("other", "") for an assignment.
Binding = tuple[str, str]
Bindings = dict[str, tuple[Binding, ...]]


def _bound_names_of(spec: ModuleSpec) -> Bindings:
    origin = spec.origin
    if spec.submodule_search_locations is not None and (origin is None or origin == "namespace"):
        return {}  # a namespace package: no code, so no function
    if not origin or not origin.endswith(".py") or not os.path.isfile(origin):
        return {_ANY: ()}  # built-in, frozen or compiled: cannot be read here
    st = os.stat(origin)
    return _bound_names(origin, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=512)
def _bound_names(origin: str, mtime_ns: int, size: int) -> Bindings:
    """The names the module's source binds at top level, each with how (cached per file version; read
    it, never change it)."""
    try:
        tree = ast.parse(Path(origin).read_bytes(), filename=origin)
    except (SyntaxError, ValueError, OSError):
        return {}  # the import would fail: no function can be found in it
    out: dict[str, list[Binding]] = {}
    for name, binding in _top_level(tree.body):
        out.setdefault(name, []).append(binding)
    return {name: tuple(found) for name, found in out.items()}


def _top_level(body: Iterable[ast.stmt]) -> Iterable[tuple[str, Binding]]:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, ("function", "")
        elif isinstance(node, ast.ClassDef):
            yield node.name, ("class", "")
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                yield from _targets(target)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            yield from _targets(node.target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    yield alias.asname, ("module", alias.name)
                else:  # `import a.b` binds `a`
                    yield alias.name.partition(".")[0], ("module", alias.name.partition(".")[0])
        elif isinstance(node, ast.ImportFrom):
            source = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name == "*":
                    yield _ANY, ("other", "")
                else:
                    imported = f"{source}.{alias.name}" if node.module else f"{source}{alias.name}"
                    yield alias.asname or alias.name, ("from", imported)
        elif isinstance(node, ast.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
            yield from _top_level(node.finalbody)
            for handler in node.handlers:
                yield from _top_level(handler.body)
        elif isinstance(node, ast.With):
            yield from _top_level(node.body)


def _targets(target: ast.expr) -> Iterable[tuple[str, Binding]]:
    if isinstance(target, ast.Name):
        yield target.id, ("other", "")
    elif isinstance(target, ast.Tuple | ast.List):
        for elt in target.elts:
            yield from _targets(elt)
