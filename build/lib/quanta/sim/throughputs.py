"""Measured throughputs (Gavel's `simulation_throughputs.json`): how many mini-batches per second a
job type runs alone and beside another job on one device, per device kind.

Layout of the file: ``{kind: {"('<job_type>', <scale_factor>)": {"null": solo, "('<other>', <sf>)":
[rate of this job, rate of the other]}}}``; ``<kind>_unconsolidated`` holds the rates of multi-device
jobs spread across servers. A pair of ``[0.0, 0.0]`` means the pair was not measured as feasible
(every multi-GPU pair is like that): we treat it as unmeasured.

Modelling choices (the table does not cover everything the traces ask for):
- a (job type, scale factor) the table lacks (e.g. 16 or 32 GPUs, or CycleGAN on 4) runs at the rate of
  the largest measured scale factor below it (the extra devices are held but add no speed);
- an unmeasured pair shares the device by plain time-sharing: each runs at `unmeasured_pair_factor`
  (0.5) of its solo rate, so packing it neither helps nor hurts in aggregate;
- jobs with an explicit rate (the Tiresias toy trace gives iterations and duration, no job type the table
  knows) run at that rate alone, at `spread_factor` of it when spread across servers.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

Key = tuple[str, int]


@dataclass
class Throughputs:
    """Solo and pair rates by device kind. `solo()` and `pair()` answer for any (type, scale factor)."""

    solo_rates: dict[str, dict[Key, float]] = field(default_factory=dict)
    pair_rates: dict[str, dict[Key, dict[Key, tuple[float, float]]]] = field(default_factory=dict)
    unmeasured_pair_factor: float = 0.5
    spread_factor: float = 0.8

    @classmethod
    def load(cls, path: str | Path) -> Throughputs:
        return _load_cached(str(Path(path).resolve()))

    def kinds(self) -> list[str]:
        return sorted(k for k in self.solo_rates if not k.endswith("_unconsolidated"))

    def knows(self, job_type: str, kind: str = "v100") -> bool:
        return any(jt == job_type for jt, _ in self.solo_rates.get(kind, {}))

    def resolve(self, job_type: str, scale_factor: int, kind: str = "v100") -> Key | None:
        """The table key that stands for (job_type, scale_factor): itself, or the largest measured
        scale factor below it (the smallest above it if none is below). None if the type is unknown."""
        return _resolve(self, job_type, scale_factor, kind)

    def solo(self, job_type: str, scale_factor: int, kind: str = "v100", consolidated: bool = True) -> float | None:
        key = self.resolve(job_type, scale_factor, kind)
        if key is None:
            return None
        table = self.solo_rates.get(kind if consolidated else f"{kind}_unconsolidated") or self.solo_rates[kind]
        rate = table.get(key) or self.solo_rates[kind][key]
        return rate

    def pair(self, a: Key, b: Key, kind: str = "v100") -> tuple[float, float] | None:
        """(rate of a, rate of b) when a and b share one device, measured; None when unmeasured."""
        ka, kb = self.resolve(*a, kind), self.resolve(*b, kind)
        if ka is None or kb is None:
            return None
        got = self.pair_rates.get(kind, {}).get(ka, {}).get(kb)
        if got is None or got[0] <= 0 or got[1] <= 0:
            return None
        return got


@lru_cache(maxsize=8)
def _load_cached(path: str) -> Throughputs:
    raw = json.loads(Path(path).read_text())
    solo: dict[str, dict[Key, float]] = {}
    pairs: dict[str, dict[Key, dict[Key, tuple[float, float]]]] = {}
    for kind, rows in raw.items():
        solo[kind] = {}
        pairs[kind] = {}
        for key, row in rows.items():
            k = _key(key)
            solo[kind][k] = float(row["null"])
            pairs[kind][k] = {_key(other): (float(r[0]), float(r[1])) for other, r in row.items() if other != "null"}
    return Throughputs(solo, pairs)


def _key(text: str) -> Key:
    job_type, sf = ast.literal_eval(text)
    return str(job_type), int(sf)


_RESOLVED: dict[tuple[int, str, int, str], Key | None] = {}


def _resolve(t: Throughputs, job_type: str, scale_factor: int, kind: str) -> Key | None:
    memo = (id(t), job_type, scale_factor, kind)
    if memo in _RESOLVED:
        return _RESOLVED[memo]
    table = t.solo_rates.get(kind, {})
    if (job_type, scale_factor) in table:
        out: Key | None = (job_type, scale_factor)
    else:
        have = sorted(sf for jt, sf in table if jt == job_type)
        below = [sf for sf in have if sf <= scale_factor]
        out = (job_type, below[-1] if below else have[0]) if have else None
    _RESOLVED[memo] = out
    return out
