"""Gandiva's introspective scheduling for hyperparameter search (Xiao et al., OSDI 2018, section 5).

One round = one quantum. From the snapshot the policy decides, purely:

1. **Early feedback.** Each trial's reported curve is extrapolated with `app.search.feedback.predict`
   once it has run `min_steps_before_judgement` steps (default 10 % of its search's max_steps, and at
   least 3 reports), and again every `feedback_every_steps` steps (default 3 % of max_steps). The
   prediction is cached in `Plan.state`, so a round costs one fit per trial that advanced far enough.
   A judged trial's *promise* is `feedback.priority` (P(reach target), then the predicted final).
   A judged trial whose P(reach target) is below `kill_threshold` is stopped (`Plan.stop`). The spec
   carries no metric bounds: `bounds` sets them, else a metric whose target and reports all lie in
   [0, 1] is taken as a fraction (bounds (0, 1)), so that no fit extrapolates an accuracy above 1.
2. **Tiers.** Each round ranks the alive trials; the rank is the priority this round:
   - *exclusive*: the top-M judged trials by promise (default M = half the devices, at least 1). They
     keep their devices for as long as they stay top-M, alone (never packed, never rotated out). An
     incumbent gets `swap_margin` of extra promise so that noise in the predictions does not swap
     trials back and forth. Exclusivity never takes the last device other trials need to make
     progress (on one device everything is time-shared).
   - *guard* (starvation guard): trials not judged yet (fewer than min_steps steps, or no prediction
     yet) come first in the time-share rotation, oldest first, a running one kept running, until
     judged, so that each new configuration reaches its first feedback promptly.
   - *shared*: the rest share the remaining devices by stride scheduling with weight
     `1 + promise_weight * P(reach)` (0.5 for a trial that cannot be judged, e.g. no target).
   Units are taken in rank order while devices remain; a unit that does not fit is skipped (lower
   units may backfill devices it could not use). So a trial is only ever parked because trials
   ranked above it hold the devices: a higher-priority trial is never suspended in favour of a lower
   one. `Plan.state["rank"]` publishes the order.
3. **Placement** keeps running trials where they are, resumes parked trials on their own devices when
   free, and moves the others onto free devices (a move = `Migrate`): this is how the highest-ranked
   parked trial lands on a device that just freed. Multi-device trials take devices of one node when
   one node fits, and a trial spread over nodes is consolidated as soon as one node can hold it.
4. **Introspective packing** (`packing`, when trials wait): the lowest-utilisation waiting trial
   (lowest measured solo rate, then lightest memory) joins the lowest-utilisation running shared
   trial on its device, if their measured memory fits (device memory 0 = unknown: allowed) and the
   pair was never found bad. One pack is on trial at a time. Once the pair has run together for a
   quantum and `snapshot.pair_rates` holds a fresh sample for it, the pack is kept if
   `rate_a/solo_a + rate_b/solo_b > 1 + pack_margin`, else undone and the pair remembered as bad
   (never retried). A kept pack is one unit in the rotation until a member ends, leaves the shared
   tier, or a fresh sample shows the gain gone. `Plan.notes` explain each decision.
5. **Grow-shrink** (`grow_shrink`): a device idle for `idle_grow_s` is lent to the highest-ranked
   running elastic trial of its node (placed under more devices than it needs); capacity is always
   counted without the loans, so a loan is returned the round a waiting trial can use the device.

Stride passes are kept incrementally in state (pass += device time / weight at the time the time was
spent), unlike `TimeslicePolicy`'s `device_seconds / weight`: with that form a weight that rises late
would credit the trial with all its past time at the new weight and let it monopolise a device. Only
time spent in the shared tier advances a pass; a trial entering the tier joins at the tier's lowest
pass (its virtual time), like a newcomer in `TimeslicePolicy`.

Pure: no I/O, no clock (`snapshot.now`), no torch. Everything remembered lives in `Plan.state`
(JSON: string keys, lists).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.executor.policy.knobs import GandivaKnobs
from app.executor.policy.placing import Board, device_maps
from app.executor.policy.types import ClusterSnapshot, Plan, SearchView, TrialView
from app.search import feedback

EXCLUSIVE, GUARD, SHARED = "exclusive", "guard", "shared"
_NEUTRAL_P = 0.5  # P(reach) assumed for the weight of a trial that cannot be judged
_MEASURE_FRACTION = 0.95  # a pack is measured after this fraction of a quantum together (tick jitter)


@dataclass(frozen=True)
class _Judged:
    """What early feedback says about one trial this round."""

    pred: feedback.Prediction | None
    judged: bool  # has run min_steps and has a prediction
    newcomer: bool  # starvation guard applies
    promise: float | None  # feedback.priority (None unless judged)
    weight: float  # stride weight if shared
    kill: bool
    cache: dict[str, Any] | None  # prediction cache to carry in state


class GandivaPolicy:
    name = "gandiva"

    def __init__(self, knobs: GandivaKnobs | None = None, /, **kw: Any):
        """From `knobs`, or from keyword knobs (the rest default); ValueError for a bad knob."""
        k = knobs if knobs is not None else GandivaKnobs(**kw)
        self.knobs = k
        self.top_m = k.top_m
        self.kill_threshold = k.kill_threshold
        self.min_steps = k.min_steps_before_judgement
        self.job_guard_steps = 100
        self.feedback_every = k.feedback_every_steps
        self.packing = k.packing
        self.pack_margin = k.pack_margin
        self.grow_shrink = k.grow_shrink
        self.idle_grow_s = k.idle_grow_s
        self.promise_weight = k.promise_weight
        self.swap_margin = k.swap_margin
        self.pack_patience = k.pack_patience
        self.bounds = k.bounds
        self.infer_bounds = k.infer_bounds
        neutral = 1.0 + self.promise_weight * _NEUTRAL_P
        self._job_newcomer = _Judged(None, False, True, None, neutral, False, None)
        self._job_settled = _Judged(None, False, False, None, neutral, False, None)

    # ---- early feedback --------------------------------------------------------------------------

    def min_steps_for(self, trial: TrialView, search: SearchView | None) -> int:
        max_steps = _max_steps(trial, search)
        own = self.min_steps
        if own is not None:
            return int(own)
        if not max_steps:
            return 0
        default = max(1, math.ceil(0.1 * max_steps))
        if search is None:
            # A job outside a search (a trace job) reports no learning curve and is never judged: its
            # guard covers its first mini-batches only (Gandiva's "time to the first 100 mini-batches").
            return min(self.job_guard_steps, default)
        return default

    def feedback_every_for(self, trial: TrialView, search: SearchView | None) -> int:
        own = self.feedback_every
        if own is not None:
            return max(1, int(own))
        return max(1, round(0.03 * _max_steps(trial, search)))

    def judge(self, trial: TrialView, snapshot: ClusterSnapshot, cache: Mapping[str, Any] | None) -> _Judged:
        """Prediction (cached or fresh), tier facts, weight and kill verdict for one trial."""
        search = snapshot.search(trial.search_id)
        min_steps = self.min_steps_for(trial, search)
        cache = dict(cache) if cache else None
        if search is None and cache is None:
            # A job outside a search (a trace job): never judged, never killed, neutral weight. The
            # general path below gives the same; this one is taken for each of thousands of jobs a round.
            newcomer = bool(min_steps) and trial.steps_done < 2 * min_steps
            return self._job_newcomer if newcomer else self._job_settled
        max_steps = _max_steps(trial, search)
        can_judge = search is not None and max_steps > 0 and trial.steps_done >= min_steps
        points = [(s, v) for s, v in trial.curve if _finite(s) and _finite(v)]
        if can_judge and len(points) >= feedback.MIN_POINTS:
            last = max(s for s, _ in points)
            every = self.feedback_every_for(trial, search)
            stale = (
                cache is None
                or (cache.get("none") and cache.get("n") != len(points))
                or last - cache.get("at", -math.inf) >= every
            )
            if stale:
                cache = self._predict(points, max_steps, search, last)
        pred = _from_cache(cache) if can_judge else None
        judged = pred is not None
        # The guard lasts until judged, but at most twice min_steps: a trial that never reports
        # (or reports too rarely to fit) must not hold the front of the rotation forever.
        newcomer = bool(min_steps) and not judged and trial.steps_done < 2 * min_steps
        goal = search.goal if search is not None else "maximize"
        promise = feedback.priority(pred, goal) if judged else None
        p = pred.p_reach if pred is not None else _NEUTRAL_P
        weight = 1.0 + self.promise_weight * p
        threshold = self.kill_threshold
        kill = (
            judged
            and search is not None
            and search.target is not None
            and feedback.should_kill(pred, threshold, trial.steps_done, min_steps)
        )
        return _Judged(pred, judged, newcomer, promise, weight, kill, cache)

    def _predict(
        self, points: list[tuple[int, float]], max_steps: int, search: SearchView | None, last: float
    ) -> dict[str, Any]:
        assert search is not None
        bounds = self.bounds
        if bounds is None and self.infer_bounds and _fraction(search.target, points):
            bounds = (0.0, 1.0)
        try:
            pred = feedback.predict(points, max_steps, search.target, search.goal, bounds=bounds)
        except (ValueError, ArithmeticError):
            pred = None
        if pred is None or not all(map(_finite, (pred.final, pred.p_reach, pred.spread))):
            return {"at": last, "n": len(points), "none": True}
        return {
            "at": last,
            "n": len(points),
            "final": pred.final,
            "p": pred.p_reach,
            "spread": pred.spread,
            "points": pred.n_points,
            "families": list(pred.families),
        }

    # ---- the round -------------------------------------------------------------------------------

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        st = snapshot.policy_state or {}
        old: Mapping[str, Mapping[str, Any]] = st.get("trials", {}) or {}
        notes: list[str] = []
        now = snapshot.now
        n_dev = len(snapshot.devices)
        order, node_of, _ = device_maps(snapshot.devices)
        by_id = {t.id: t for t in snapshot.trials}

        alive = list(snapshot.alive())
        judged = {t.id: self.judge(t, snapshot, (old.get(str(t.id)) or {}).get("pred")) for t in alive}
        stop = tuple(sorted(t.id for t in alive if judged[t.id].kill))
        for tid in stop:
            pred = judged[tid].pred
            assert pred is not None
            notes.append(
                f"kill trial {tid}: P(reach target) {pred.p_reach:.3f} < threshold "
                f"(predicted final {pred.final:.4g} at {by_id[tid].steps_done} steps)"
            )
        stopped = set(stop)
        cands = [t for t in alive if t.id not in stopped]

        def prev_tier(tid: int) -> str | None:
            entry = old.get(str(tid))
            return None if entry is None else entry.get("tier")

        # -- exclusive tier: top-M judged trials by promise (incumbents get swap_margin) -----------
        m = self.top_m if self.top_m is not None else max(1, n_dev // 2)

        def eff(t: TrialView) -> float:
            bonus = self.swap_margin if prev_tier(t.id) == EXCLUSIVE else 0.0
            return (judged[t.id].promise or 0.0) + bonus

        ranked_judged = sorted((t for t in cands if judged[t.id].judged), key=lambda t: (-eff(t), t.arrival, t.id))
        exclusive: list[TrialView] = []
        used = 0
        for t in ranked_judged:
            if len(exclusive) >= m:
                break
            taken = {e.id for e in exclusive} | {t.id}
            others = (u.devices_needed for u in cands if u.id not in taken and u.devices_needed <= n_dev)
            reserve = min(others, default=0)
            if used + t.devices_needed + reserve > n_dev:
                break  # keep a device for the rotation; never skip a higher trial for a lower one
            exclusive.append(t)
            used += t.devices_needed
        excl_ids = {t.id for t in exclusive}
        tiers: dict[int, str] = {}
        for t in cands:
            if t.id in excl_ids:
                tiers[t.id] = EXCLUSIVE
            elif judged[t.id].newcomer:
                tiers[t.id] = GUARD
            else:
                tiers[t.id] = SHARED
        old_excl = set(st.get("exclusive", []) or [])
        for t in exclusive:
            if t.id not in old_excl:
                p = judged[t.id].pred
                assert p is not None
                notes.append(f"trial {t.id} runs exclusively (P(reach target) {p.p_reach:.3f})")
        for tid in sorted(old_excl - excl_ids - stopped):
            if tid in tiers:
                notes.append(f"trial {tid} returns to time-sharing")

        # -- stride passes (incremental; only shared time counts) ----------------------------------
        passes: dict[int, float] = {}
        for t in cands:
            entry = old.get(str(t.id)) or {}
            p = float(entry.get("pass", 0.0))
            if entry.get("tier") == SHARED:
                spent = max(0.0, t.device_seconds - float(entry.get("ds", 0.0)))
                p += spent / max(float(entry.get("w", 1.0)), 1e-9)
            passes[t.id] = p
        continuing = [passes[t.id] for t in cands if tiers[t.id] == SHARED and prev_tier(t.id) == SHARED]
        if continuing:
            vt = min(continuing)
            for t in cands:
                if tiers[t.id] == SHARED and prev_tier(t.id) != SHARED:
                    passes[t.id] = max(passes[t.id], vt)

        guard = sorted((t for t in cands if tiers[t.id] == GUARD), key=lambda t: (not t.running, t.arrival, t.id))
        # Passes are compared in grains of a quarter of the smallest pass step a quantum can make (weight
        # at most 1 + promise_weight): trials a quantum apart stay apart, while the milliseconds by which
        # real parks make measured device time differ do not decide who is switched out (a tie keeps
        # the running trial, as in TimeslicePolicy).
        grain = max(snapshot.quantum_s, 1e-9) / (4.0 * (1.0 + self.promise_weight))
        shared = sorted(
            (t for t in cands if tiers[t.id] == SHARED),
            key=lambda t: (round(passes[t.id] / grain), not t.running, t.arrival, t.id),
        )
        pool = guard + shared
        pool_ids = {t.id for t in pool}

        # -- packs: measure the one on trial, re-check kept ones, drop broken ones ------------------
        bad = {_pair(a, b) for a, b in (st.get("bad_pairs", []) or [])}
        packs: list[dict[str, Any]] = []
        for pk in st.get("packs", []) or []:
            pk = dict(pk)
            a, b = int(pk["a"]), int(pk["b"])
            gone = [x for x in (a, b) if x not in by_id or by_id[x].status.final or x in stopped or x not in tiers]
            if gone:
                notes.append(f"pack {a}+{b} ends: trial {gone[0]} left")
                continue
            if a not in pool_ids or b not in pool_ids:
                which = a if a not in pool_ids else b
                notes.append(f"pack {a}+{b} dissolved: trial {which} is now {tiers[which]}")
                continue
            ta, tb = by_id[a], by_id[b]
            together = ta.running and tb.running and bool(set(ta.devices) & set(tb.devices))
            sample = snapshot.pair_rates.get((a, b))
            if not together:
                pk["start"] = None
            verdict = None
            if together and sample is not None:
                fresh = pk.get("base") is None or list(sample) != list(pk["base"])
                long_enough = pk.get("start") is not None and now - float(pk["start"]) >= (
                    _MEASURE_FRACTION * snapshot.quantum_s
                )
                measured = fresh and long_enough if pk["status"] == "trial" else list(sample) != pk.get("seen")
                if measured:
                    verdict = self._gain(ta, tb, sample)
                pk["seen"] = list(sample)
            if verdict is not None:
                gain, why = verdict
                if gain is not None and gain > 1.0 + self.pack_margin:
                    if pk["status"] == "trial":
                        notes.append(f"pack {a}+{b} kept: {why} > 1 + margin {self.pack_margin:g}")
                    pk["status"], pk["gain"] = "kept", gain
                else:
                    word = "undone" if pk["status"] == "trial" else "undone (gain dropped)"
                    notes.append(f"pack {a}+{b} {word}: {why} <= 1 + margin {self.pack_margin:g}; pair marked bad")
                    bad.add(_pair(a, b))
                    continue
            elif pk["status"] == "trial" and int(pk.get("rounds", 0)) >= self.pack_patience:
                notes.append(f"pack {a}+{b} undone: no packed measurement after {pk['rounds']} rounds; pair marked bad")
                bad.add(_pair(a, b))
                continue
            packs.append(pk)
        pack_of = {x: pk for pk in packs for x in (int(pk["a"]), int(pk["b"]))}

        # -- units in rank order (a pack is one unit at its better member's place) -----------------
        units: list[tuple[TrialView, ...]] = [(t,) for t in exclusive]
        seen: set[int] = set()
        for t in pool:
            if t.id in seen:
                continue
            pk = pack_of.get(t.id)
            if pk is not None:
                a, b = int(pk["a"]), int(pk["b"])
                units.append((by_id[a], by_id[b]) if t.id == a else (by_id[b], by_id[a]))
                seen.update((a, b))
            else:
                units.append((t,))
                seen.add(t.id)
        rank = [t.id for u in units for t in u]

        # Phase 1: which units run (capacity counted without grow-shrink loans).
        cap = n_dev
        selected: list[tuple[TrialView, ...]] = []
        waiting: list[tuple[TrialView, ...]] = []
        for u in units:
            need = max(t.devices_needed for t in u)
            if need <= cap:
                selected.append(u)
                cap -= need
            else:
                waiting.append(u)

        # Phase 2: which devices (fewest moves, then locality).
        grown_old: Mapping[str, Mapping[str, Any]] = st.get("grown", {}) or {}
        board = Board(snapshot)

        def home(u: tuple[TrialView, ...]) -> tuple[str, ...] | None:
            if len(u) == 2:
                for t in sorted(u, key=lambda t: not t.running):
                    if len(t.devices) == 1:
                        return t.devices
                return None
            t = u[0]
            g = grown_old.get(str(t.id))
            if g is not None and set(g.get("base", [])) <= set(t.devices) and len(g["base"]) == t.devices_needed:
                return tuple(sorted(g["base"]))
            return t.devices if len(t.devices) == t.devices_needed else None

        def spread(ds: Sequence[str]) -> bool:
            return len({node_of.get(d) for d in ds}) > 1

        def put(u: tuple[TrialView, ...], ds: tuple[str, ...]) -> None:
            for t in u:
                board.put(t.id, ds)

        placed: dict[int, tuple[str, ...]] = {}
        todo = list(selected)
        for step in ("running", "spread", "parked", "rest"):
            left = []
            for u in todo:
                h = home(u)
                running = any(t.running for t in u)
                ds: tuple[str, ...] | None = None
                if step == "running" and running and h and not spread(h) and all(board.is_free(d) for d in h):
                    ds = h
                elif step == "spread" and running and h and spread(h):
                    ds = _choose(board, len(h), h, node_of, order, single_node=True)
                    if ds is not None:
                        notes.append(f"trial {u[0].id} consolidates onto node {node_of[ds[0]]}")
                    elif all(board.is_free(d) for d in h):
                        ds = h
                elif step == "parked" and h and all(board.is_free(d) for d in h):
                    ds = h
                elif step == "rest":
                    need = max(t.devices_needed for t in u)
                    ds = _choose(board, need, u[0].devices, node_of, order)
                    if ds is not None and u[0].devices and set(ds) != set(u[0].devices):
                        notes.append(f"trial {u[0].id} moves {','.join(u[0].devices)} -> {','.join(ds)}")
                if ds is None:
                    left.append(u)
                else:
                    put(u, ds)
                    for t in u:
                        placed[t.id] = ds
            todo = left
        waiting = todo + waiting  # (todo is empty unless a device vanished mid-plan)

        # -- try one new pack when trials wait --------------------------------------------------------
        on_trial = any(pk["status"] == "trial" for pk in packs)
        if self.packing and waiting and not on_trial:
            new = self._new_pack(snapshot, waiting, selected, tiers, placed, pack_of, bad, board)
            if new is not None:
                joiner, host, device, why = new
                board.put(joiner.id, (device,))
                placed[joiner.id] = (device,)
                a, b = _pair(joiner.id, host.id)
                sample = snapshot.pair_rates.get((a, b))
                packs.append(
                    {
                        "a": a,
                        "b": b,
                        "status": "trial",
                        "device": device,
                        "since": now,
                        "round": snapshot.round_no,
                        "start": None,
                        "base": None if sample is None else list(sample),
                        "seen": None,
                        "rounds": 0,
                        "gain": None,
                    }
                )
                notes.append(f"pack {a}+{b} on trial on {device}: {why}")
                rank.remove(joiner.id)
                rank.insert(rank.index(host.id) + 1, joiner.id)

        # Packs placed together this round: start (or continue) their packed stretch.
        for pk in packs:
            a, b = int(pk["a"]), int(pk["b"])
            if a in placed and placed.get(a) == placed.get(b):
                pk["device"] = placed[a][0]
                if pk.get("start") is None:
                    pk["start"] = now
                    s = snapshot.pair_rates.get((a, b))
                    pk["base"] = None if s is None else list(s)
                if pk["status"] == "trial":
                    pk["rounds"] = int(pk.get("rounds", 0)) + 1

        # -- grow-shrink --------------------------------------------------------------------------
        grown: dict[str, dict[str, Any]] = {}
        packed_now = {x for pk in packs for x in (int(pk["a"]), int(pk["b"]))}
        for tid in rank:
            g = grown_old.get(str(tid))
            if g is None or tid not in placed:
                continue
            extra = [d for d in g.get("extra", []) if d in board.slots]
            if self.grow_shrink and extra and tid not in packed_now and all(board.is_free(d) for d in extra):
                board.put(tid, tuple(extra))
                grown[str(tid)] = {"base": list(placed[tid]), "extra": extra}
            elif extra:
                notes.append(f"trial {tid} shrinks back to {','.join(placed[tid])}")
        idle_old: Mapping[str, float] = st.get("idle_since", {}) or {}
        if self.grow_shrink:
            got: set[int] = set()
            for d in sorted(board.free(), key=lambda d: order[d]):
                if now - float(idle_old.get(d, now)) < self.idle_grow_s:
                    continue
                for tid in rank:
                    t = by_id[tid]
                    if (
                        tid in placed
                        and tid not in got
                        and t.elastic
                        and tid not in packed_now
                        and all(node_of.get(x) == node_of[d] for x in placed[tid])
                    ):
                        board.put(tid, (d,))
                        g = grown.setdefault(str(tid), {"base": list(placed[tid]), "extra": []})
                        g["extra"] = sorted([*g["extra"], d], key=lambda x: order[x])
                        got.add(tid)
                        notes.append(f"trial {tid} grows onto idle {d}")
                        break
        idle = {d: float(idle_old.get(d, now)) for d in board.free()}

        # -- state ------------------------------------------------------------------------------------
        trials_state: dict[str, dict[str, Any]] = {}
        for t in cands:
            j = judged[t.id]
            trials_state[str(t.id)] = {
                "tier": tiers[t.id],
                "pass": passes[t.id],
                "ds": t.device_seconds,
                "w": j.weight,
                "priority": j.promise,
                "pred": j.cache,
            }
        alive_ids = set(tiers)
        state = {
            "trials": trials_state,
            "exclusive": [t.id for t in exclusive],
            "rank": rank,
            "packs": packs,
            "bad_pairs": sorted([a, b] for a, b in bad if a in alive_ids and b in alive_ids),
            "grown": grown,
            "idle_since": idle,
        }
        return Plan(placement=board.placement(), stop=stop, state=state, notes=tuple(notes))

    # ---- packing helpers -----------------------------------------------------------------------

    def _gain(self, ta: TrialView, tb: TrialView, sample: tuple[float, float]) -> tuple[float | None, str]:
        ra, rb = float(sample[0]), float(sample[1])
        sa, sb = ta.rate_solo, tb.rate_solo
        if not sa or not sb or sa <= 0 or sb <= 0:
            return None, "no solo rate to compare with"
        gain = ra / sa + rb / sb
        return gain, f"normalised rates {ra / sa:.2f} + {rb / sb:.2f} = {gain:.2f}"

    def _new_pack(
        self,
        snapshot: ClusterSnapshot,
        waiting: list[tuple[TrialView, ...]],
        selected: list[tuple[TrialView, ...]],
        tiers: Mapping[int, str],
        placed: Mapping[int, tuple[str, ...]],
        pack_of: Mapping[int, Any],
        bad: set[tuple[int, int]],
        board: Board,
    ) -> tuple[TrialView, TrialView, str, str] | None:
        """(joiner, host, device, why) for one new pack on trial, or None."""

        def packable(t: TrialView) -> bool:
            return (
                t.devices_needed == 1
                and tiers.get(t.id) == SHARED
                and t.id not in pack_of
                and bool(t.rate_solo)
                and (t.rate_solo or 0) > 0
            )

        def util(t: TrialView) -> tuple[float, float, int]:
            return (t.rate_solo or 0.0, t.memory_mb or 0.0, t.id)

        joiners = sorted((u[0] for u in waiting if len(u) == 1 and packable(u[0])), key=util)
        hosts = sorted(
            (
                u[0]
                for u in selected
                if len(u) == 1 and packable(u[0]) and u[0].id in placed and len(board.slots[placed[u[0].id][0]]) == 1
            ),
            key=util,
        )
        memory = {d.id: d.memory_mb for d in snapshot.devices}
        for j in joiners:
            for h in hosts:
                if _pair(j.id, h.id) in bad:
                    continue
                device = placed[h.id][0]
                cap = memory.get(device, 0.0) or 0.0
                if cap > 0:
                    if j.memory_mb is None or h.memory_mb is None or j.memory_mb + h.memory_mb > cap:
                        continue
                    why = f"memory {j.memory_mb:.0f}+{h.memory_mb:.0f} of {cap:.0f} MB"
                else:
                    why = "device memory unknown"
                why += f"; solo rates {j.rate_solo:.3g}, {h.rate_solo:.3g} steps/s"
                return j, h, device, why
        return None


# ---- helpers -----------------------------------------------------------------------------------------


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _fraction(target: float | None, points: Sequence[tuple[int, float]]) -> bool:
    """Does the metric look like a fraction (accuracy, F1, AUC): a target and every report in [0, 1]?
    Then fits that extrapolate beyond [0, 1] are rejected (the spec carries no metric bounds)."""
    return target is not None and 0.0 <= target <= 1.0 and all(0.0 <= float(v) <= 1.0 for _, v in points)


def _max_steps(trial: TrialView, search: SearchView | None) -> int:
    if search is not None and search.max_steps:
        return int(search.max_steps)
    return int(trial.max_steps or 0)


def _from_cache(cache: Mapping[str, Any] | None) -> feedback.Prediction | None:
    if not cache or cache.get("none"):
        return None
    return feedback.Prediction(
        final=float(cache["final"]),
        p_reach=float(cache["p"]),
        spread=float(cache["spread"]),
        n_points=int(cache.get("points", cache.get("n", 0))),
        families=tuple(cache.get("families", ())),
    )


def _pair(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)


def _choose(
    board: Board,
    need: int,
    resident: Sequence[str],
    node_of: Mapping[str, str],
    order: Mapping[str, int],
    *,
    single_node: bool = False,
) -> tuple[str, ...] | None:
    """Free devices for a trial needing `need`: its resident ones when they are free and on one node,
    else a node that fits it (the one holding most of its resident devices, then the fullest that
    fits), its resident devices first; else (unless `single_node`) its resident devices if free, else
    devices from the nodes with most free devices. None when fewer than `need` devices are free."""
    if need <= 0 or board.n_free < need:
        return None
    res = [d for d in resident if d in board.slots]
    res_set = set(res)
    res_free = len(res) == need and all(board.is_free(d) for d in res)
    if res_free and len({node_of[d] for d in res}) == 1:
        return tuple(sorted(res))
    # The node holding most of its resident devices that fits, then the fullest node that fits.
    home = Counter(node_of[d] for d in res)
    at_home = [n for n in home if board.n_free_on(n) >= need]
    node = min(at_home, key=lambda n: (-home[n], board.n_free_on(n), n)) if at_home else board.fullest_fitting(need)
    if node is not None:
        ds = sorted(board.free_on(node), key=lambda d: (d not in res_set, order[d]))[:need]
        return tuple(sorted(ds))
    if single_node:
        return None
    if res_free:
        return tuple(sorted(res))
    by_node = board.free_by_node()
    out: list[str] = []
    for n in sorted(by_node, key=lambda n: (-len(by_node[n]), n)):
        out.extend(sorted(by_node[n], key=lambda d: (d not in res_set, order[d])))
    return tuple(sorted(out[:need]))
