"""The rules of one ASHA round, one small function each, over the round's working values (`Round`).
`AshaPolicy.plan` applies them in this order:

1. `decide_at_rungs`: a trial that reported past the rung it was allowed to run to goes on (kill mode:
   at or below the rung's cut-off), is stopped (kill mode, below it) or is held there (pause mode).
2. `promotion_bar` (with `candidates`): Li et al.'s promotion: a held trial in the top floor(n / eta)
   of its rung goes on to the next one, before any new trial starts.
3. `rent_paid` (`rule: rent`): the best held trial of a rung with fewer than eta recorded goes on once it
   has waited as long as its next rung costs the cluster; it goes before rule 2's promotions.
4. `idle_runs`: work conservation: a device nothing else wants runs a held trial of a search that will
   create no more trials, one rung on: the best of the lowest rung (`tail_order: lowest`, the default), or
   of the highest (`tail_order: highest`).

`promote` places the trials rules 2-4 send on, highest rung first (rule 4: as `tail_order` says), while
devices are free.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from quanta.executor.policy.asha.held import HeldSet, Where
from quanta.executor.policy.knobs import AshaKnobs
from quanta.executor.policy.placement.board import Board
from quanta.executor.policy.types import ClusterSnapshot, SearchView, TrialView
from quanta.search.fidelity import RungRecords, cutoff_sorted

# A held trial as the rules see it: (the index of the rung it is held at, its loss there, its view).
HeldTrial = tuple[int, float, TrialView]
# A trial decided this round: (its view, its search, its rungs in steps, its bracket).
Decided = tuple[TrialView, SearchView, tuple[int, ...], int]


@dataclass
class Round:
    """One round's working values (never outlive `AshaPolicy.plan`): what the rules read and add to."""

    knobs: AshaKnobs
    snapshot: ClusterSnapshot
    searches: Mapping[int, SearchView]
    book: RungRecords  # every trial's loss at each rung it passed, this round's included
    levels: Callable[[TrialView, SearchView | None], tuple[int, ...]]  # a trial's rungs (`AshaPolicy.levels`)
    allowed: dict[str, int]  # per trial, the index of the rung it may run to
    board: Board
    stop: list[int] = field(default_factory=list)
    reasons: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    held: list[HeldTrial] = field(default_factory=list)  # held this round and not last
    held_levels: list[tuple[tuple[int, ...], int]] = field(default_factory=list)  # beside `held`: (levels, bracket)
    movers: list[TrialView] = field(default_factory=list)  # to keep running or to start, in arrival order
    limits: dict[int, int] = field(default_factory=dict)  # the step each placed trial parks itself at
    placed_held: set[int] = field(default_factory=set)  # held trials sent on this round


# ---- rule 1: at the rung a trial was allowed to run to ------------------------------------------------


def decide_at_rungs(
    r: Round, decided: Sequence[Decided], old_allowed: Mapping[str, int], passed: Mapping[str, Sequence[int]]
) -> None:
    """Each trial of `decided` at the rung it was allowed to run to (later where `passed`, rung_check's
    rungs passed over per "search/bracket", says its lowest rungs are not waited at): while it has reported
    past that rung, kill mode lets it go on when its loss is at or below the rung's cut-off (the `100 /
    eta` percentile of the losses recorded there, itself included) and stops it otherwise; pause mode holds
    it there. A trial not stopped or held moves on, to park itself at its (next) rung."""
    k = r.knobs
    for t, search, levels, group in decided:
        tid = str(t.id)
        rung = int(old_allowed.get(tid, 0))
        if passed:  # rung_check: rungs passed over are not waited at
            rung = max(rung, passed.get(f"{search.id}/{group}", (0, False))[0])
        settled = False  # stopped or held at its rung
        while rung < len(levels) - 1:
            recorded = r.book.at(search.id, rung, group)
            value = recorded.get(tid)
            if value is None:
                break  # not reported past its rung yet: it goes on (its limit parks it there)
            if k.mode == "kill":
                if value <= cutoff_sorted(r.book.ranked(search.id, rung, group), k.eta):
                    rung += 1
                    continue
                r.stop.append(t.id)
                r.reasons[t.id] = (
                    f"below the top 1/{k.eta:g} of rung {levels[rung]} steps "
                    f"(loss {value:.4g}; {len(recorded)} trials there)"
                )
                r.notes.append(f"asha: stop {t.id}: {r.reasons[t.id]}")
            else:
                r.held.append((rung, value, t))
                r.held_levels.append((levels, group))
            settled = True
            break
        r.allowed[tid] = rung
        if not settled:
            r.movers.append(t)
            r.limits[t.id] = levels[rung]


# ---- rules 2 and 3: which held trials go on --------------------------------------------------------------


def promotion_bar(ranked: Sequence[float], eta: float) -> float:
    """Rule 2: the largest loss a held trial of a rung with these sorted losses (not empty) may have to be
    promoted: Li et al.'s test (in the top 1/eta, `fidelity.in_top_sorted`: fewer than floor(n / eta)
    strictly better, i.e. at or below the floor(n / eta)-th loss). One bar per rung and round, then one
    comparison per held trial (held trials are every round's bulk)."""
    top = math.floor(len(ranked) / eta)
    return ranked[top - 1] if top > 0 else -math.inf


def thin_bar(ranked: Sequence[float], eta: float) -> float:
    """Rule 3's candidates: the loss of the best held trial of a rung with fewer than eta recorded (one rank
    promotion cannot promote from yet); -inf when the rung has eta or more."""
    return ranked[0] if len(ranked) < eta else -math.inf


def candidates(r: Round, again: HeldSet) -> tuple[list[HeldTrial], list[HeldTrial]]:
    """The held trials rule 2 promotes (`due`) and those only rule 3 may send on (`thin`, under `rule:
    rent`): first this round's held ones in order, then, of the trials held again (`again`, sorted per
    rung), only the front of each rung."""
    k = r.knobs
    rent = k.rule == "rent"
    bars: dict[Where, tuple[float, float]] = {}  # per rung: (promotion bar, thin bar)

    def bar_of(where: Where) -> tuple[float, float]:
        bar = bars.get(where)
        if bar is None:
            ranked = r.book.ranked(*where)
            bar = bars[where] = (promotion_bar(ranked, k.eta), thin_bar(ranked, k.eta) if rent else -math.inf)
        return bar

    due: list[HeldTrial] = []
    thin: list[HeldTrial] = []
    for h in r.held:
        rung, value, t = h
        bar = bar_of((t.search_id, rung, t.id % k.brackets))
        if value <= bar[0]:
            due.append(h)
        elif value <= bar[1]:
            thin.append(h)
    for where in again.rungs():
        bar = bar_of(where)
        for a in again.best(where, max(bar)):
            (due if a.loss <= bar[0] else thin).append((a.rung, a.loss, a.view))
    return due, thin


def held_since(
    thin: Iterable[HeldTrial], old: Mapping[str, Sequence[float]], now: float
) -> dict[int, tuple[int, float]]:
    """Rule 3's clock, per trial of `thin`: (rung, since when it has been held at that rung as the rung's
    best), carried over from last round's state while that lasts, else now."""
    out: dict[int, tuple[int, float]] = {}
    for rung, _value, t in thin:
        last = old.get(str(t.id))
        out[t.id] = (rung, float(last[1])) if last is not None and int(last[0]) == rung else (rung, now)
    return out


def rent_paid(r: Round, h: HeldTrial, since: Mapping[int, tuple[int, float]]) -> bool:
    """Rule 3 (`rule: rent`): whether the best of a thin rung (fewer than eta records) has waited there as
    long as its next rung would cost the cluster: its device time from this rung to the next (at its own
    measured seconds per step) divided by the devices planned over.

    Why (ski rental): waiting costs the search the delay when the trial is the eventual winner; going on
    costs that device time when it is not. Waiting as long as going on would cost bounds either loss at
    twice the better choice's, where textbook promotion waits for eta - 1 more trials to climb that high,
    unbounded (on the longer MNIST-1D workload the winner waited 7-66 s at one rung), and the stopping
    rule sends on whatever arrives first (costly at LCBench's hard target)."""
    rung, _value, t = h
    snapshot = r.snapshot
    levels = r.levels(t, snapshot.search(t.search_id))
    if t.steps_done > 0 and t.device_seconds > 0:
        per_step = t.device_seconds / t.steps_done
    elif t.rate_solo:
        per_step = 1.0 / t.rate_solo
    else:
        return False  # no measure of its cost yet
    cost = per_step * (levels[rung + 1] - levels[rung]) / max(1, len(snapshot.devices) // max(1, t.devices_needed))
    return snapshot.now - since[t.id][1] >= cost


# ---- rule 4: a device nothing else wants -----------------------------------------------------------------


def idle_runs(r: Round, again: HeldSet) -> Iterator[HeldTrial]:
    """Rule 4, once the promotions and new trials are placed: the held trials (this round's and those held
    again) not sent on yet, of searches that will create no more trials, for the devices still free (a
    search that will create more gets a new configuration there as soon as the controller has made it:
    the hold freed room in its parallelism). Nothing when no device is free or every search will go on."""
    if r.board.n_free == 0 or all(s.more_trials for s in r.snapshot.searches):
        return
    every = [*r.held, *((a.rung, a.loss, a.view) for a in again.entries.values())]
    yield from (h for h in every if h[2].id not in r.placed_held and not r.searches[h[2].search_id].more_trials)


# ---- placing ---------------------------------------------------------------------------------------------


def place(board: Board, t: TrialView) -> bool:
    """Put `t` on the devices the board chooses for it; False when none fit."""
    devices = board.choose(t)
    if devices is None:
        return False
    board.put(t.id, devices)
    return True


def promote(r: Round, sent_on: Iterable[HeldTrial], why: str, lowest_first: bool = False) -> None:
    """Place held trials in order (highest rung, or with `lowest_first` the lowest, then best, then oldest)
    while devices are free; each goes on to its next rung."""
    sign = 1 if lowest_first else -1
    for rung, value, t in sorted(sent_on, key=lambda h: (sign * h[0], h[1], h[2].arrival, h[2].id)):
        if r.board.n_free == 0:
            return
        if place(r.board, t):
            r.placed_held.add(t.id)
            r.allowed[str(t.id)] = rung + 1
            r.limits[t.id] = r.levels(t, r.searches.get(t.search_id))[rung + 1]
            r.notes.append(f"asha: {why} {t.id} past rung {rung} (loss {value:.4g})")


def start_new(r: Round) -> None:
    """New trials (and trials released from host memory) start in arrival order on the devices left."""
    for t in r.movers:
        if not t.running and r.board.n_free > 0:
            place(r.board, t)
