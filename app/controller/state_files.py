"""Files of trial state the controller itself writes or moves (a fork's copied checkpoint, an exploit's
staged state): copied atomically, flushed to disk before they count, renames made durable."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path


def copy_atomic(src: Path, dst: Path) -> None:
    """Copy the file `src` to `dst` as a checkpoint is written: into a temporary file beside `dst`,
    flushed, then renamed over it, so `dst` is the whole copy or what it was before (OSError)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` survive a crash of the machine."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def flush_file(path: Path) -> None:
    """Flush the file `path` (written by another process, not flushed) and its name in its folder to
    disk: from then on it survives a crash of the machine. OSError when it cannot."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)


def flush_later(path: Path) -> Future[None]:
    """`flush_file(path)` on a thread of its own (the flush waits for the disk, not the CPU): the future
    is done once the file is on disk, or holds the OSError."""
    done: Future[None] = Future()

    def run() -> None:
        try:
            flush_file(path)
        except BaseException as exc:
            done.set_exception(exc)
        else:
            done.set_result(None)

    threading.Thread(target=run, name="quanta-flush", daemon=True).start()
    return done
