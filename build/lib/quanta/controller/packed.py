"""`PackedRates`: the latest measured rate of each trial while it shared a device with another.

Contract: `record(a, b, rate)` stores a's rate when packed with b and returns the pair's two rates
(lower id first) once both directions are known; `among(ids)` gives the pairs whose both trials are in
`ids` as {(a, b): (rate_a, rate_b)} with a < b; `forget(trial)` drops every pair a finished trial was in.
"""

from __future__ import annotations

from collections.abc import Container


class PackedRates:
    def __init__(self) -> None:
        self._latest: dict[tuple[int, int], float] = {}  # (trial, packed with) -> its rate
        self._keys: dict[int, set[tuple[int, int]]] = {}  # trial -> its keys in _latest

    def record(self, trial_id: int, other: int, rate: float) -> tuple[int, int, float, float] | None:
        self._latest[(trial_id, other)] = rate
        self._keys.setdefault(trial_id, set()).add((trial_id, other))
        self._keys.setdefault(other, set()).add((trial_id, other))
        if (other, trial_id) not in self._latest:
            return None
        a, b = sorted((trial_id, other))
        return a, b, self._latest[(a, b)], self._latest[(b, a)]

    def forget(self, trial_id: int) -> None:
        for k in self._keys.pop(trial_id, ()):
            self._latest.pop(k, None)

    def among(self, ids: Container[int]) -> dict[tuple[int, int], tuple[float, float]]:
        latest = self._latest
        return {
            k: (latest[k], latest[(k[1], k[0])])
            for k in latest
            if k[0] < k[1] and (k[1], k[0]) in latest and k[0] in ids and k[1] in ids
        }
