"""Freeze-thaw: every freed device goes to the trial, parked or new, whose next increment buys the most
chance of reaching the target per device-second.

Quanta parks a trial in host memory at a mini-batch boundary for almost nothing, so "run trial i for one
more increment" is a cheap action, and a search can be a sequence of such choices (Swersky et al. 2014's
freeze-thaw; DyHPO, ifBO). Each search's curves feed one `quanta.search.curve_model.CurveModel`; a trial runs
from one level of the model's grid to the next (`Plan.limits` parks it there), and at each decision the
policy ranks every trial not running, and a configuration not started yet, by an *index*:

    index = max over a commitment h and a bar theta of
            P(reach the target by level h, going on past the next level only if its score there >= theta)
            / E[device-seconds spent on it]

the chance of success per expected cost when the trial runs to its next level, is looked at there, and
is then either given up or carried on to level h (one look ahead, Gittins-style: it values what the next
level will tell, which is why a configuration nobody has tried may beat a mediocre trial that is further
along). For a trial, the next level's score is Gaussian (the model's step), integrated over with
Gauss-Hermite nodes; for a configuration not started yet, the nodes are the first-level scores recent
trials showed (`CurveModel.newcomers`). The target is the search's; a search without one uses the best
score shown so far (chance of beating the incumbent). Costs are each trial's measured device-seconds per
step (a trial not measured yet: the median of its search's).

Devices go by index, highest first; running trials run on to their next level (never preempted). Parked
trials are held (`Plan.hold`: they do not count against the search's parallelism, so new configurations
keep coming) and, past `memory_budget_mb` of host memory, the lowest-ranked are released (checkpointed and
freed). No trial waits for others to reach its level. Once its search will create no more trials, a trial
whose chance of ever reaching the target is below `give_up_p` is stopped, but never the search's best
trial, whatever the fits say. Before any trial has shown its first level, new configurations go first.

A search with several objectives or constraints is ranked by expected hypervolume improvement per
device-second instead (`freeze_thaw_pareto`); its trials are never given up on (no chance to reach a point
target is computed), and its feasible front is kept in the state (`fronts`).

State (JSON): per search, each trial's scores at the levels it has passed (`CurveModel.dump`), so that a
restarted controller rebuilds the same model. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray

from quanta.executor.policy import freeze_thaw_pareto
from quanta.executor.policy.knobs import FreezeThawKnobs, JudgeKnobs
from quanta.executor.policy.placement import Board
from quanta.executor.policy.types import ClusterSnapshot, Plan, SearchView, TrialView
from quanta.search.curve_model import FIRST_FRACTION, LOCAL_PAIRS, CurveModel, infer_unit, levels_for, score

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(16)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()  # a standard normal's nodes and weights
_ARRIVAL = attrgetter("arrival", "id")
EXPLORE_EVERY = 8  # one trial in this many goes on past each level to show the model what follows


def _sampled(trial_id: int, level: int) -> bool:
    """Whether the trial is one of the few that go on past `level` regardless (a fixed hash: the same
    answer in every round and after a restart)."""
    return EXPLORE_EVERY > 0 and ((trial_id * 2654435761 + level * 40503) & 0xFFFFFFFF) % EXPLORE_EVERY == 0


@dataclass
class _Search:
    """One search's model, what the policy knows of its trials' costs, and memos: each trial's curve
    length when it was last recorded, and its last index with what it was computed from."""

    model: CurveModel
    cost_per_step: float = 1.0  # median device-seconds per step of its measured trials
    seen: dict[int, int] = field(default_factory=dict)
    noted: int = -1  # the first transition's pair count when the plan last noted the model leans on its prior
    cached: dict[int, tuple[tuple[Any, ...], float, float]] = field(default_factory=dict)


class FreezeThawPolicy:
    """`plan(snapshot)`; see the module docstring."""

    name = "freeze_thaw"
    Knobs = FreezeThawKnobs
    judge_knobs: JudgeKnobs | None = None  # it reads its own model, not the judge's verdicts

    def __init__(self, knobs: FreezeThawKnobs | None = None):
        self.knobs = knobs or FreezeThawKnobs()
        # Memo, not state: each search's model as built from the state this policy handed out last round
        # (rebuilt from the state when the incoming one is not that object, e.g. after a restart).
        self._models: dict[int, _Search] = {}
        self._state_out: Mapping[str, Any] | None = None

    # ---- the round -------------------------------------------------------------------------------

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        k = self.knobs
        carried = snapshot.policy_state.get("scores") is self._state_out
        if not carried:
            self._models = {}
        stored: Mapping[str, Any] = snapshot.policy_state.get("scores", {})
        searches = {s.id: s for s in snapshot.searches}
        alive = snapshot.alive()
        by_search: dict[int, list[TrialView]] = {}
        others: list[TrialView] = []
        for t in alive:
            (by_search.setdefault(t.search_id, []) if t.search_id in searches else others).append(t)

        notes: list[str] = []
        stop: list[int] = []
        reasons: dict[int, str] = {}
        limits: dict[int, int] = {}
        ranked: list[tuple[float, TrialView]] = []  # (index, trial) of trials not running
        scores_out: dict[str, Any] = {}
        fronts_in: Mapping[str, Any] = snapshot.policy_state.get("fronts", {})
        fronts_out: dict[str, Any] = {}  # searches with several objectives: their feasible fronts
        for sid, trials in by_search.items():
            search = searches[sid]
            entry = self._model(search, trials, stored.get(str(sid)))
            if entry is None:  # nothing reported yet: start configurations in arrival order
                ranked.extend((math.inf, t) for t in trials if not t.running)
                for t in trials:
                    limits[t.id] = self._first_level(search)
                continue
            scores_out[str(sid)] = {"unit": entry.model.unit, "levels": entry.model.levels, "log": entry.model.log()}
            model = entry.model
            try:
                if search.pareto:  # expected hypervolume improvement per device-second (freeze_thaw_pareto)
                    kept = freeze_thaw_pareto.merged_front(fronts_in.get(str(sid), ()), trials)
                    fronts_out[str(sid)] = [list(f) for f in kept]
                    cps = {t.id: self._cps(entry, t) for t in trials}
                    indices = freeze_thaw_pareto.indices(model, search.goal, trials, cps, kept, search.reference)
                    chances: dict[int, float] = {}
                else:
                    indices, chances = self._indices(entry, search, trials)
            except (ArithmeticError, ValueError, FloatingPointError) as exc:
                # A model that cannot decide never stops the controller: this round the search's trials go
                # in arrival order, new configurations first (what a search with no model yet does).
                notes.append(f"freeze_thaw: search {sid}: the curve model failed ({exc!r}); trials in arrival order")
                indices = {t.id: (math.inf if t.steps_done == 0 else -float(t.arrival)) for t in trials}
                chances = {}
            first_pairs = model.pairs(0)
            if first_pairs < LOCAL_PAIRS and entry.noted != first_pairs:
                entry.noted = first_pairs
                notes.append(
                    f"freeze_thaw: search {sid}: {first_pairs} trial(s) past the first level so far: "
                    "the curve model leans on its prior"
                )
            incumbent = self._incumbent(model, trials)
            for t in trials:
                passed = len(model.scores.get(t.id, ()))
                if passed < len(model.levels):
                    limits[t.id] = model.levels[passed]
                if t.running:
                    continue
                chance = chances.get(t.id)
                if (
                    not search.more_trials
                    and chance is not None
                    and chance < k.give_up_p
                    and t.id != incumbent
                    and search.target is not None
                ):
                    stop.append(t.id)
                    reasons[t.id] = f"P(reach target) {chance:.2g} below {k.give_up_p:g} and no new trials will come"
                    continue
                ranked.append((indices.get(t.id, 0.0), t))

        board = Board(snapshot)
        for t in alive:
            if t.running:
                board.put(t.id, t.devices)
        for t in others:  # trace jobs: first come, first served
            if not t.running and board.n_free and (devices := board.choose(t)) is not None:
                board.put(t.id, devices)
        ranked.sort(key=lambda r: (-r[0], r[1].arrival, r[1].id))
        placed: set[int] = set()
        for _, t in ranked:
            if board.n_free == 0:
                break
            devices = board.choose(t)
            if devices is None:
                continue
            board.put(t.id, devices)
            placed.add(t.id)
        placement = board.placement()
        on = {i for ids in placement.values() for i in ids}
        parked = [t for _, t in ranked if t.id not in on and t.devices]
        # Every started trial not running now is held, resident or released: held trials do not count
        # against their search's parallelism, so a new configuration can always come when it ranks first.
        stopped = set(stop)
        hold = tuple(
            t.id
            for t in alive
            if (t.devices or t.steps_done > 0) and not t.running and t.id not in on and t.id not in stopped
        )
        release = self._release(parked, {t.id: i for i, t in ranked}, k.memory_budget_mb, on)
        state: dict[str, Any] = {"scores": scores_out}
        if fronts_out or fronts_in:  # fronts of searches not planned this round are kept
            state["fronts"] = {**fronts_in, **fronts_out}
        self._state_out = scores_out
        return Plan(
            placement=placement,
            stop=tuple(stop),
            reasons=reasons,
            state=state,
            notes=tuple(notes),
            hold=hold,
            release=release,
            limits={tid: step for tid, step in limits.items() if tid in on},
        )

    # ---- the model ---------------------------------------------------------------------------------

    def _first_level(self, search: SearchView) -> int:
        return levels_for(max(1, search.max_steps))[0]

    def _model(self, search: SearchView, trials: Sequence[TrialView], stored: Any) -> _Search | None:
        """The search's model with every trial's new levels recorded; None while no trial has reported."""
        entry = self._models.get(search.id)
        if entry is None:
            values = [v for t in trials for _, v in t.curve if math.isfinite(v)]
            if not values and not stored:
                return None
            unit = infer_unit(values, search.target)
            max_steps = max(1, search.max_steps or max(t.max_steps for t in trials))
            # The grid starts no earlier than the first report (levels before it would all be read there).
            first_report = min((int(s) for t in trials for s, _ in t.curve[:1]), default=1)
            first = max(round(max_steps * FIRST_FRACTION), first_report, 1)
            levels = levels_for(max_steps, first=min(first, max_steps))
            if stored:  # as the model was made: its grid, its transform, what it recorded
                unit = bool(stored.get("unit", unit))
                levels = tuple(int(v) for v in stored.get("levels", levels))
            model = CurveModel(search.goal, unit, levels)
            if stored:
                model.load(stored.get("log", ()))
            entry = self._models[search.id] = _Search(model)
        seen = entry.seen
        for t in trials:
            n = len(t.curve)
            if n and seen.get(t.id) != n:  # its curve grew since it was recorded
                seen[t.id] = n
                entry.model.record(t.id, t.curve)
        if len(seen) > 2 * len(trials):  # forget trials that ended (they never come back)
            alive = {t.id for t in trials}
            entry.seen = {tid: n for tid, n in seen.items() if tid in alive}
            entry.cached = {tid: c for tid, c in entry.cached.items() if tid in alive}
        measured = [t.device_seconds / t.steps_done for t in trials if t.steps_done > 0 and t.device_seconds > 0]
        if measured:
            entry.cost_per_step = statistics.median(measured)
        return entry

    @staticmethod
    def _incumbent(model: CurveModel, trials: Sequence[TrialView]) -> int | None:
        best: tuple[float, int] | None = None
        for t in trials:
            z = model.scores.get(t.id)
            if z and (best is None or max(z) > best[0]):
                best = (max(z), t.id)
        return best[1] if best else None

    @staticmethod
    def _bar(model: CurveModel, search: SearchView) -> float:
        """The score to reach: the search's target, else the best score shown so far."""
        if search.target is not None:
            return score(search.target, search.goal, model.unit)
        best = model.best()
        return best if best is not None else math.inf

    def _indices(
        self, entry: _Search, search: SearchView, trials: Sequence[TrialView]
    ) -> tuple[dict[int, float], dict[int, float]]:
        """Per trial not running: its index, and its chance of reaching the bar by the last level."""
        model = entry.model
        bar = self._bar(model, search)
        levels = model.levels
        last = len(levels) - 1
        indices: dict[int, float] = {}
        chances: dict[int, float] = {}
        fresh: list[TrialView] = []
        by_level: dict[int, list[TrialView]] = {}
        for t in trials:
            if t.running:
                continue
            passed = len(model.scores.get(t.id, ()))
            if passed == 0:
                fresh.append(t)
            elif passed <= last:
                by_level.setdefault(passed - 1, []).append(t)
            else:
                indices[t.id] = 0.0  # ran its whole budget (it ends on its own)
        model.fit()
        cached = entry.cached
        for level, group in by_level.items():
            version = (bar, model.versions(level))
            todo: list[TrialView] = []
            keys: list[tuple[Any, ...]] = []
            for t in group:
                key = (version, model.scores[t.id][level], self._cps(entry, t), t.steps_done)
                hit = cached.get(t.id)
                if hit is not None and hit[0] == key:
                    indices[t.id], chances[t.id] = hit[1], hit[2]
                else:
                    todo.append(t)
                    keys.append(key)
            if not todo:
                continue
            z = np.array([key[1] for key in keys])
            cps = np.array([key[2] for key in keys])
            steps = np.array([t.steps_done for t in todo], dtype=float)
            idx, chance = self._lookahead(model, level, z, cps, steps, bar)
            for t, key, i, c in zip(todo, keys, idx.tolist(), chance.tolist(), strict=True):
                indices[t.id], chances[t.id] = i, c
                cached[t.id] = (key, i, c)
        if fresh:
            newcomers = model.newcomers()
            if newcomers.size == 0:
                for t in fresh:
                    indices[t.id] = math.inf  # nothing to compare with yet: first looks first
            else:
                for t in fresh:
                    indices[t.id] = self._newcomer_index(model, newcomers, self._cps(entry, t), t.steps_done, bar)
        # A few trials at each level go one level further whatever they showed, before any new
        # configuration: the pairs the model learns from must not come only from trials that looked good
        # (where a level ranks trials unlike the next, only such samples can show it).
        if EXPLORE_EVERY and (fresh_index := max((indices[t.id] for t in fresh), default=0.0)) > 0.0:
            for level, group in by_level.items():
                for t in group:
                    if _sampled(t.id, level) and indices.get(t.id, 0.0) < fresh_index:
                        indices[t.id] = math.nextafter(fresh_index, math.inf)
        return indices, chances

    @staticmethod
    def _cps(entry: _Search, t: TrialView) -> float:
        if t.steps_done > 0 and t.device_seconds > 0:
            return t.device_seconds / t.steps_done
        if t.rate_solo:
            return 1.0 / t.rate_solo
        return entry.cost_per_step

    def _lookahead(
        self,
        model: CurveModel,
        level: int,
        z: NDArray[np.float64],
        cps: NDArray[np.float64],
        steps: NDArray[np.float64],
        bar: float,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Index and P(reach by the last level) of trials at `level` with scores `z`, costs per step `cps`
        and steps done `steps` (vectors of one length)."""
        levels = model.levels
        fit = model.fit()[level]
        nxt = level + 1
        # The next level's score at each node: (trials, nodes).
        q = fit.a + fit.b * z[:, None] + fit.s * _NODES[None, :]
        first_cost = cps * np.maximum(levels[nxt] - steps, 1.0)
        chance = model.p_reach(level, z, bar)[:, -1]
        return self._index(model, nxt, q, np.broadcast_to(_WEIGHTS, q.shape), first_cost, cps, bar), chance

    def _newcomer_index(
        self, model: CurveModel, newcomers: NDArray[np.float64], cps: float, steps: int, bar: float
    ) -> float:
        levels = model.levels
        q = newcomers[None, :]
        w = np.full(q.shape, 1.0 / newcomers.size)
        first_cost = np.array([cps * max(levels[0] - steps, 1.0)])
        return float(self._index(model, 0, q, w, first_cost, np.array([cps]), bar)[0])

    @staticmethod
    def _index(
        model: CurveModel,
        at: int,
        q: NDArray[np.float64],
        w: NDArray[np.float64],
        first_cost: NDArray[np.float64],
        cps: NDArray[np.float64],
        bar: float,
    ) -> NDArray[np.float64]:
        """The index (module docstring) of trials whose score at level `at` is one of the nodes `q` with
        weights `w` (both (trials, nodes)), reaching level `at` for `first_cost` each, `cps` per step on."""
        levels = model.levels
        reached = q >= bar
        success_now: NDArray[np.float64] = (w * reached).sum(axis=1)
        best: NDArray[np.float64] = success_now / first_cost
        later = len(levels) - 1 - at
        if later <= 0:
            return best
        n, m = q.shape
        p = model.p_reach(at, q.reshape(-1), bar).reshape(n, m, later)  # P(reach by level h | node)
        p = np.where(reached[:, :, None], 0.0, p)  # counted in success_now already
        # For each commitment h, go on only from the best nodes: sort each trial's nodes by their chance,
        # take the best prefix (all h at once: arrays (trials, nodes, h)).
        order = np.argsort(-p, axis=1)
        gain = np.take_along_axis(w[:, :, None] * p, order, axis=1).cumsum(axis=1)
        open_w = np.broadcast_to(np.where(reached, 0.0, w)[:, :, None], p.shape)
        ws = np.take_along_axis(open_w, order, axis=1).cumsum(axis=1)
        rest = np.asarray(levels[at + 1 :], dtype=float) - levels[at]  # steps from level `at` to each h
        cost = first_cost[:, None, None] + ws * (cps[:, None, None] * rest[None, None, :])
        ratio = (success_now[:, None, None] + gain) / cost
        out: NDArray[np.float64] = np.maximum(best, ratio.max(axis=(1, 2)))
        return out

    @staticmethod
    def _release(
        parked: Sequence[TrialView], index: Mapping[int, float], budget: float, placed: set[int]
    ) -> tuple[int, ...]:
        """Parked trials to checkpoint and free, lowest index first, while the parked ones use more than
        `budget` MB (0: no limit)."""
        if budget <= 0:
            return ()
        used = math.fsum(t.memory_mb or 0.0 for t in parked)
        out: list[int] = []
        for t in sorted(parked, key=lambda t: (index.get(t.id, 0.0), -t.arrival, -t.id)):
            if used <= budget:
                break
            out.append(t.id)
            used -= t.memory_mb or 0.0
        return tuple(out)
