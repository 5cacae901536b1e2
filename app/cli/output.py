"""What every command shares when it ends or writes: its exit codes, the error it prints, and files
written whole or not at all.

Exit codes (the same for every command, for scripts and CI): 0 done (`run`/`submit --wait`: the target
was reached, or the search had none and spent its budget); 1 a server cannot be reached (or a wait timed
out); 2 bad input, a refusal, or a database another controller holds; 3 a search ended without reaching
its target (or was stopped before its budget was spent); 4 a search failed (its trials failed in a row,
its metric was never reported, or every trial failed)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import typer

EXIT_OK, EXIT_UNAVAILABLE, EXIT_BAD_INPUT, EXIT_NOT_REACHED, EXIT_FAILED = 0, 1, 2, 3, 4


def search_exit_code(status: str, reached: bool, target: float | str | None) -> int:
    """The exit code of a command that waited for a search which ended with `status` (see the module's
    docstring): a failed search is `EXIT_FAILED` whatever else; a search without a target that ran to
    its end (completed) is `EXIT_OK`, as is one that reached its target."""
    from quanta.status import SearchStatus

    if status == SearchStatus.FAILED:
        return EXIT_FAILED
    if reached or (target is None and status == SearchStatus.COMPLETED):
        return EXIT_OK
    return EXIT_NOT_REACHED


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print `error: message` on stderr (the prefix in red on a terminal); raise the result to exit with
    `code`."""
    typer.echo(f"{typer.style('error:', fg='red', bold=True)} {message}", err=True)
    return typer.Exit(code)


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder, renamed into place (made with
    its folder when missing): a reader never sees half a file, and a failed write leaves nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: object) -> None:
    """`data` as indented JSON (values JSON lacks, such as paths, as their strings), `write_atomic`."""
    write_atomic(path, json.dumps(data, indent=2, default=str).encode())
