"""Renames of trial-state files that both a trial process and the controller make (ground floor: imports
nothing from quanta, and nothing heavy, so the sdk and the controller both use it).

`replace(src, dst)`: `os.replace(src, dst)` without freeing the file `dst` named on the caller's way.
Replacing the last name of a large file frees its blocks within the rename: a 120 MB checkpoint (a
10M-parameter model with Adam) took 31-35 ms here, about 100 ms while its pages were still unwritten,
all of it on the way of the trial's next step (or of an exploit's hand-over). The replaced file is held
open across the rename and let go on a thread of its own, where the kernel frees it.

`rename_over(src, dst)`: `replace(src, dst)`, except when `src` and `dst` are two names of one file
(hard links: an exploit's staged state linked from a published state that another exploit had made
the checkpoint already). POSIX makes that rename a no-op that leaves `src` in place, so `src` is removed
instead: `dst` holds the same bytes either way.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path


def replace(src: str | Path, dst: str | Path) -> None:
    """`os.replace(src, dst)`, the file `dst` named before freed on a thread (see the module's docstring).
    Raises OSError as `os.replace` does."""
    try:
        held = os.open(dst, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # nothing there (or nothing this process may open): a plain rename
        os.replace(src, dst)
        return
    try:
        os.replace(src, dst)
    finally:
        # A daemon thread: a process that ends meanwhile closes it on its way out all the same.
        threading.Thread(target=_close, args=(held,), name="quanta-free-replaced", daemon=True).start()


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def rename_over(src: str | Path, dst: str | Path) -> None:
    """Make `dst` what `src` holds and remove the name `src` (see the module's docstring). Raises OSError
    as `os.replace` does; nothing is removed when it fails."""
    if os.path.exists(dst) and os.path.samefile(src, dst):
        os.unlink(src)
        return
    replace(src, dst)
