"""Atomic trial checkpoints: tracked objects' state dicts, the step to resume at, RNG states.

A checkpoint is written to a temporary file in the same directory, flushed to disk and renamed over
the old one, so a reader (a restarted trial, another node) sees either the previous checkpoint or the
new one, never half of one.

The sdk owns this format: only `Trial` writes and reads checkpoints (the runtime and the controller
handle their paths, never their contents), so it lives beside `Trial` and the sdk imports nothing
from the runtime.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch


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
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def load(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by `save_atomic`. RNG states hold numpy/python objects, so this
    loads with `weights_only=False`: only load checkpoints this service wrote."""
    return torch.load(Path(path), map_location=map_location, weights_only=False)
