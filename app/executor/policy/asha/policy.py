"""`AshaPolicy`: one round of ASHA or Hyperband composed of its rules (`rules`), with the memos that keep
a round's cost per alive trial small (the package docstring tells the whole policy)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from itertools import compress
from operator import attrgetter
from typing import Any

from quanta.executor.policy.asha import pareto_rungs, rules
from quanta.executor.policy.asha.held import Held, HeldSet
from quanta.executor.policy.asha.rules import Decided, Round
from quanta.executor.policy.asha.rung_check import rungs_passed
from quanta.executor.policy.knobs import AshaKnobs, JudgeKnobs
from quanta.executor.policy.placement.board import Board
from quanta.executor.policy.types import ClusterSnapshot, Plan, SearchView, TrialView
from quanta.search.fidelity import RungRecords, passed_values, report_values, rungs_of

# A trial's rung values as read from one curve: (the curve, sign of the goal, its levels, the values, its
# reports at those rungs for rung_check: None until asked for).
_Passed = tuple[Sequence[tuple[int, float]], float, tuple[int, ...], tuple[float, ...], tuple[float, ...] | None]
_ID = attrgetter("id")
_MEMO_SEARCHES = 16  # searches whose trials' rung values are memoised at once


class AshaPolicy:
    """`plan(snapshot)` for ASHA (`brackets=1`) and Hyperband (`brackets>1`); see the package docstring."""

    name = "asha"
    Knobs = AshaKnobs  # and HyperbandKnobs, which extends it
    judge_knobs: JudgeKnobs | None = None  # its rungs are its own judging: it plans without verdicts

    def __init__(self, knobs: AshaKnobs | None = None):
        self.knobs = knobs or AshaKnobs()
        self.name = self.knobs.policy
        # Memo, not state: each alive trial's values at its rungs as read last round from its curve (an
        # immutable tuple: views of trials nothing happened to are reused, so most curves are the very
        # same object). A held trial is seen every round while its curve does not change; reading it
        # again each round made a round O(alive trials x reports).
        # Per search (a policy plans one search's group at a time under the share layer).
        self._passed: dict[int, dict[int, _Passed]] = {}
        # The records this policy handed out last round (`Plan.state["records"]`): when this round's state
        # carries that very object back, a memoised trial's values are in it already (see `plan`).
        self._records_out: Mapping[str, Mapping[str, float]] | None = None
        self._levels: dict[tuple[int, int, int], tuple[int, ...]] = {}  # see `levels`
        # Memo, not state: the trials this policy left held last round (`HeldSet`), and the `allowed` it
        # handed out. A held trial whose view is the very same object (nothing happened to it) and whose
        # `allowed` came back unchanged is held at the same rung with the same loss again (pause mode), as
        # long as rung_check passed no new rung over this round (the round then re-decides them all): only a
        # promotion moves it, decided on the front of its rung's sorted held trials. A round then costs a few
        # C-level passes per alive trial, not a Python re-decision per held one (they are a long search's bulk).
        k = self.knobs
        self._carry = k.mode == "pause"
        self._held = HeldSet()
        self._allowed_out: Mapping[str, int] | None = None
        self._sorted: dict[str, tuple[int, list[float]]] = {}  # `RungRecords`' sorted_memo, for those records
        # Memo, not state: what `pareto_rungs.ranked` keeps between rounds (`ParetoMemo`).
        self._pareto = pareto_rungs.ParetoMemo()

    # ---- rungs -----------------------------------------------------------------------------------

    def levels(self, trial: TrialView, search: SearchView | None) -> tuple[int, ...]:
        """The rungs of `trial` in steps (its bracket's), ending at its max_steps."""
        key = (trial.max_steps, search.max_steps if search else 0, self.bracket(trial))
        out = self._levels.get(key)
        if out is None:  # a pure function of the key (and the knobs): asked for every trial every round
            k = self.knobs
            out = self._levels[key] = rungs_of(max(1, key[0] or key[1] or 1), k.eta, k.min_steps, key[2])
        return out

    def bracket(self, trial: TrialView) -> int:
        return trial.id % self.knobs.brackets

    # ---- the round -------------------------------------------------------------------------------

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        if not any(s.pareto for s in snapshot.searches):
            return self._plan(snapshot)
        # Searches with several objectives or constraints: the rules run on Pareto positions (`pareto_rungs`).
        ranked, points = pareto_rungs.ranked(snapshot, self.levels, self.bracket, self._pareto)
        plan = self._plan(ranked)
        return replace(plan, state={**plan.state, pareto_rungs.PARETO_STATE: points})

    def _plan(self, snapshot: ClusterSnapshot) -> Plan:
        k = self.knobs
        state = snapshot.policy_state
        old_allowed: Mapping[str, int] = state.get("allowed", {})
        old_records: Mapping[str, Mapping[str, float]] = state.get("records", {})
        carried = old_records is self._records_out  # last round's records, as this policy left them
        if not carried:
            self._sorted = {}  # the memo holds for the records this policy handed out only
        searches = {s.id: s for s in snapshot.searches}
        # The trials held last round that are held again (see `_held`): valid only on the state this policy
        # handed out; the others are decided below.
        again = self._held
        memo_before = dict(self._passed)  # restored if the round must be re-decided in full (below)
        valid = carried and old_allowed is self._allowed_out and self._carry
        if not valid or not again.searches() <= searches.keys():
            again.clear()
        alive = snapshot.alive()
        r = Round(
            knobs=k,
            snapshot=snapshot,
            searches=searches,
            book=RungRecords(old_records, self._sorted),
            levels=self.levels,
            allowed=dict(again.allowed),
            board=Board(snapshot),
        )
        # First every rung each trial has reported past is recorded, then each trial is decided at the
        # rung it was allowed to run to, against all of this round's records (order does not matter).
        reports = RungRecords(state.get("reports", {})) if k.rung_check is not None else None
        decided = self._record_rungs(r, again.split(alive), carried, reports)
        old_passed = state.get("passed", {})
        passed = self._rungs_passed(decided, again, reports or r.book, old_passed)
        # A rung newly passed over moves trials held below it: every trial is decided afresh this round.
        newly = [(key, int(v[0])) for key, v in passed.items() if int(v[0]) != int(old_passed.get(key, (0,))[0])]
        if newly and len(again):
            self._passed = memo_before
            again.clear()
            return self._plan(snapshot)  # with nothing held again: each trial decided in arrival order
        for key, n in newly:
            why = "they rank unlike the next"
            r.notes.append(f"asha: search/bracket {key}: its lowest {n} rung(s) passed over ({why})")

        rules.decide_at_rungs(r, decided, old_allowed, passed)
        for t in r.movers:  # running trials keep their devices until their next rung
            if t.running:
                r.board.put(t.id, t.devices)
        # Promotions (Li et al.'s get_job), before any new trial: with `rule: rent` first the best of a thin
        # rung once it has waited its next rung's cost, then the top 1/eta of each rung.
        due, thin = rules.candidates(r, again)
        since = rules.held_since(thin, state.get("held", {}), snapshot.now)
        rules.promote(r, (h for h in thin if rules.rent_paid(r, h, since)), "promote (waited its next rung's cost)")
        rules.promote(r, due, "promote")
        rules.start_new(r)
        rules.promote(r, rules.idle_runs(r, again), "run (idle device)", k.tail_order == "lowest")
        return self._plan_of(r, again, alive, since, passed, reports)

    def _record_rungs(
        self, r: Round, others: Sequence[TrialView], carried: bool, reports: RungRecords | None
    ) -> list[Decided]:
        """Record every rung each of `others` (the alive trials not held again) has reported past, into
        the round's records (and, for rung_check, each trial's report at each rung into `reports`); return
        the trials of searches, to decide, in order. Trace jobs (no search) go to the movers: first come,
        first served."""
        decided: list[Decided] = []
        olds = [self._passed.pop(s.id, {}) for s in r.snapshot.searches]
        seen: dict[int, _Passed] = olds[0] if len(olds) == 1 else {k: v for old in olds for k, v in old.items()}
        read: dict[int, dict[int, _Passed]] = {}
        for t in others:
            search = r.searches.get(t.search_id)
            if search is None:
                r.movers.append(t)
                continue
            levels = self.levels(t, search)
            group = t.id % self.knobs.brackets  # its bracket (`bracket`)
            decided.append((t, search, levels, group))
            sign = -1.0 if search.goal == "maximize" else 1.0
            last = seen.get(t.id)
            reported: tuple[float, ...] | None = None
            if last is not None and last[0] is t.curve and last[1] == sign and last[2] == levels:
                values, reported = last[3], last[4]  # the same (immutable) curve as last round: the same values
                fresh = not carried  # recorded last round into the records this round carries back
            else:
                values = passed_values([(step, sign * v) for step, v in t.curve if math.isfinite(v)], levels)
                fresh = True
            if reports is not None and fresh and values:  # rung_check on reports: what it showed at each rung
                if reported is None:  # read once per curve: records that moved re-record every trial
                    oriented = [(step, sign * v) for step, v in t.curve if math.isfinite(v)]
                    reported = report_values(oriented, levels)
                reports.record_values(search.id, t.id, reported, group)
            if type(t.curve) is tuple:
                read.setdefault(search.id, {})[t.id] = (t.curve, sign, levels, values, reported)
            if fresh:
                r.book.record_values(search.id, t.id, values, group)
        for tid, h in self._held.entries.items():  # held again: not read this round, its values still hold
            if (last := seen.get(tid)) is not None and last[0] is h.view.curve:
                read.setdefault(h.view.search_id, {})[tid] = last
        self._passed.update(read)
        while len(self._passed) > _MEMO_SEARCHES:  # searches no longer planned (ended) age out
            del self._passed[next(iter(self._passed))]
        return decided

    def _plan_of(
        self,
        r: Round,
        again: HeldSet,
        alive: Sequence[TrialView],
        since: Mapping[int, tuple[int, float]],
        passed: Mapping[str, tuple[int, bool]],
        reports: RungRecords | None,
    ) -> Plan:
        """The round's plan: its placement, stops, holds (released past the memory budget), the step each
        placed trial parks at, and the state the next round reads; the held trials are carried to it."""
        placement = r.board.placement()
        release = again.release(r.held, r.placed_held, self.knobs.memory_budget_mb)
        for promoted in r.placed_held:
            if promoted in again.entries:
                again.remove(promoted)
        if self._carry:  # carried to the next round (see `_held`)
            for (rung, value, t), (levels, group) in zip(r.held, r.held_levels, strict=True):
                if t.id not in r.placed_held:
                    again.add(Held(t, rung, value, levels, group))
            still: AbstractSet[int] = again.entries.keys()
        else:
            still = {t.id for _, _, t in r.held if t.id not in r.placed_held}
        ids = list(map(_ID, alive))
        hold = tuple(compress(ids, map(still.__contains__, ids)))  # in arrival order (C-level: every round)
        placed = {i for ids in placement.values() for i in ids}
        state: dict[str, object] = {"allowed": r.allowed, "records": r.book.records}
        self._records_out = r.book.records
        self._allowed_out = r.allowed
        if since:
            state["held"] = {str(tid): list(v) for tid, v in since.items() if tid not in r.placed_held}
        if passed:
            state["passed"] = {key: list(v) for key, v in passed.items()}
        if reports is not None:
            state["reports"] = reports.records
        return Plan(
            placement=placement,
            stop=tuple(r.stop),
            reasons=r.reasons,
            state=state,
            notes=tuple(r.notes),
            hold=hold,
            release=release,
            limits={tid: step for tid, step in r.limits.items() if tid in placed},
        )

    def _rungs_passed(
        self,
        decided: Sequence[Decided],
        again: HeldSet,
        book: RungRecords,
        old: Mapping[str, Sequence[Any]],
    ) -> dict[str, tuple[int, bool]]:
        """With `rung_check`: per "search/bracket" of the trials decided this round and those held again,
        (how many of the lowest rungs are passed over, whether that is decided), carried from `old` and
        advanced on this round's records (`quanta.executor.policy.asha.rung_check`), in key order. Empty without
        the knob."""
        k = self.knobs
        if k.rung_check is None or k.mode != "pause":
            return {}
        groups: dict[tuple[int, int], tuple[int, ...]] = {}  # (search, bracket) -> its first trial's levels
        for _t, search, levels, group in decided:
            groups.setdefault((search.id, group), levels)
        for key, levels in again.groups():
            groups.setdefault(key, levels)
        return rungs_passed(dict(sorted(groups.items())), book, old, k.rung_check, k.rung_check_pairs)
