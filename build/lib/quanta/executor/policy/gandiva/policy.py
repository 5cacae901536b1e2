"""`GandivaPolicy`: one round composed of the judge's verdicts, tiers, packs, placement and grow-shrink
(the package docstring tells the whole policy)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quanta.executor.policy.gandiva import grow, packs, placement, quiet, tiers
from quanta.executor.policy.gandiva.gang import Gang
from quanta.executor.policy.knobs import GandivaKnobs, JudgeKnobs
from quanta.executor.policy.placement.board import Board
from quanta.executor.policy.types import ClusterSnapshot, Plan, SearchView, TrialView


class GandivaPolicy:
    name = "gandiva"
    Knobs = GandivaKnobs

    def __init__(self, knobs: GandivaKnobs | None = None):
        self.knobs = knobs or GandivaKnobs()
        # The judge runs with this policy's knobs before each round (GandivaKnobs is a JudgeKnobs).
        self.judge_knobs: JudgeKnobs | None = self.knobs
        self._standings = tiers.Standings(self.knobs)

    @property
    def top_m(self) -> int | None:
        return self.knobs.top_m

    def min_steps_for(self, trial: TrialView, search: SearchView | None) -> int:
        """Steps before `trial` is judged (and leaves the starvation guard once judged)."""
        return self.knobs.min_steps(trial, search)

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        k = self.knobs
        x = k.research  # the experimental knobs (sticky, gang, gang_patience), all off by default
        st = snapshot.policy_state or {}
        old: Mapping[str, Mapping[str, Any]] = st.get("trials", {}) or {}
        notes: list[str] = []
        by_id = {t.id: t for t in snapshot.trials}

        # Verdicts: kill whom the judge condemns; the rest are this round's candidates.
        alive = list(snapshot.alive())
        standing = {t.id: self._standings.of(t, snapshot) for t in alive}
        stop = tuple(sorted(t.id for t in alive if standing[t.id].verdict.kill))
        reasons: dict[int, str] = {}
        for tid in stop:
            v = standing[tid].verdict
            reasons[tid] = (
                f"P(reach target) {v.p_reach:.3f} < kill threshold {k.kill_threshold:g} "
                f"(predicted final {v.final:.4g} at {by_id[tid].steps_done} steps)"
            )
            notes.append(f"kill trial {tid}: {reasons[tid]}")
        stopped = set(stop)
        cands = [t for t in alive if t.id not in stopped]

        # Tiers and the rotation.
        ranking = tiers.rank(k, snapshot, cands, standing, old, set(st.get("exclusive", []) or []), stopped)
        notes.extend(ranking.notes)
        pool_ids = {t.id for t in ranking.pool}

        # Packs standing from last round; units in rank order (a pack is one unit).
        bad = {packs.pair(a, b) for a, b in (st.get("bad_pairs", []) or [])}
        live = packs.review(k, snapshot, st.get("packs", []) or [], bad, by_id, ranking.tier, pool_ids, stopped, notes)
        pack_of = {x: pk for pk in live for x in pk.members}
        units = placement.units(ranking.exclusive, ranking.pool, pack_of, by_id)
        rank = [t.id for u in units for t in u]

        # Which units run, then where.
        grown_old: Mapping[str, Mapping[str, Any]] = st.get("grown", {}) or {}
        board = Board(snapshot)
        load = placement.loads(units, board.order, grown_old) if x.sticky else None
        movers: dict[int, bool] | None = None
        targets: dict[int, tuple[str, ...]] = {}
        caps: dict[int, int] = {}
        big: set[str] = set()  # with gang: devices of multi-device units (one-device units go there last)
        if load is not None:
            guard = {tid for tid, tier in ranking.tier.items() if tier == tiers.GUARD}
            excl = {t.id for t in ranking.exclusive}
            gang = None
            if x.gang:
                bound = {u[0].id for u in units if placement.kind_bound(board, u)}
                big, small = placement.shapes(units, grown_old)
                gang = Gang(board.order, board.node_of, bound, small)
            selected, waiting, movers, targets, caps = placement.select_sticky(
                units, board.order, grown_old, load, guard, excl, gang
            )
        else:
            selected, waiting = placement.select(units, len(snapshot.devices))
        placed, unplaced = placement.place(board, selected, grown_old, notes, load, movers, targets, big, caps)
        if unplaced and board.n_free:
            # Units that found no device of a kind they run on (several kinds), or balance movers that
            # found none light enough (sticky): the devices they left go to the next units in rank order
            # that fit them. With sticky, a waiting unit goes only onto a device it balances the loads on
            # (`move_caps`): onto another it would gain this round and move back later.
            later = placement.move_caps(waiting, load, grown_old) if load is not None else None
            more, waiting = placement.place(board, waiting, grown_old, notes, load, movers, caps=later)
            placed.update(more)
            selected = [*selected, *(u for u in units if u[0].id in more)]
        waiting = unplaced + waiting  # (unplaced is empty unless a device vanished mid-plan)
        if x.gang and x.gang_patience is not None and load is not None and board.n_free:
            # Gangs that have waited their patience for their block take devices this round leaves idle.
            patient = {u[0].id for u in waiting if int((old.get(str(u[0].id)) or {}).get("wait", 0)) >= x.gang_patience}
            more = placement.idle_runs(board, waiting, patient, grown_old, notes, load)
            placed.update(more)
            selected = [*selected, *(u for u in waiting if u[0].id in more)]
            waiting = [u for u in waiting if u[0].id not in more]

        # One new pack on trial when trials wait and none is on trial.
        if k.packing and waiting and not any(pk.status == "trial" for pk in live):
            new = packs.new_pack(
                snapshot, waiting, selected, ranking.tier, placed, pack_of, bad, board, co_resident=x.sticky and x.gang
            )
            if new is not None:
                joiner, host, device, why = new
                board.put(joiner.id, (device,))
                placed[joiner.id] = (device,)
                pk = packs.formed(snapshot, joiner, host, device)
                live.append(pk)
                notes.append(f"pack {pk.a}+{pk.b} on trial on {device}: {why}")
                rank.remove(joiner.id)
                rank.insert(rank.index(host.id) + 1, joiner.id)
        live = packs.placed_together(snapshot, live, placed)

        # Grow-shrink (loans on top of the placement).
        packed = {x for pk in live for x in pk.members}
        idle_old: Mapping[str, float] = st.get("idle_since", {}) or {}
        loans = grow.grow_shrink(k, board, snapshot.now, rank, by_id, placed, packed, grown_old, idle_old, notes)

        alive_ids = set(ranking.tier)

        def waits(t: TrialView) -> int:
            return 0 if t.id in placed else int((old.get(str(t.id)) or {}).get("wait", 0)) + 1

        state = {
            "trials": {
                str(t.id): {
                    "tier": ranking.tier[t.id],
                    "pass": ranking.passes[t.id],
                    "ds": t.device_seconds,
                    "w": standing[t.id].weight,
                    "priority": standing[t.id].promise,
                    # with gang_patience: rounds in a row it has waited
                    **({"wait": waits(t)} if x.gang and x.gang_patience is not None else {}),
                }
                for t in cands
            },
            "exclusive": [t.id for t in ranking.exclusive],
            "rank": rank,
            "packs": [pk.to_state() for pk in live],
            "bad_pairs": sorted([a, b] for a, b in bad if a in alive_ids and b in alive_ids),
            "grown": loans.grown,
            "idle_since": loans.idle_since,
        }
        plan = board.placement()
        until = quiet.quiet_until(k, snapshot, cands, standing, stop, live, board, plan)
        return Plan(placement=plan, stop=stop, state=state, notes=tuple(notes), reasons=reasons, quiet_until=until)
