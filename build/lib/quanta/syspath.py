"""Keep the working directory off `sys.path` in long-running services.

`python -m quanta.cli ...` (and `python -m workers`) put the directory the command was started in first on
`sys.path`, so a file there named like a trainable's module (`examples/mnist1d.py`) would be imported
instead of the installed one by `quanta serve`, `quanta controller` or a worker, and by the trial
template they start. `quanta run` (and `quanta.sdk.run`) alone import trainables from the working directory
on purpose, and from the spec file's folder when the trainable is there (`quanta.trainable_ref.place_trainable`).
Ground floor: imports nothing from `quanta`.
"""

from __future__ import annotations

import os
import sys


def drop_working_dir() -> list[str]:
    """Remove from `sys.path` the relative entries ("", ".") and the working directory itself, unless
    PYTHONPATH names it explicitly. Returns what was removed."""
    cwd = os.path.realpath(os.getcwd())
    asked = {os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    removed = []
    for entry in list(sys.path):
        relative = entry in ("", ".") or not os.path.isabs(entry)
        if relative or (os.path.realpath(entry) == cwd and cwd not in asked):
            sys.path.remove(entry)
            removed.append(entry)
    return removed
