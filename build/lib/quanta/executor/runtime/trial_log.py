"""A trial's output file (its stdout and stderr, kept per trial under the workdir:
`search-<id>/logs/trial-<id>.log`), bounded in size.

The trial process appends to it (`open_log`: `O_APPEND`, so a restarted trial adds to what its earlier
process wrote), readable by the server's user only (0600, like the database: a trial's output may print
its configuration, paths and data). `keep_bounded(path)` cuts the file to its last `LOG_KEEP_BYTES` once
it has grown past `LOG_CAP_BYTES`, starting the kept part with a line that says so; the trial process
calls it when it starts and every `CHECK_EVERY_S` while it runs (`watch`). Appends racing with a cut may lose a line:
logs are for reading, not for accounting. `tail(path, n)` reads the last `n` bytes for a reader.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

LOG_MODE = 0o600  # the owner reads and writes; nobody else
LOG_CAP_BYTES = 8 << 20  # a trial's log grows to at most this (plus one check's worth of output)
LOG_KEEP_BYTES = 2 << 20  # what is kept of it when it is cut
CHECK_EVERY_S = 2.0
CUT_MARK = b"[quanta: earlier output cut to keep this log bounded]\n"


def open_log(path: str | Path, fresh: bool) -> int:
    """A descriptor of the trial's log (its folder made when missing) for appending, emptied first when
    `fresh`. Created with mode `LOG_MODE`, and a log an older version made readable by others is made
    private before anything more is written to it."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if fresh else 0), LOG_MODE)
    os.fchmod(fd, LOG_MODE)
    return fd


def keep_bounded(path: str | Path, cap: int | None = None, keep: int | None = None) -> bool:
    """Cut the file to (about) its last `keep` bytes (default `LOG_KEEP_BYTES`), from a line start, when
    it is larger than `cap` (default `LOG_CAP_BYTES`). Returns True when it was cut. A missing file is
    left alone."""
    cap = LOG_CAP_BYTES if cap is None else cap
    keep = LOG_KEEP_BYTES if keep is None else keep
    try:
        size = os.path.getsize(path)
    except OSError:
        return False
    if size <= cap:
        return False
    with open(path, "rb") as fh:
        fh.seek(max(0, size - keep))
        tail = fh.read()
    newline = tail.find(b"\n")
    if 0 <= newline < len(tail) - 1:
        tail = tail[newline + 1 :]  # from the first whole line
    with open(path, "r+b") as fh:
        fh.truncate(0)
        fh.write(CUT_MARK + tail)
    return True


def watch(path: str | Path, every_s: float = CHECK_EVERY_S) -> threading.Thread:
    """A daemon thread that keeps `path` bounded while the process lives."""

    def loop() -> None:
        while True:
            with contextlib.suppress(OSError):
                keep_bounded(path)
            time.sleep(every_s)

    t = threading.Thread(target=loop, name="quanta-log-bound", daemon=True)
    t.start()
    return t


def tail(path: str | Path, n: int) -> bytes | None:
    """The last `n` bytes of the file (from a line start when it is longer); None when it does not exist."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - n))
            data = fh.read()
    except FileNotFoundError:
        return None
    if len(data) == n and size > n:
        newline = data.find(b"\n")
        if 0 <= newline < len(data) - 1:
            data = data[newline + 1 :]
    return data
