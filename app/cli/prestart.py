"""A cold `quanta run` launches its trial template before the `quanta` command imports anything else.

The template (`app.executor.runtime.template`) imports torch and the trainable's module, the longest
part of a cold start, so every moment it starts earlier comes off the start. `start_early(sys.argv)`
runs first thing in `app.cli`, before the command line interface (typer, rich, the commands' modules)
is imported; `quanta run` then adopts the template (`claim`) instead of launching one. It reads the
command line only as far as it needs: the command is `run` and its first argument that is no option is
the spec, whose `trainable` line names the module to warm. Whatever it cannot read that way starts no
template here (the command starts its own, as before); a template nobody claims, because the command
failed first (a bad option, `--help`), is stopped when the process exits."""

from __future__ import annotations

import atexit
import os
import sys

from app.executor.runtime.template import TemplateStart, spec_module, start_template

# `quanta run`'s options that take a value (the next argument unless written `--name=value`).
OPTIONS_WITH_VALUES = frozenset({"--devices", "--db", "--output", "--workdir"})

_started: TemplateStart | None = None


def run_spec(argv: list[str]) -> str | None:
    """The SPEC argument of a `quanta run` command line (`argv` as in `sys.argv`), or None when it is
    another command, when `quanta` is not the program (`-m` stands for `python -m app.cli`), or when
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
    """Launch the template for the `quanta run` command line `argv`, if it is one (`run_spec`)."""
    global _started
    spec = run_spec(argv)
    if spec is None or _started is not None:
        return
    # The trainable's module may be in the working directory: on the template's path (as `run` puts it),
    # and off this process's again until `run` puts it there, so that the CLI's own imports below do
    # not see the user's files.
    cwd = os.getcwd()
    sys.path.insert(0, cwd)
    try:
        module = spec_module(spec)
        _started = start_template([module] if module else [])
    finally:
        sys.path.remove(cwd)
    atexit.register(_close_unclaimed)


def claim() -> TemplateStart | None:
    """The template `start_early` launched, handed over once (None when it launched none)."""
    global _started
    template, _started = _started, None
    return template


def _close_unclaimed() -> None:
    template = claim()
    if template is not None:
        template.close()
