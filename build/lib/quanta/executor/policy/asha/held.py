"""`HeldSet`: the trials an `AshaPolicy` left held at their rungs last round, kept so that a round costs
little per held trial (memo, not state: nothing here is needed to plan correctly).

In a long successive-halving search most alive trials are held at a rung, and most of them stay there
for the rest of the search; a round that looked at each one (re-deciding it, testing it against its
rung's bar, summing its memory) was O(held trials) of Python, the bulk of a simulated search's time. A
held trial whose view is the very same object this round (the controller's snapshot reuses the views of
trials nothing happened to) is held again at the same rung with the same loss, and only a promotion
moves it. So this set keeps, per rung, its held trials sorted by loss: the promotion test reads only the
front of each rung, and finding the trials whose view changed is a set difference over object ids.

Contract: `entries` are exactly the trials held last round and not promoted; `split(alive)` returns the
alive trials that are not held again (their view changed, or they were never held) in `alive`'s order,
and drops from the set the held trials whose view is no longer in `alive`. The objects in `entries` are
referenced here, so the ids compared stay theirs while they are kept.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import not_

from quanta.executor.policy.types import TrialView

Where = tuple[int, int, int]  # (search id, rung index, bracket)


@dataclass(frozen=True, slots=True)
class Held:
    """One held trial: its view when it was held, the rung it waits at and its loss there."""

    view: TrialView
    rung: int
    loss: float
    levels: tuple[int, ...]
    group: int  # its bracket

    @property
    def where(self) -> Where:
        return (self.view.search_id, self.rung, self.group)

    def order(self) -> tuple[float, float, int]:
        """Its place among the held trials of its rung: best loss first, then arrival, then id (the order
        in which promotion considers them)."""
        return (self.loss, self.view.arrival, self.view.id)


class HeldSet:
    """See the module docstring."""

    def __init__(self) -> None:
        self.entries: dict[int, Held] = {}  # trial id -> entry
        self.allowed: dict[str, int] = {}  # "<trial id>" -> the rung it was allowed to (held there)
        self._objs: dict[int, int] = {}  # id(view) -> trial id
        self._rungs: dict[Where, list[tuple[float, float, int]]] = {}  # per rung, `Held.order()` sorted
        self._groups: dict[tuple[int, int], int] = {}  # (search, bracket) -> trials held there
        self._levels: dict[tuple[int, int], tuple[int, ...]] = {}  # (search, bracket) -> its first held's levels
        self.memory: dict[int, float] = {}  # trial id -> memory_mb of the resident ones

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def add(self, h: Held) -> None:
        tid = h.view.id
        if tid in self.entries:
            self.remove(tid)
        self.entries[tid] = h
        self.allowed[str(tid)] = h.rung
        self._objs[id(h.view)] = tid
        bisect.insort(self._rungs.setdefault(h.where, []), h.order())
        group = (h.view.search_id, h.group)
        self._groups[group] = self._groups.get(group, 0) + 1
        self._levels.setdefault(group, h.levels)
        if h.view.devices and h.view.memory_mb:
            self.memory[tid] = h.view.memory_mb

    def remove(self, tid: int) -> None:
        h = self.entries.pop(tid)
        del self.allowed[str(tid)]
        del self._objs[id(h.view)]
        at = self._rungs[h.where]
        del at[bisect.bisect_left(at, h.order())]
        if not at:
            del self._rungs[h.where]
        group = (h.view.search_id, h.group)
        self._groups[group] -= 1
        if self._groups[group] == 0:
            del self._groups[group], self._levels[group]
        self.memory.pop(tid, None)

    def split(self, alive: Sequence[TrialView]) -> list[TrialView]:
        """The trials of `alive` not held again, in its order; held trials whose view is not in `alive`
        (it changed, or the trial ended) leave the set."""
        objs = self._objs
        if not objs:
            return list(alive)
        # C-level passes (a Python loop here was a tenth of a long search's rounds).
        others = list(compress(alive, map(not_, map(objs.__contains__, map(id, alive)))))
        if len(alive) - len(others) != len(objs):
            for gone in objs.keys() - set(map(id, alive)):
                self.remove(objs[gone])
        return others

    def searches(self) -> set[int]:
        return {sid for sid, _group in self._groups}

    def groups(self) -> Iterator[tuple[tuple[int, int], tuple[int, ...]]]:
        """((search, bracket), levels) of the held trials' groups."""
        return iter(self._levels.items())

    def rungs(self) -> Iterator[Where]:
        return iter(self._rungs)

    def best(self, where: Where, bar: float) -> Iterator[Held]:
        """The held trials of that rung whose loss is at or below `bar`, best first."""
        for loss, _arrival, tid in self._rungs[where]:
            if loss > bar:
                return
            yield self.entries[tid]

    def release(self, held: Sequence[tuple[int, float, TrialView]], placed: set[int], budget: float) -> tuple[int, ...]:
        """Held trials to checkpoint and free, lowest-ranked first, while the resident ones (`held`, the
        (rung, loss, trial) held this round but not last, and this set's) use more than `budget` MB;
        `placed` ones are not counted. 0 = no limit."""
        if budget <= 0:
            return ()
        used = math.fsum(
            [
                *self.memory.values(),
                *(-self.memory.get(tid, 0.0) for tid in placed),
                *(m for _r, _v, t in held if (m := t.memory_mb) and t.devices and t.id not in placed),
            ]
        )
        if used <= budget:
            return ()  # within the budget: nothing to rank
        every = [*held, *((h.rung, h.loss, h.view) for h in self.entries.values())]
        resident = [h for h in every if h[2].devices and h[2].id not in placed]
        out: list[int] = []
        # Lowest rung first, then worst value: the trials least likely ever to be promoted.
        for _rung, _value, t in sorted(resident, key=lambda h: (h[0], -h[1], -h[2].arrival, -h[2].id)):
            if used <= budget:
                break
            out.append(t.id)
            used -= t.memory_mb or 0.0
        return tuple(out)
