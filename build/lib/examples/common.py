"""Pieces every example shares: deterministic mini-batch order."""

from __future__ import annotations

import functools

import numpy as np


def batch_indices(seed: int, step: int, batch_size: int, n: int) -> np.ndarray:
    """Indices of mini-batch `step`: epoch e is the permutation `default_rng((seed, e))` cut into
    n // batch_size full batches. A function of (seed, step) only, so restarts replay it exactly."""
    per_epoch = max(1, n // batch_size)
    epoch, i = divmod(step, per_epoch)
    perm = _permutation(seed, epoch, n)
    return perm[i * batch_size : (i + 1) * batch_size]


@functools.lru_cache(maxsize=4)
def _permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    perm = np.random.default_rng((seed, epoch)).permutation(n)
    perm.flags.writeable = False
    return perm
