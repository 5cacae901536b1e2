"""Renames of trial-state files that both a trial process and the controller make (ground floor: imports
nothing from quanta, and nothing heavy, so the sdk and the controller both use it).

`rename_over(src, dst)`: `os.replace(src, dst)`, except when `src` and `dst` are two names of one file
(hard links: an exploit's staged state linked from a published state that another exploit had made
the checkpoint already). POSIX makes that rename a no-op that leaves `src` in place, so `src` is removed
instead: `dst` holds the same bytes either way.
"""

from __future__ import annotations

import os
from pathlib import Path


def rename_over(src: str | Path, dst: str | Path) -> None:
    """Make `dst` what `src` holds and remove the name `src` (see the module's docstring). Raises OSError
    as `os.replace` does; nothing is removed when it fails."""
    if os.path.exists(dst) and os.path.samefile(src, dst):
        os.unlink(src)
        return
    os.replace(src, dst)
