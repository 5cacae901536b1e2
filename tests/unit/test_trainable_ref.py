"""Issue 12 item 13: validating a trainable name runs none of its code in the validating process (the
API's): the module and its parent packages are located, not imported, and the function is looked for
in the module's source."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from quanta.spec import parse_spec
from quanta.trainable_ref import trainable_problem

SPEC = {
    "name": "t",
    "space": {"lr": {"uniform": [0.0, 1.0]}},
    "metric": {"name": "accuracy", "goal": "maximize"},
    "budget": {"max_trials": 2, "max_steps": 10},
}


@pytest.fixture
def pkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package whose `__init__` and module leave a marker file when they run."""
    root = tmp_path / "src"
    (root / "heavypkg").mkdir(parents=True)
    marker = tmp_path / "ran"
    side_effect = f"open({str(marker)!r} + '-' + __name__, 'w').close()\n"
    (root / "heavypkg" / "__init__.py").write_text(side_effect)
    (root / "heavypkg" / "trainer.py").write_text(
        side_effect
        + "import json as js\n"
        + "def train(config, trial):\n    pass\n"
        + "async def atrain(config, trial):\n    pass\n"
        + "made = lambda config, trial: None\n"
        + "if js:\n    conditional = made\n"
        + "try:\n    from os.path import join as joined\nexcept ImportError:\n    pass\n"
        + "import os.path\n"
        + "from importlib import util as imported_module\n"
        + "from . import helpers\n"
        + "class Model:\n    pass\n"
        + "if js:\n    def either(config, trial):\n        pass\nelse:\n    import json as either\n"
    )
    (root / "heavypkg" / "helpers.py").write_text("")
    (root / "heavypkg" / "star.py").write_text("from os.path import *\n")
    (root / "heavypkg" / "broken.py").write_text("def train(:\n")
    (root / "heavypkg" / "sub").mkdir()  # a namespace package inside: no code, no function
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in [m for m in sys.modules if m == "heavypkg" or m.startswith("heavypkg.")]:
        del sys.modules[name]


def ran(pkg: Path) -> list[str]:
    return sorted(p.name for p in pkg.parent.iterdir() if p.name.startswith("ran-"))


def test_validating_a_spec_runs_none_of_the_trainables_code(pkg: Path) -> None:
    spec = parse_spec({**SPEC, "trainable": "heavypkg.trainer:train"})
    assert spec.importable() and spec.trainable_problem() is None
    assert ran(pkg) == [], "the package or the module was executed by validation"
    assert "heavypkg" not in sys.modules and "heavypkg.trainer" not in sys.modules


@pytest.mark.parametrize("name", ["train", "atrain", "made", "conditional", "joined", "either"])
def test_every_kind_of_top_level_binding_is_found(pkg: Path, name: str) -> None:
    assert trainable_problem(f"heavypkg.trainer:{name}") is None
    assert ran(pkg) == []


@pytest.mark.parametrize(
    ("ref", "words"),
    [
        ("heavypkg.trainer:nothing", "module 'heavypkg.trainer' has no function 'nothing'"),
        ("heavypkg.missing:train", "module 'heavypkg.missing' cannot be found"),
        ("nosuchpkg_x.mod:train", "module 'nosuchpkg_x.mod' cannot be found"),
        ("heavypkg.trainer.deeper:train", "'heavypkg.trainer' is not a package"),
        ("heavypkg.broken:train", "module 'heavypkg.broken' has no function 'train'"),
        ("heavypkg.sub:train", "module 'heavypkg.sub' has no function 'train'"),
    ],
)
def test_what_is_wrong_is_named(pkg: Path, ref: str, words: str) -> None:
    problem = trainable_problem(ref)
    assert problem is not None and words in problem, problem
    assert ran(pkg) == []


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("js", "the module json"),  # import json as js
        ("os", "the module os"),  # import os.path binds os
        ("imported_module", "the module importlib.util"),  # from importlib import util
        ("helpers", "the module heavypkg.helpers"),  # from . import helpers
        ("Model", "a class"),
    ],
)
def test_a_name_bound_only_to_a_module_or_a_class_is_no_trainable(pkg: Path, name: str, what: str) -> None:
    problem = trainable_problem(f"heavypkg.trainer:{name}")
    assert problem is not None and f"'{name}' in module 'heavypkg.trainer' is {what}, not a function" in problem
    assert ran(pkg) == []


def test_an_examples_import_is_refused_with_a_clear_error() -> None:
    """`examples.digits:np` was accepted (its module imports numpy as np) and every trial failed."""
    problem = trainable_problem("examples.digits:np")
    assert problem == (
        "'np' in module 'examples.digits' is the module numpy, not a function: a trainable names a function of "
        "its module, module:name for a `def name(config, trial)`"
    )
    assert trainable_problem("examples.digits:nn") is not None  # from torch import nn: a module too
    assert trainable_problem("examples.digits:train") is None
    assert trainable_problem("json:JSONDecoder") == (  # imported already: a class, looked up in sys.modules
        "'JSONDecoder' in module 'json' is a class, not a function: a trainable names a function of its module, "
        "module:name for a `def name(config, trial)`"
    )
    assert trainable_problem("os:path") is not None and "the module posixpath" in trainable_problem("os:path")


def test_a_star_import_or_an_imported_module_is_taken_on_trust(pkg: Path) -> None:
    assert trainable_problem("heavypkg.star:anything") is None  # bound by names a reader cannot list
    assert trainable_problem("json:dumps") is None  # imported already: looked up in sys.modules
    assert trainable_problem("json:no_such") == "module 'json' has no function 'no_such'"


def test_a_changed_module_is_read_again(pkg: Path) -> None:
    path = pkg / "heavypkg" / "trainer.py"
    assert trainable_problem("heavypkg.trainer:later") is not None
    path.write_text(path.read_text() + "def later(config, trial):\n    pass\n")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a clock coarser than the test
    assert trainable_problem("heavypkg.trainer:later") is None


def test_the_projects_examples_are_found_without_importing_them() -> None:
    before = set(sys.modules)
    assert trainable_problem("examples.mnist1d:train") is None
    assert trainable_problem("examples.cifar10:train") is None
    assert trainable_problem("examples.mnist1d:nothing") is not None
    assert not {m for m in set(sys.modules) - before if m.startswith("examples")}
