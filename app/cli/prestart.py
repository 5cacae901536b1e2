"""A cold `quanta run` launches its trial template before the `quanta` command imports anything else.

The template (`quanta.executor.runtime.template`) imports torch and the trainable's module, the longest
part of a cold start, so every moment it starts earlier comes off the start: the command's own imports
(typer, rich, every command's module) and the spec's validation took 0.25-0.5 s before it was launched.
`start_early(sys.argv)` runs first thing in `quanta.cli`: for a `quanta run SPEC` command line it reads
the spec's `trainable` line (nothing else of it, and without validating it), places the trainable as
`run` will (`place_trainable`: a module beside the spec, a file path relative to it, the working
directory first on the path) and launches the template with that module and path.

`run` then validates the spec as always and takes the template over only when it is the one it would
launch itself, the same module on the same path (`claim`); otherwise (a spec it could not read that way,
a trainable placed elsewhere once validated) the early template is stopped and `run` launches its own.
A template nobody claims, because the command failed first (a bad option, a spec refused), is stopped
when the process exits. Imports nothing heavy, and for any other command nothing at all: this runs
before everything else.
"""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from quanta.executor.runtime.template import TemplateStart

# `quanta run`'s options that take a value (the next argument unless written `--name=value`).
OPTIONS_WITH_VALUES = frozenset({"--devices", "--db", "--output", "--workdir"})

_started: TemplateStart | None = None


def run_spec(argv: list[str]) -> str | None:
    """The SPEC argument of a `quanta run` command line (`argv` as in `sys.argv`), or None when it is
    another command, when `quanta` is not the program (`-m` stands for `python -m quanta.cli`), or when
    help is asked for."""
    if len(argv) < 3 or argv[1] != "run":
        return None
    if argv[0] != "-m" and os.path.basename(argv[0]) != "quanta":
        return None
    if "--help" in argv[2:] or "-h" in argv[2:]:
        return None
    args = iter(argv[2:])
    for arg in args:
        if arg in OPTIONS_WITH_VALUES:
            next(args, None)
        elif not arg.startswith("-"):
            return arg
    return None


def start_early(argv: list[str]) -> None:
    """Launch the template for the `quanta run` command line `argv`, if it is one (`run_spec`) and its
    spec's trainable can be read and placed (see the module's docstring); else do nothing."""
    global _started
    spec = run_spec(argv)
    if spec is None or _started is not None:
        return
    # Imported here: every other command starts without them.
    from quanta.executor.runtime.template import spec_trainable, start_template
    from quanta.trainable_ref import TrainableNotFound, place_trainable

    ref = spec_trainable(spec)
    if ref is None:
        return
    # As `run` does: the working directory first on the path, then the trainable's folder before it. Put
    # there for the template only, and taken off this process's path again, so that the command's own
    # imports below do not see the user's files.
    saved = list(sys.path)
    try:
        sys.path.insert(0, os.getcwd())
        placed = place_trainable(ref, Path(spec).parent)
        if placed.folder is not None and placed.folder not in sys.path:
            sys.path.insert(0, placed.folder)
        _started = start_template([placed.module])
    except (TrainableNotFound, OSError, ValueError):
        return  # `run` says what is wrong, after validating the spec
    finally:
        sys.path[:] = saved
    atexit.register(_close_unclaimed)


def claim(module: str, path: tuple[str, ...]) -> TemplateStart | None:
    """The template `start_early` launched, handed over once, when it warms `module` on `path` (what
    `run` would launch now); None when there is none, or it is another (then it is stopped)."""
    global _started
    template, _started = _started, None
    if template is None:
        return None
    if template.warm_modules != (module,) or template.path != path:
        template.close()
        return None
    return template


def _close_unclaimed() -> None:
    global _started
    template, _started = _started, None
    if template is not None:
        template.close()
