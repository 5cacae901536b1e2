"""Atomic trial checkpoints: tracked objects' state dicts, the step to resume at, RNG states.

A checkpoint is written to a temporary file in the same directory, flushed to disk and renamed over
the old one, and the directory is flushed after the rename, so a reader (a restarted trial, another
node, the same machine after a power cut) sees either the previous checkpoint or the new one, never
half of one. A write that fails (a full disk) leaves the previous checkpoint as it was.

Checkpoints are read with `torch.load(weights_only=True)`: the shared checkpoint folder is writable by
every node, so a file there must not be able to run code on the host that loads it. Only tensors,
plain Python values and the types in `SAFE_GLOBALS` (numpy arrays, dtypes and scalars: the RNG state
and numpy values a trainable's state dict may hold) are accepted; anything else is refused with
`CheckpointRefused`.

The sdk owns this format: only `Trial` writes and reads checkpoints (the runtime and the controller
handle their paths, never their contents), so it lives beside `Trial` and the sdk imports nothing
from the runtime.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from quanta.renames import rename_over, replace


class CheckpointRefused(ValueError):
    """A checkpoint file holds something other than tensors, plain values and `SAFE_GLOBALS`."""


def _numpy_globals() -> list[Any]:
    """What pickled numpy arrays, dtypes and scalars refer to (numpy 1.x and 2.x module paths)."""
    try:
        multiarray = importlib.import_module("numpy._core.multiarray")
    except ImportError:  # numpy < 2
        multiarray = importlib.import_module("numpy.core.multiarray")
    dtypes = {type(np.dtype(code)) for code in "?bBhHiIlLqQefdgFDG"}
    return [np.ndarray, np.dtype, multiarray._reconstruct, multiarray.scalar, *sorted(dtypes, key=lambda t: t.__name__)]


# Types a checkpoint may name besides tensors and plain values (see the module's docstring).
SAFE_GLOBALS: list[Any] = _numpy_globals()


def rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_atomic(payload: dict[str, Any], path: str | Path) -> Path:
    """Write `payload` with torch.save to `path` atomically (temp file + fsync + rename)."""
    return _replace_with(payload, Path(path), durable=True)


def save_staged(payload: dict[str, Any], path: str | Path) -> Path:
    """Write `payload` to `path` for a reader that comes next (an exploit's staged state, which another
    trial's process loads at once): atomically (temporary file + rename), but without zip CRC-32 records and
    without flushing it to disk. Measured with a 10M-parameter model and Adam (a 115 MB file, one CPU
    core): 31 ms, against 62 ms with CRC-32 records and 134 ms with them and the flush (`save_atomic`).
    Not on tmpfs (/dev/shm): it is no faster on an idle disk (37 ms) and steadier on a busy one (47 ms
    against 40-270 ms), but the state must reach the disk before the exploit is done all the same, so a
    file there would only add a copy, and make the commit a copy instead of a rename. Whoever makes the
    file a checkpoint flushes it to disk first (off the adopting trial's way); a file without CRC records
    loads as any other (`load`)."""
    return _replace_with(payload, Path(path), durable=False)


def _replace_with(payload: dict[str, Any], target: Path, durable: bool) -> Path:
    """torch.save `payload` to a temporary file beside `target` and rename it over `target`: a reader sees
    the old file or the new one, never half of one; a failed write leaves the old one and no temporary
    file. `durable`: flushed to disk before the rename and the rename flushed after (a checkpoint that
    survives a power cut); otherwise without CRC-32 records and without flushes (`save_staged`)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh, contextlib.nullcontext() if durable else _without_crc():
            torch.save(payload, fh)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        replace(tmp, target)  # the previous file freed off this thread
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        _fsync_dir(target.parent)  # the rename itself must survive a crash
    return target


def _without_crc() -> contextlib.AbstractContextManager[Any]:
    """torch.save without CRC-32 records where this torch can be told so (2.6 on), else as it is."""
    try:
        from torch.utils.serialization import config
    except ImportError:
        return contextlib.nullcontext()
    patch = getattr(config, "patch", None)
    if patch is None or not hasattr(getattr(config, "save", None), "compute_crc32"):
        return contextlib.nullcontext()
    return patch({"save.compute_crc32": False})


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems (network mounts) refuse fsync on a directory: the rename stands
        pass
    finally:
        os.close(fd)


def commit_staged(staged: str | Path, checkpoint: str | Path) -> None:
    """Make the staged file `staged` (an exploit's, on disk already) the checkpoint at `checkpoint`: a
    rename, so a reader sees the old checkpoint or this one. The folder is not flushed here: the
    controller flushes it before it stores the exploit as done (until then a crash that loses the rename
    finds the staged file where it was, which a restart completes), which keeps the flush off the way to
    the trial's next step. A staged file that is another name of the checkpoint already is only removed
    (`quanta.renames.rename_over`)."""
    rename_over(staged, checkpoint)


def load(path: str | Path, map_location: str | torch.device = "cpu", mapped: bool = False) -> dict[str, Any]:
    """Read a checkpoint written by `save_atomic` or `save_staged` with `weights_only=True` and
    `SAFE_GLOBALS`. Raises `CheckpointRefused` (naming the file) when it holds anything else, e.g. a
    pickle that would call a function: nothing in it is executed.

    `mapped`: the tensors are views of the file's pages, on the CPU, copied on write (`torch.load`'s
    `mmap`), for a reader that copies them into tensors it holds (`quanta.sdk.tracked.restore_into`)
    and drops them: reading a file in the page cache so costs one copy instead of an allocation and two
    copies (a 10M-parameter model with Adam, 115 MB: 22 ms against 42 ms, one core). The whole file stays
    mapped while any of them lives."""
    try:
        with torch.serialization.safe_globals(SAFE_GLOBALS):
            if mapped:
                return torch.load(Path(path), map_location="cpu", weights_only=True, mmap=True)
            return torch.load(Path(path), map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointRefused(
            f"checkpoint {path}: refused, it holds more than tensors and plain values ({first})"
        ) from None
