"""Asynchronous successive halving (ASHA, Li et al. 2020) and Hyperband as brackets of it, with
Quanta's twist: a trial below its rung is *parked*, not killed.

Rungs are `app.search.fidelity.rungs(max_steps, first, eta)` steps; in Hyperband bracket `b` (of
`brackets`) the first rung is `min_steps * eta**b` (`min_steps` defaults to
`fidelity.default_first_rung`, max_steps / eta**4), and trial `i` goes to bracket `i % brackets`
(trial ids; ASHA is Hyperband with one bracket). A trial's value at a rung is the best loss it reported
until its first report past the rung (`fidelity.value_at`, oriented by the search's goal), recorded
once. Trials of different searches, or of different brackets, are never compared.

Two variants (`mode`):

- `pause` (ASHA's promotion type, what no peer does cheaply): a trial that reaches the rung it was
  allowed to run to is *held*: parked in host memory (its process keeps its state) and left out of its
  search's parallelism, so new configurations keep coming. Whenever a device is free the policy
  promotes, as Li et al.'s `get_job`: the best held trial of the highest rung whose top
  `floor(n / eta)` (n = trials recorded at that rung, finished ones included) holds it; else it starts
  a queued trial (arrival order); else, once its search will create no more trials
  (`SearchView.more_trials`), rather than leave a device idle, it promotes the best held trial of the
  highest rung anyway. A promoted trial resumes where it stopped: no lost work, no
  restart. Held trials count against `memory_budget_mb` of host memory (their measured RSS); past it
  the lowest-ranked (lowest rung, then worst value) are released: checkpointed and freed, to come back
  from the checkpoint if promoted later.
  With `rule: rent` (the default) promotion is by rank too, but the best held trial of a rung with
  fewer than `eta` recorded waits only as long as its next rung would cost the cluster (its device time
  to that rung / the devices), then goes on (`_rent_paid`); when it was held is kept in the state. Under
  `rule: promotion` (Li et al.'s alone) the first trial to climb to a rung waits there for `eta - 1` more.
- `kill` (the classic stopping type, as Ray Tune's ASHAScheduler): a trial reaching a rung continues
  if its loss is at or below the `100 / eta` percentile of the losses recorded at that rung so far
  (itself included), else it is stopped for good.

With `rung_check` (on by default: 0.5 on the reports after 10 pairs, see `AshaKnobs`) a rung judges
only while it ranks trials as the next rung does: once `rung_check_pairs` trials are recorded at both, a
rung whose Spearman correlation with the next one is below `rung_check` is passed over for the rest of
the search (lowest rungs first; its held trials go on as devices free; the plan notes it). The pairs are
the trials the search promoted past the rung, which is what it can measure itself: on LCBench the
per-epoch values of such trials correlate 0.21 at epoch 1 and 0.66-0.83 from epoch 2 on (median of 24
tasks). The correlation is taken on each trial's loss at its first report past each rung (kept in the
state as `reports`), not on the best-so-far records, which contain one another and agree by
construction. The decision is kept in the state (`passed`).

Running trials are never preempted (a worker runs its job to its next rung); `Plan.limits` asks each
placed trial to park itself at its first report past its next rung, so it stops there rather than a
quantum later. A rung is judged at the first report past it (`fidelity.value_at`); a trial that has not
reported past its rung goes on until it does. Trials without a search (trace
jobs) run first-come first-served.

Pure: no I/O, no clock. State (JSON): per trial the rung it may run to, per (search, bracket, rung)
the values recorded, with `rule: rent` per held trial its rung and since when it waits there, and with
`rung_check` per (search, bracket) how many of the lowest rungs are passed over and whether that is
decided.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import compress
from operator import attrgetter
from typing import Any

from app.executor.policy.asha.held import Held, HeldSet, Where
from app.executor.policy.asha.rung_check import rungs_passed
from app.executor.policy.knobs import AshaKnobs, JudgeKnobs
from app.executor.policy.placement.board import Board
from app.executor.policy.types import ClusterSnapshot, Plan, SearchView, TrialView
from app.search.fidelity import RungRecords, cutoff_sorted, default_first_rung, passed_values, report_values, rungs

# A trial's rung values as read from one curve: (the curve, sign of the goal, its levels, the values).
_Passed = tuple[Sequence[tuple[int, float]], float, tuple[int, ...], tuple[float, ...]]
_ID = attrgetter("id")
_MEMO_SEARCHES = 16  # searches whose trials' rung values are memoised at once


class AshaPolicy:
    """`plan(snapshot)` for ASHA (`brackets=1`) and Hyperband (`brackets>1`); see the module docstring."""

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

    # ---- rungs -----------------------------------------------------------------------------------

    def levels(self, trial: TrialView, search: SearchView | None) -> tuple[int, ...]:
        """The rungs of `trial` in steps (its bracket's), ending at its max_steps."""
        key = (trial.max_steps, search.max_steps if search else 0, self.bracket(trial))
        out = self._levels.get(key)
        if out is None:  # a pure function of the key (and the knobs): asked for every trial every round
            k = self.knobs
            max_steps = max(1, key[0] or key[1] or 1)
            first = k.min_steps if k.min_steps is not None else default_first_rung(max_steps, k.eta)
            out = self._levels[key] = rungs(max_steps, max(1, round(first * k.eta ** key[2])), k.eta)
        return out

    def bracket(self, trial: TrialView) -> int:
        return trial.id % self.knobs.brackets

    # ---- the round -------------------------------------------------------------------------------

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        k = self.knobs
        old_allowed: Mapping[str, int] = snapshot.policy_state.get("allowed", {})
        old_records: Mapping[str, Mapping[str, float]] = snapshot.policy_state.get("records", {})
        carried = old_records is self._records_out  # last round's records, as this policy left them
        if not carried:
            self._sorted = {}  # the memo holds for the records this policy handed out only
        book = RungRecords(old_records, self._sorted)
        brackets = k.brackets
        searches = {s.id: s for s in snapshot.searches}
        stop: list[int] = []
        reasons: dict[int, str] = {}
        notes: list[str] = []
        held: list[tuple[int, float, TrialView]] = []  # held this round and not last: (rung index, loss, trial)
        held_levels: list[tuple[tuple[int, ...], int]] = []  # beside `held`: (its levels, its bracket)
        movers: list[TrialView] = []  # trials to keep running or to start, in arrival order
        limits: dict[int, int] = {}

        # The trials held last round that are held again (see `_held`): valid only on the state this policy
        # handed out; the others are decided below.
        again = self._held
        memo_before = dict(self._passed)  # restored if the round must be re-decided in full (below)
        valid = carried and old_allowed is self._allowed_out and self._carry
        if not valid or not again.searches() <= searches.keys():
            again.clear()
        alive = snapshot.alive()
        others = again.split(alive)
        allowed: dict[str, int] = dict(again.allowed)

        # First every rung each trial has reported past is recorded, then each trial is decided at the
        # rung it was allowed to run to, against all of this round's records (order does not matter).
        of_search: list[tuple[TrialView, SearchView, tuple[int, ...], int]] = []  # (trial, search, levels, bracket)
        olds = [self._passed.pop(s.id, {}) for s in snapshot.searches]
        seen: dict[int, _Passed] = olds[0] if len(olds) == 1 else {k: v for old in olds for k, v in old.items()}
        read: dict[int, dict[int, _Passed]] = {}
        reports = RungRecords(snapshot.policy_state.get("reports", {})) if k.rung_check is not None else None
        for t in others:
            search = searches.get(t.search_id)
            if search is None:
                movers.append(t)  # a trace job: first come, first served
                continue
            levels = self.levels(t, search)
            group = t.id % brackets  # its bracket (`bracket`)
            of_search.append((t, search, levels, group))
            sign = -1.0 if search.goal == "maximize" else 1.0
            last = seen.get(t.id)
            if last is not None and last[0] is t.curve and last[1] == sign and last[2] == levels:
                values = last[3]  # the same (immutable) curve as last round: the same values
                fresh = not carried  # recorded last round into the records this round carries back
            else:
                values = passed_values([(step, sign * v) for step, v in t.curve if math.isfinite(v)], levels)
                fresh = True
            if type(t.curve) is tuple:
                read.setdefault(search.id, {})[t.id] = (t.curve, sign, levels, values)
            if fresh:
                book.record_values(search.id, t.id, values, group)
            if reports is not None and fresh and values:  # rung_check on reports: what it showed at each rung
                oriented = [(step, sign * v) for step, v in t.curve if math.isfinite(v)]
                reports.record_values(search.id, t.id, report_values(oriented, levels), group)
        self._passed.update(read)
        while len(self._passed) > _MEMO_SEARCHES:  # searches no longer planned (ended) age out
            del self._passed[next(iter(self._passed))]
        old_passed = snapshot.policy_state.get("passed", {})
        passed = self._rungs_passed(of_search, again, reports or book, old_passed)
        # A rung newly passed over moves trials held below it: every trial is decided afresh this round.
        newly = [(key, int(v[0])) for key, v in passed.items() if int(v[0]) != int(old_passed.get(key, (0,))[0])]
        if newly and len(again):
            self._passed = memo_before
            again.clear()
            return self.plan(snapshot)  # with nothing held again: each trial decided in arrival order
        for key, n in newly:
            notes.append(f"asha: search/bracket {key}: its lowest {n} rung(s) passed over (they rank unlike the next)")
        for t, search, levels, group in of_search:
            tid = str(t.id)
            rung = int(old_allowed.get(tid, 0))
            if passed:  # rung_check: rungs passed over are not waited at
                rung = max(rung, passed.get(f"{search.id}/{group}", (0, False))[0])
            while rung < len(levels) - 1:
                recorded = book.at(search.id, rung, group)
                value = recorded.get(tid)
                if value is None:
                    break  # not reported past its rung yet: it goes on (its limit parks it there)
                if k.mode == "kill":
                    if value <= cutoff_sorted(book.ranked(search.id, rung, group), k.eta):
                        rung += 1
                        continue
                    stop.append(t.id)
                    reasons[t.id] = (
                        f"below the top 1/{k.eta:g} of rung {levels[rung]} steps "
                        f"(loss {value:.4g}; {len(recorded)} trials there)"
                    )
                    notes.append(f"asha: stop {t.id}: {reasons[t.id]}")
                else:
                    held.append((rung, value, t))
                    held_levels.append((levels, group))
                break
            allowed[tid] = rung
            if t.id in stop or (held and held[-1][2] is t):
                continue
            movers.append(t)
            limits[t.id] = levels[rung]

        board = Board(snapshot)
        for t in movers:  # running trials keep their devices until their next rung
            if t.running:
                board.put(t.id, t.devices)
        placed_held: set[int] = set()

        def promote(candidates: Iterable[tuple[int, float, TrialView]], why: str) -> None:
            """Place held trials in order (highest rung, then best) while devices are free; each goes on
            to its next rung."""
            for rung, value, t in sorted(candidates, key=lambda h: (-h[0], h[1], h[2].arrival, h[2].id)):
                if board.n_free == 0:
                    return
                if self._place(board, t):
                    placed_held.add(t.id)
                    allowed[str(t.id)] = rung + 1
                    limits[t.id] = self.levels(t, searches.get(t.search_id))[rung + 1]
                    notes.append(f"asha: {why} {t.id} past rung {rung} (loss {value:.4g})")

        # Promotions (Li et al.'s get_job): the top 1/eta of a rung, before any new trial; with `rule: rent`
        # first the best of a thin rung once it has waited its next rung's cost. Of the trials held again
        # only the front of each rung is read (they are sorted there).
        due: list[tuple[int, float, TrialView]] = []
        thin: list[tuple[int, float, TrialView]] = []
        bars: dict[Where, tuple[float, float]] = {}  # per rung: (promotion bar, thin bar)
        rent = k.rule == "rent"

        def bar_of(where: Where) -> tuple[float, float]:
            bar = bars.get(where)
            if bar is None:
                ranked = book.ranked(*where)
                thin_bar = ranked[0] if rent and len(ranked) < k.eta else -math.inf
                bar = bars[where] = (self._promotion_bar(ranked), thin_bar)
            return bar

        for h in held:
            rung, value, t = h
            bar = bar_of((t.search_id, rung, t.id % brackets))
            if value <= bar[0]:
                due.append(h)
            elif value <= bar[1]:
                thin.append(h)  # the best of a rung rank promotion cannot promote from yet
        for where in again.rungs():
            bar = bar_of(where)
            for a in again.best(where, max(bar)):
                (due if a.loss <= bar[0] else thin).append((a.rung, a.loss, a.view))
        since = self._held_since(thin, snapshot.policy_state.get("held", {}), snapshot.now)
        promote((h for h in thin if self._rent_paid(h, since, snapshot)), "promote (waited its next rung's cost)")
        promote(due, "promote")
        for t in movers:
            if not t.running and board.n_free > 0:
                self._place(board, t)
        # Work-conserving: a device nothing else wants runs the best held trial of the highest rung, of a
        # search that will create no more trials (one that will, gets a new configuration there as soon
        # as the controller has made it: the hold freed room in its parallelism).
        if board.n_free > 0 and any(not s.more_trials for s in snapshot.searches):
            every = [*held, *((a.rung, a.loss, a.view) for a in again.entries.values())]
            promote(
                (h for h in every if h[2].id not in placed_held and not searches[h[2].search_id].more_trials),
                "run (idle device)",
            )
        placement = board.placement()
        release = again.release(held, placed_held, k.memory_budget_mb)
        for promoted in placed_held:
            if promoted in again.entries:
                again.remove(promoted)
        if self._carry:  # carried to the next round (see `_held`)
            for (rung, value, t), (levels, group) in zip(held, held_levels, strict=True):
                if t.id not in placed_held:
                    again.add(Held(t, rung, value, levels, group))
            still: AbstractSet[int] = again.entries.keys()
        else:
            still = {t.id for _, _, t in held if t.id not in placed_held}
        ids = list(map(_ID, alive))
        hold = tuple(compress(ids, map(still.__contains__, ids)))  # in arrival order (C-level: every round)
        placed = {i for ids in placement.values() for i in ids}
        state: dict[str, object] = {"allowed": allowed, "records": book.records}
        self._records_out = book.records
        self._allowed_out = allowed
        if since:
            state["held"] = {str(tid): list(v) for tid, v in since.items() if tid not in placed_held}
        if passed:
            state["passed"] = {key: list(v) for key, v in passed.items()}
        if reports is not None:
            state["reports"] = reports.records
        return Plan(
            placement=placement,
            stop=tuple(stop),
            reasons=reasons,
            state=state,
            notes=tuple(notes),
            hold=hold,
            release=release,
            limits={tid: step for tid, step in limits.items() if tid in placed},
        )

    # ---- helpers ---------------------------------------------------------------------------------

    def _rungs_passed(
        self,
        of_search: Sequence[tuple[TrialView, SearchView, tuple[int, ...], int]],
        again: HeldSet,
        book: RungRecords,
        old: Mapping[str, Sequence[Any]],
    ) -> dict[str, tuple[int, bool]]:
        """With `rung_check`: per "search/bracket" of the trials decided this round and those held again,
        (how many of the lowest rungs are passed over, whether that is decided), carried from `old` and
        advanced on this round's records (`app.executor.policy.asha.rung_check`), in key order. Empty without
        the knob."""
        k = self.knobs
        if k.rung_check is None or k.mode != "pause":
            return {}
        groups: dict[tuple[int, int], tuple[int, ...]] = {}  # (search, bracket) -> its first trial's levels
        for _t, search, levels, group in of_search:
            groups.setdefault((search.id, group), levels)
        for key, levels in again.groups():
            groups.setdefault(key, levels)
        return rungs_passed(dict(sorted(groups.items())), book, old, k.rung_check, k.rung_check_pairs)

    def _promotion_bar(self, ranked: Sequence[float]) -> float:
        """The largest loss a held trial of a rung with these sorted losses (not empty) may have to be
        promoted: Li et al.'s test (in the top 1/eta, `fidelity.in_top_sorted`: fewer than floor(n / eta)
        strictly better, i.e. at or below the floor(n / eta)-th loss). One bar per rung and round, then one
        comparison per held trial (held trials are every round's bulk)."""
        top = math.floor(len(ranked) / self.knobs.eta)
        return ranked[top - 1] if top > 0 else -math.inf

    @staticmethod
    def _held_since(
        held: list[tuple[int, float, TrialView]], old: Mapping[str, Sequence[float]], now: float
    ) -> dict[int, tuple[int, float]]:
        """Per trial of `held` (rung, since when it has been held at that rung as the rung's best): carried
        over from last round's state while that lasts, else now."""
        out: dict[int, tuple[int, float]] = {}
        for rung, _value, t in held:
            last = old.get(str(t.id))
            out[t.id] = (rung, float(last[1])) if last is not None and int(last[0]) == rung else (rung, now)
        return out

    def _rent_paid(
        self, h: tuple[int, float, TrialView], since: Mapping[int, tuple[int, float]], snapshot: ClusterSnapshot
    ) -> bool:
        """`rule: rent`: whether the best of a thin rung (fewer than eta records) has waited there as long as its
        next rung would cost the cluster: its device time from this rung to the next (at its own measured
        seconds per step) divided by the devices planned over.

        Why (ski rental): waiting costs the search the delay when the trial is the eventual winner; going
        on costs that device time when it is not. Waiting as long as going on would cost bounds either
        loss at twice the better choice's, where textbook promotion waits for eta - 1 more trials to climb
        that high, unbounded (on the longer MNIST-1D workload the winner waited 7-66 s at one rung), and the
        stopping rule sends on whatever arrives first (costly at LCBench's hard target)."""
        rung, _value, t = h
        levels = self.levels(t, snapshot.search(t.search_id))
        if t.steps_done > 0 and t.device_seconds > 0:
            per_step = t.device_seconds / t.steps_done
        elif t.rate_solo:
            per_step = 1.0 / t.rate_solo
        else:
            return False  # no measure of its cost yet
        cost = per_step * (levels[rung + 1] - levels[rung]) / max(1, len(snapshot.devices) // max(1, t.devices_needed))
        return snapshot.now - since[t.id][1] >= cost

    def _place(self, board: Board, t: TrialView) -> bool:
        devices = board.choose(t)
        if devices is None:
            return False
        board.put(t.id, devices)
        return True
