"""The share layer's allotment (step 2 of `quanta.executor.policy.share`): a group (what one policy plans
for) and the snapshot's trials grouped (`groups_of`), weighted max-min fair division of the devices
between users and a user's groups, and whole devices out of the fractional shares.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from quanta.executor.policy.types import ClusterSnapshot, TrialView

__all__ = ["Group", "bounded_shares", "fair_shares", "groups_of", "water_fill", "whole_devices"]

_SEARCH_ID = attrgetter("search_id")


@dataclass(frozen=True)
class Group:
    """The trials one policy plans for: `key` (``s<search id>`` or ``u<owner>``), its user, its search
    (0 for trace jobs) and its alive trials in arrival order."""

    key: str
    user: str
    search_id: int
    trials: tuple[TrialView, ...]


def groups_of(snapshot: ClusterSnapshot) -> list[Group]:
    """The snapshot's alive trials grouped by search (trace jobs by owner), groups ordered by key."""
    searches = {s.id: s for s in snapshot.searches}
    alive = snapshot.alive()
    if alive and len(ids := set(map(_SEARCH_ID, alive))) == 1 and (sid := next(iter(ids))):
        # One search's trials only (the usual case): one group, found in C rather than a Python pass.
        s = searches.get(sid)
        return [Group(f"s{sid}", s.owner if s is not None else alive[0].owner, sid, tuple(alive))]
    by_search: dict[int, list[TrialView]] = {}  # a search's trials (its owner is the search's)
    by_owner: dict[str, list[TrialView]] = {}  # trace jobs, by owner
    owner_of: dict[int, str] = {}  # a search's owner, as its first trial here says when it is not running
    for t in alive:  # every alive trial, every round: one dict lookup each
        if t.search_id:
            mine = by_search.get(t.search_id)
            if mine is None:
                mine = by_search[t.search_id] = []
                s = searches.get(t.search_id)
                owner_of[t.search_id] = s.owner if s is not None else t.owner
            mine.append(t)
        else:
            by_owner.setdefault(t.owner, []).append(t)
    groups = [Group(f"s{sid}", owner_of[sid], sid, tuple(ts)) for sid, ts in by_search.items()]
    groups += [Group(f"u{owner}", owner, 0, tuple(ts)) for owner, ts in by_owner.items()]
    return sorted(groups, key=lambda g: g.key)


def water_fill(total: float, weights: Mapping[str, float], caps: Mapping[str, float]) -> dict[str, float]:
    """Weighted max-min fair division of `total` among keys capped at `caps`: each key gets `total`
    in proportion to its weight, a key whose cap is below that gets its cap and the rest is divided
    again among the others. Keys with cap or weight 0 get 0."""
    out = dict.fromkeys(weights, 0.0)
    active = sorted(k for k in weights if caps.get(k, 0) > 0 and weights[k] > 0)
    left = float(total)
    while active and left > 1e-12:
        wsum = sum(weights[k] for k in active)
        full = [k for k in active if caps[k] - out[k] <= left * weights[k] / wsum + 1e-12]
        if not full:
            for k in active:
                out[k] += left * weights[k] / wsum
            break
        for k in full:
            left -= caps[k] - out[k]
            out[k] = float(caps[k])
        active = [k for k in active if k not in full]
    return out


def fair_shares(
    n_dev: int, groups: Sequence[Group], weights: Mapping[str, float], demand: Mapping[str, int]
) -> dict[str, float]:
    """Each group's fractional share of `n_dev` devices: users by weight, a user's groups equally,
    both water-filled by demand (work-conserving)."""
    by_user: dict[str, list[Group]] = {}
    for g in groups:
        by_user.setdefault(g.user, []).append(g)
    user_cap = {u: float(sum(demand[g.key] for g in gs)) for u, gs in by_user.items()}
    user_share = water_fill(n_dev, {u: weights[u] for u in by_user}, user_cap)
    out: dict[str, float] = {}
    for u, gs in by_user.items():
        equal = dict.fromkeys((g.key for g in gs), 1.0)
        out.update(water_fill(user_share[u], equal, {g.key: demand[g.key] for g in gs}))
    return out


def bounded_shares(
    n_dev: int,
    groups: Sequence[Group],
    weights: Mapping[str, float],
    demand: Mapping[str, int],
    protected: set[str],
) -> dict[str, float]:
    """Fair shares as a floor for the `protected` users only (Themis's fairness knob): each protected
    user's groups first get what `fair_shares` gives them with every user competing; the devices left
    are divided among all groups in proportion to the demand each has left, as one policy that
    time-slices every trial alike would divide them. Every user protected: `fair_shares`; none: a
    division by demand."""
    fair = fair_shares(n_dev, groups, weights, demand)
    floor = {g.key: (fair[g.key] if g.user in protected else 0.0) for g in groups}
    rest = {k: max(float(demand[k]) - f, 0.0) for k, f in floor.items()}
    extra = water_fill(n_dev - sum(floor.values()), rest, rest)
    return {k: f + extra.get(k, 0.0) for k, f in floor.items()}


def whole_devices(
    n_dev: int,
    groups: Sequence[Group],
    fair: Mapping[str, float],
    demand: Mapping[str, int],
    behind: Mapping[str, float],
) -> dict[str, int]:
    """Whole devices per group: the floor of its share, then the devices left one at a time to the
    groups wanting more (user furthest behind first, then largest fractional part, then key), then
    what nobody wants to the groups in that order too."""
    allot = {g.key: int(math.floor(fair[g.key] + 1e-9)) for g in groups}
    left = n_dev - sum(allot.values())
    order = sorted(groups, key=lambda g: (-behind.get(g.user, 0.0), -(fair[g.key] - allot[g.key]), g.key))
    for wanting in (True, False):
        while left > 0:
            took = False
            for g in order:
                if left > 0 and (not wanting or allot[g.key] < demand[g.key]):
                    allot[g.key] += 1
                    left -= 1
                    took = True
            if not took:
                break
    return allot
