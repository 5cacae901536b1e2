"""Population-based training (Jaderberg et al. 2017) as a pure policy.

The population is the search's alive trials (the book keeps `population` of them alive: the searcher's
first configurations, replaced only when one ends). They are time-sliced on the devices by stride
scheduling (`TimeslicePolicy`), and each placed trial parks itself at its next multiple of the interval
(`Plan.limits`). A trial that has reached interval j (its steps done at least j * interval, and j not
judged yet) is recorded with its last reported value at j, and ranked by it among every alive member's
last reported value (as Ray Tune's PBT ranks: among the members that reached j alone, only the last of
four to arrive could ever be in the bottom quarter, and a search of four exploited once in 10,000 steps
where Ray Tune's exploited every interval): when it is in the bottom `quantile` (at least one trial each
side: four members at 0.25), the
plan orders an exploit (`Plan.exploits`): it takes the state of a member of the top quantile, drawn at
random, with that member's mutable values explored, each perturbed by a factor of `perturb` (kept in the
space's bounds) or resampled from the space with probability `resample_p`. A trial being exploited is not
placed that round. A member of the top quantile at an interval is published (`Plan.publish`): its state there is kept
ready, so that an exploit of it before its next interval takes it at once rather than at its next
boundary. Draws come from a generator seeded by
(seed, search, trial, interval): the same snapshot plans the same.

A member whose exploit is done goes on from its source's step: it is judged next at the first interval
it reaches by its own training, not at the one the copied step lies in (that one is the source's, and a
member copied in the middle of an interval would otherwise exploit again before running a step under its
new values). The policy sees an exploit done when the member's mutable values change; one abandoned when
the member runs on from its own step with its values unchanged.

State (`Plan.state`): `judged[trial]` = the last interval judged, `scores["search:j"][trial]` = the value
each member had at interval j, `slice` = the time-slicing offsets, `exploiting[trial]` = [steps, values]
of a member when its exploit was ordered, until the policy sees it done or abandoned.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from quanta.executor.policy.knobs import JudgeKnobs, PbtKnobs, TimesliceKnobs
from quanta.executor.policy.timeslice import TimeslicePolicy
from quanta.executor.policy.types import ClusterSnapshot, MutableDim, Plan, SearchView, TrialView


def bounds(dim: MutableDim) -> tuple[float, float] | None:
    """The range a value of `dim` is kept in (None: unbounded, a normal)."""
    if dim.kind == "normal":
        return None
    return dim.args[0], dim.args[1]


def resample(dim: MutableDim, rng: random.Random) -> float:
    """A fresh draw of `dim` from its prior."""
    a = dim.args
    if dim.kind == "normal":
        return rng.gauss(a[0], a[1])
    if dim.kind == "randint":
        return float(rng.randint(int(a[0]), int(a[1])))
    if dim.kind in ("loguniform", "qloguniform"):
        return math.exp(rng.uniform(math.log(a[0]), math.log(a[1])))
    return rng.uniform(a[0], a[1])


def explore(
    dims: tuple[MutableDim, ...], values: Mapping[str, float], knobs: PbtKnobs, rng: random.Random
) -> dict[str, float]:
    """New values for `dims` from `values` (the source's): each resampled with probability
    `knobs.resample_p`, else multiplied by one of `knobs.perturb`; clipped to the dimension's range and
    rounded for `randint`. A dimension without a value in `values` is resampled."""
    out: dict[str, float] = {}
    for dim in dims:
        v = values.get(dim.name)
        fresh = v is None or rng.random() < knobs.resample_p
        new = resample(dim, rng) if fresh or v is None else v * rng.choice(knobs.perturb)
        b = bounds(dim)
        if b is not None:
            new = min(max(new, b[0]), b[1])
        if dim.kind == "randint":
            new = float(round(new))
        out[dim.name] = new
    return out


def _values(t: TrialView) -> list[list[Any]]:
    """The trial's mutable values as the policy state keeps them (JSON: pairs as lists)."""
    return [[name, value] for name, value in t.values]


def _better_first(goal: str) -> Any:
    """Sort key over (trial id, value): the best value first (NaN last), ties by trial id."""
    sign = -1.0 if goal == "maximize" else 1.0

    def key(item: tuple[str, float]) -> tuple[bool, float, int]:
        tid, v = item
        bad = v is None or math.isnan(v)
        return bad, 0.0 if bad else sign * v, int(tid)

    return key


class PbtPolicy:
    name = "pbt"
    Knobs = PbtKnobs
    judge_knobs: JudgeKnobs | None = None  # plans without verdicts

    def __init__(self, knobs: PbtKnobs | None = None):
        self.knobs = knobs or PbtKnobs()
        self._slice = TimeslicePolicy(TimesliceKnobs(quantum_s=self.knobs.quantum_s))

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        state = snapshot.policy_state
        judged: dict[str, int] = {k: int(v) for k, v in dict(state.get("judged", {})).items()}
        # Exploits ordered and not seen done yet: trial -> [its steps, its values] when ordered.
        pending: dict[str, list[Any]] = {k: list(v) for k, v in dict(state.get("exploiting", {})).items()}
        scores: dict[str, dict[str, float]] = {k: dict(v) for k, v in dict(state.get("scores", {})).items()}
        alive = snapshot.alive()
        by_id = {t.id: t for t in alive}
        exploits: dict[int, tuple[int, Mapping[str, float]]] = {}
        notes: list[str] = []
        # First record every trial that reached a new interval, then rank each of them among all recorded
        # there, so that members arriving in one round are ranked together.
        reached: list[tuple[TrialView, SearchView, int]] = []
        for t in alive:
            s = snapshot.search(t.search_id)
            if s is None or not t.curve:
                continue
            k = self.knobs.interval(s.max_steps)
            j = t.steps_done // k
            if (mark := pending.get(str(t.id))) is not None:
                if _values(t) != mark[1]:
                    # Its exploit is done: it goes on from the source's step, with the source's curve as its
                    # own. The interval that step lies in is the source's, judged already; the trial is
                    # judged next at the first interval it reaches by its own training. (Judged at once, a
                    # member copied from one in the middle of an interval would exploit again before it
                    # had run a step under its new values.)
                    judged[str(t.id)] = max(judged.get(str(t.id), 0), j)
                    del pending[str(t.id)]
                    continue
                if t.steps_done == mark[0]:
                    continue  # its exploit is under way
                del pending[str(t.id)]  # abandoned, and it ran on from its own state: judged as before
            if j <= judged.get(str(t.id), 0) or t.curve[-1][0] <= (j - 1) * k:
                continue  # no new interval, or no report in it yet
            judged[str(t.id)] = j
            scores.setdefault(f"{s.id}:{j}", {})[str(t.id)] = t.curve[-1][1]
            reached.append((t, s, j))
        latest: dict[int, dict[str, float]] = {}  # per search: each alive member's last reported value
        for t in alive:
            if t.curve:
                latest.setdefault(t.search_id, {})[str(t.id)] = t.curve[-1][1]
        publish: list[int] = []
        for t, s, j in reached:
            if t.max_steps and t.steps_done >= t.max_steps:
                continue  # done: nothing to exploit for, nor to give
            chosen = self._exploit(t, j, s, latest[s.id], by_id)
            if chosen is not None:
                exploits[t.id] = chosen
                pending[str(t.id)] = [t.steps_done, _values(t)]
                notes.append(f"pbt: trial {t.id} exploits trial {chosen[0]} at interval {j}: {chosen[1]}")
            elif self._may_give(t, s, latest[s.id]):
                publish.append(t.id)
        # The others are time-sliced; a trial being exploited waits for its new state.
        rest = tuple(t for t in alive if t.id not in exploits)
        sub = replace(
            snapshot,
            trials=rest,
            policy_state=dict(state.get("slice", {})),
            in_arrival_order=True,
            resident_trials=None,
        )
        sliced = self._slice.plan(sub)
        limits: dict[int, int] = {}
        for tid in sliced.running():
            t = by_id[tid]
            s = snapshot.search(t.search_id)
            if s is None:
                continue
            k = self.knobs.interval(s.max_steps)
            nxt = (t.steps_done // k + 1) * k
            if not t.max_steps or nxt < t.max_steps:
                limits[tid] = nxt
        return Plan(
            placement=sliced.placement,
            state={"judged": judged, "scores": scores, "slice": dict(sliced.state), "exploiting": pending},
            notes=tuple(notes),
            limits=limits,
            exploits=exploits,
            publish=tuple(publish),
        )

    def _may_give(self, t: TrialView, s: SearchView, recs: Mapping[str, float]) -> bool:
        """Whether trial `t`, at an interval it just reached, is in the top quantile of `recs`: a member of
        the bottom may take its state before `t` reaches its next interval (one short of this interval
        now, or any at its next one, which takes the state from the start of `t`'s current interval on),
        so it is kept ready (`Plan.publish`) and that exploit need not wait for `t`'s next boundary."""
        ranked = sorted(recs.items(), key=_better_first(s.goal))
        cut = int(len(ranked) * self.knobs.quantile)
        return cut >= 1 and bool(s.mutable) and str(t.id) in {tid for tid, _ in ranked[:cut]}

    def _exploit(
        self, t: TrialView, j: int, s: SearchView, recs: Mapping[str, float], by_id: Mapping[int, TrialView]
    ) -> tuple[int, dict[str, float]] | None:
        """(source, new values) when trial `t`, at interval `j`, is in the bottom quantile of `recs` (the
        members' last reported values) and an alive member of the top quantile can give it its state; else
        None."""
        ranked = sorted(recs.items(), key=_better_first(s.goal))
        cut = int(len(ranked) * self.knobs.quantile)
        if cut < 1 or str(t.id) not in {tid for tid, _ in ranked[-cut:]}:
            return None
        top = [by_id[int(tid)] for tid, _ in ranked[:cut] if int(tid) in by_id and int(tid) != t.id]
        if not top or not s.mutable:
            return None
        rng = random.Random(f"{self.knobs.seed}:{s.id}:{t.id}:{j}")
        source = rng.choice(top)
        return source.id, explore(s.mutable, dict(source.values), self.knobs, rng)
