"""Which of a (search, bracket)'s lowest rungs ASHA passes over: `rung_check` (see `quanta.executor.policy.asha`).

A rung judges only while it ranks trials as the next rung does. Once `pairs` trials are recorded at both,
a rung whose Spearman correlation with the next is below `threshold` is passed over for the rest of the
search (its trials go on rather than wait there) and the next rung is checked in turn; one that
correlates at or above it judges from then on and the check is decided. The last rung before the full
budget has no next rung to agree with and always judges.

Spearman's correlation is computed here with numpy (`spearman`, the value `scipy.stats.spearmanr` gives)
rather than by scipy.stats: importing scipy.stats takes 0.8 s of the controller's one thread, and the
first check comes about a second into a search, so a short search (the digits example: seconds in all)
stood still for that long while its trials waited at their rungs.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from quanta.search.fidelity import RungRecords

__all__ = ["rungs_passed", "spearman"]


def _average_ranks(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """Ranks from 1, tied values sharing their mean rank (scipy.stats.rankdata's "average")."""
    a = np.asarray(values, dtype=float)
    order = np.argsort(a, kind="mergesort")
    ordered = a[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(a)]
    ranks = np.empty(len(a))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation of two equally long sequences, as `scipy.stats.spearmanr(x,
    y).statistic`: the Pearson correlation of their average ranks; NaN when a value is NaN or either
    sequence is constant."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(a) != len(b):
        raise ValueError(f"spearman: {len(a)} values against {len(b)}")
    if len(a) < 2 or np.isnan(a).any() or np.isnan(b).any():
        return math.nan
    ra, rb = _average_ranks(a), _average_ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    scale = math.sqrt(float(ra @ ra) * float(rb @ rb))
    return math.nan if scale == 0.0 else max(-1.0, min(1.0, float(ra @ rb) / scale))


def rungs_passed(
    groups: Mapping[tuple[int, int], tuple[int, ...]],
    book: RungRecords,
    old: Mapping[str, Sequence[Any]],
    threshold: float,
    pairs: int,
) -> dict[str, tuple[int, bool]]:
    """Per "search/bracket" of `groups` ((search id, bracket) -> its levels): (how many of the lowest
    rungs are passed over, whether that is decided), carried from `old` (last round's value under the
    same key, or nothing) and advanced on `book`'s records. A decided check, or one whose next rung has
    fewer than `pairs` trials recorded, is not re-read."""
    out: dict[str, tuple[int, bool]] = {}
    for (search_id, group), levels in groups.items():
        key = f"{search_id}/{group}"
        last = old.get(key)
        n, done = (int(last[0]), bool(last[1])) if last is not None else (0, False)
        while not done and n < len(levels) - 2:  # the last rung before max_steps has no next to agree with
            here, there = book.at(search_id, n, group), book.at(search_id, n + 1, group)
            if len(there) < pairs:
                break  # (as below, without a pass over the rung: the pairs are a subset of `there`)
            both = [tid for tid in here if tid in there]
            if len(both) < pairs:
                break  # not enough trials at both yet: judge at this rung meanwhile
            rho = spearman([here[t] for t in both], [there[t] for t in both])
            if math.isfinite(rho) and rho >= threshold:
                done = True  # this rung ranks as the next does: it judges from now on
            else:
                n += 1  # it does not: passed over, and the next rung is checked in turn
        out[key] = (n, done)
    return out
