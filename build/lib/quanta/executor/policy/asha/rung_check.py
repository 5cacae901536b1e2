"""Which of a (search, bracket)'s lowest rungs ASHA passes over: `rung_check` (see `quanta.executor.policy.asha`).

A rung judges only while it ranks trials as the next rung does. Once `pairs` trials are recorded at both,
a rung whose Spearman correlation with the next is below `threshold` is passed over for the rest of the
search (its trials go on rather than wait there) and the next rung is checked in turn; one that
correlates at or above it judges from then on and the check is decided. The last rung before the full
budget has no next rung to agree with and always judges.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from quanta.search.fidelity import RungRecords

__all__ = ["rungs_passed"]


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
            # Imported here, not at the top: scipy.stats costs a cold `quanta run` half a second before its
            # first trial can start, and no rung is checked that early.
            from scipy.stats import spearmanr

            rho = spearmanr([here[t] for t in both], [there[t] for t in both]).statistic
            if math.isfinite(rho) and rho >= threshold:
                done = True  # this rung ranks as the next does: it judges from now on
            else:
                n += 1  # it does not: passed over, and the next rung is checked in turn
        out[key] = (n, done)
    return out
