"""The share layer: device time divided between users by weight, and among a user's running searches
equally; inside its share each search's own policy decides which of its trials run (the two levels of
Gandiva-fair), with Themis's finish-time fairness measured and, as an option, favoured.

Groups. A *group* is what one policy plans for: the trials of one search (key ``s<id>``), or the
trials of one user that belong to no search (trace jobs, key ``u<owner>``, planned by the base
policy). A group's user is its search's `SearchView.owner` (a job's `TrialView.owner`); the empty name
is a user like any other, so a cluster of unowned searches is one user.

One round (`SharePolicy.plan`), pure (no I/O, no clock: the snapshot carries `now`):

1. **Accounting**, in device-seconds over a window. For the interval since the last round, each user
   is charged the devices the last plan gave its trials (a device holding k users' trials counts 1/k
   to each) and credited its *fair* share then (the water-filled share of step 2, in devices) and its
   *ideal* share then (min(D * w_u / sum of the active users' weights, its demand): what it would get
   alone on its fair share of the cluster). All three are exponentially decaying sums
   (time constant `window_s`): `used`, `fair`, `ideal`, kept in `Plan.state["share"]`.
   **rho** (Themis's finish-time fairness) of a user is ``ideal / used`` over the window: a job's
   finishing time is its remaining work over the device time it gets per second, so the time to
   finish on the shared cluster over the time alone on its fair share is estimated by the fair-share
   device time it should have had over the device time it had. rho > 1: the user fell behind its fair
   share; < 1: it ran ahead on devices others left idle. Each round's notes report it per user.
2. **Allotment**, in whole devices. A group's demand is the devices its alive trials need (trials its
   policy held at a rung last round excepted), at most D = all devices. Fractional shares by weighted
   water-filling (max-min fairness): each user with demand gets D * w_u / sum w, a user who wants less
   gets its demand and the rest is divided again among the others (work-conserving); a user's share
   is divided equally among its groups the same way. Each group then gets the floor of its share; the
   devices left go one at a time to the groups that still want more, the group of the user furthest
   behind its window account (`fair - used`) first, then the largest fractional part, so that over a
   few quanta each user gets its fractional share (e.g. 1.5 devices = 1 and 2 in turn). Devices no
   group wants are given out all the same (a policy may pack or lend them). With
   `ShareKnobs.favour_worst_rho`, a user's weight is multiplied by its rho (clamped to
   [1, `rho_cap`]) before water-filling, so the users furthest behind catch up first (Themis).
   With `ShareKnobs.rho_bound` (Themis's fairness knob), fair shares are guaranteed only to the users
   whose rho exceeds the bound (and to users with no rho on the books yet); the devices left are
   divided among all groups by the demand each has left, as one policy time-slicing every trial alike
   would (`bounded_shares`). A user within the bound thus lends what its share would have held back to
   the users with more work, until it falls behind the bound itself: fairness within a factor of the
   bound, at less cost in mean completion time than strict shares. The notes mark the users whose
   share was guaranteed that round.
3. **Devices.** Each group keeps the devices its running trials hold (oldest trial first, within its
   allotment), then those of its parked resident trials, then takes unclaimed devices: on nodes it is
   on first, then on the nodes with most unclaimed devices.
4. **Plans.** Each group's policy plans on a sub-snapshot: the group's trials, its devices, its own
   state from last round (`Plan.state["groups"][key]["state"]`) and, for a policy that plans on
   verdicts (`judge_knobs`), the judge's verdicts on its trials (judged here, its state carried the
   same way). A trial resident on devices outside its group's set is shown there as not resident, so
   its policy may start it elsewhere; the reconciler parks it. The plans merge: placements (disjoint
   by construction), stops, holds, releases, limits, exploits and notes.
5. **Borrowing.** Devices a group was given but left empty (its trials need more devices than its
   share has left, or it needs fewer than it got) go to groups that left trials waiting, the user
   furthest behind first: such a group plans again with them added. A lender that wants them back
   gets them at its next round (its allotment counts only its own demand), so device time a user does
   not use goes to the others and comes back within one quantum.

One group (one user with one search, `quanta run`, or a simulated trace without users): its policy
plans on the snapshot itself with its own state and verdicts, exactly as it would alone.

Device kinds (Gavel). On a cluster of several kinds, `used` is counted in *effective throughput*, not
device-seconds: a device running trial t of kind k counts eff(t, k) (t's rate there over its rate on
the cluster's average device, `quanta.executor.policy.placement.kinds`), so fair and ideal shares, in devices, are
in the same unit (an average device is 1) and a user holding the devices its trials gain most from is
charged for the gain. A group takes unclaimed devices of the kinds its trials run on (kind-aware: gain
most on) first, the groups with the fewest usable kinds choosing first (`assign_devices`). Each
group's policy places by kind inside its devices (through its `Board`),
the sub-snapshots normalise effective rates over the whole cluster (`kind_counts`), and the merged
plan is rebalanced across groups (`kind_rebalance.rebalance`: trials exchanged between kinds while the summed
effective rate rises), so a group's trials reach the kind they gain most on even when its devices
were of another. On a cluster of one kind all of this counts exactly as device-seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress
from operator import attrgetter, not_
from typing import Any

from quanta.executor.policy.knobs import ShareKnobs
from quanta.executor.policy.placement.device_maps import device_maps
from quanta.executor.policy.placement.kind_rebalance import rebalance
from quanta.executor.policy.placement.kinds import Effective, kind_map
from quanta.executor.policy.share.accounts import SHARE_STATE, Accounts, allocation
from quanta.executor.policy.share.allotment import Group, bounded_shares, fair_shares, groups_of, whole_devices
from quanta.executor.policy.types import ClusterSnapshot, Plan, Policy, TrialView
from quanta.search.judge import judge
from quanta.search.verdict import JudgeKnobs, Verdict

GROUPS_STATE = "groups"

__all__ = ["GROUPS_STATE", "SharePolicy", "assign_devices", "sub_snapshot"]


@dataclass
class _Round:
    """One group's working values during a round (never leaves `SharePolicy.plan`)."""

    group: Group
    policy: Policy
    state: Mapping[str, Any]
    judge_state: Mapping[str, Any]
    held: frozenset[int] = frozenset()  # trials its policy held at a rung last round
    verdicts: Mapping[int, Verdict] = field(default_factory=dict)
    judged: Mapping[str, Any] = field(default_factory=dict)
    devices: list[str] = field(default_factory=list)
    plan: Plan = field(default_factory=Plan)


class SharePolicy:
    """`plan(snapshot)`: the two-level share of the module docstring. `base` plans the groups that have
    no policy of their own (trace jobs; searches `policy_of` does not know); `policy_of(search_id)` is
    a search's own policy (None: the base), and must be deterministic (the controller builds it from
    the search's spec)."""

    name = "share"
    judge_knobs: JudgeKnobs | None = None  # each group is judged here, with its own policy's knobs

    def __init__(
        self,
        base: Policy,
        knobs: ShareKnobs | None = None,
        policy_of: Callable[[int], Policy | None] | None = None,
    ):
        self.base = base
        self.knobs = knobs or ShareKnobs()
        self._policy_of = policy_of or (lambda _search_id: None)

    # ---- the round -------------------------------------------------------------------------------

    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        st = snapshot.policy_state or {}
        carried: Mapping[str, Any] = st.get(GROUPS_STATE, {}) if SHARE_STATE in st else {}
        account = Accounts.carried(st.get(SHARE_STATE, {}), snapshot.now, self.knobs.window_s)
        groups = groups_of(snapshot)
        rounds = [self._round(g, carried.get(g.key, {})) for g in groups]
        weights = {g.user: _weight(snapshot.user_weights, g.user) for g in groups}
        rho = account.rho()
        if self.knobs.favour_worst_rho:
            weights = {u: w * min(max(rho.get(u, 1.0), 1.0), self.knobs.rho_cap) for u, w in weights.items()}
        n_dev = len(snapshot.devices)
        demand = {r.group.key: min(n_dev, _demand(r)) for r in rounds}
        protected: set[str] = set()  # users whose fair share rho_bound guarantees this round
        if self.knobs.rho_bound is None:
            fair = fair_shares(n_dev, groups, weights, demand)
        else:  # a user new to the books has no rho yet: it is protected until it has one
            protected = {u for u in weights if rho.get(u, math.inf) > self.knobs.rho_bound}
            fair = bounded_shares(n_dev, groups, weights, demand, protected)
        behind = account.behind()
        if len(rounds) == 1:
            # Alone on the cluster: the whole snapshot, as the group's policy would see it without us.
            r = rounds[0]
            r.devices = [d.id for d in snapshot.devices]
            self._judge(r, snapshot)
            r.plan = r.policy.plan(replace(snapshot, policy_state=r.state, verdicts=r.verdicts))
        else:
            allot = whole_devices(n_dev, groups, fair, demand, behind)
            assigned = assign_devices(snapshot, groups, allot, behind)
            for r in rounds:
                r.devices = assigned[r.group.key]
                sub = sub_snapshot(snapshot, r.group, r.devices, r.state, {})
                self._judge(r, sub)
                r.plan = r.policy.plan(replace(sub, verdicts=r.verdicts) if r.verdicts else sub)
            self._borrow(snapshot, rounds, behind)
        return self._merge(snapshot, rounds, account, fair, demand, protected)

    def _round(self, g: Group, carried: Mapping[str, Any]) -> _Round:
        policy = (self._policy_of(g.search_id) if g.search_id else None) or self.base
        if carried.get("policy") != policy.name:
            carried = {}  # a new group (or one whose policy changed): its policy starts afresh
        held = frozenset(map(int, carried.get("hold", ())))
        return _Round(g, policy, carried.get("state", {}), carried.get("judge", {}), held)

    def _judge(self, r: _Round, sub: ClusterSnapshot) -> None:
        knobs = r.policy.judge_knobs
        if knobs is None:
            return
        judged = judge(sub, knobs, r.judge_state)
        r.verdicts, r.judged = judged.verdicts, judged.state

    def _borrow(self, snapshot: ClusterSnapshot, rounds: list[_Round], behind: Mapping[str, float]) -> None:
        """Step 5: devices left empty go to groups that left trials waiting, furthest behind first."""
        all_ids = [d.id for d in snapshot.devices]
        for r in sorted(rounds, key=lambda r: (-behind.get(r.group.user, 0.0), r.group.key)):
            used = {d for x in rounds for d in x.plan.placement}
            empty = [d for d in all_ids if d not in used and d not in r.devices]
            if not empty or not _waiting(r):
                continue
            # Its own devices that an earlier borrower took (it had left them empty) are not its to
            # plan on any more this round: planning on them again would put two groups on one device.
            taken = {d for x in rounds if x is not r for d in x.plan.placement}
            own = [d for d in r.devices if d not in taken]
            borrowed = sorted(set(own) | set(empty), key=all_ids.index)
            plan = r.policy.plan(sub_snapshot(snapshot, r.group, borrowed, r.state, r.verdicts))
            # Keep the devices it uses; the ones it still leaves empty stay free for the next borrower.
            mine = set(own)
            r.devices = [d for d in borrowed if d in mine or d in plan.placement]
            r.plan = plan

    def _merge(
        self,
        snapshot: ClusterSnapshot,
        rounds: Sequence[_Round],
        account: Accounts,
        fair: Mapping[str, float],
        demand: Mapping[str, int],
        protected: set[str],
    ) -> Plan:
        placement: dict[str, tuple[int, ...]] = {}
        stop: list[int] = []
        reasons: dict[int, str] = {}
        hold: list[int] = []
        release: list[int] = []
        limits: dict[int, int] = {}
        exploits: dict[int, tuple[int, Mapping[str, float]]] = {}
        publish: list[int] = []
        notes: list[str] = []
        groups_state: dict[str, Any] = {}
        for r in rounds:
            p = r.plan
            for d, ids in p.placement.items():
                placement[d] = placement.get(d, ()) + tuple(ids)
            stop.extend(p.stop)
            reasons.update(p.reasons)  # the verdicts travel with the stops
            hold.extend(p.hold)
            release.extend(p.release)
            limits.update(p.limits)
            exploits.update(p.exploits)
            publish.extend(p.publish)
            notes.extend(p.notes if len(rounds) == 1 else (f"{r.group.key}: {n}" for n in p.notes))
            groups_state[r.group.key] = {
                "policy": r.policy.name,
                "state": dict(p.state),
                "judge": dict(r.judged),
                "hold": list(p.hold),
            }
        user_of = {r.group.key: r.group.user for r in rounds}
        fair_u: dict[str, float] = {}
        demand_u: dict[str, int] = {}
        for key, f in fair.items():
            fair_u[user_of[key]] = fair_u.get(user_of[key], 0.0) + f
            demand_u[user_of[key]] = demand_u.get(user_of[key], 0) + demand[key]
        base_w = {u: _weight(snapshot.user_weights, u) for u in fair_u}
        total_w = sum(w for u, w in base_w.items() if demand_u[u] > 0)
        n_dev = len(snapshot.devices)
        ideal = {u: min(n_dev * base_w[u] / total_w, demand_u[u]) if total_w else 0.0 for u in fair_u}
        km = kind_map(snapshot.devices)
        weight_of: Callable[[str, int], float] | None = None
        if km.several:
            if snapshot.kind_aware and len(rounds) > 1:  # one group's own board has rebalanced already
                # Without taking whole nodes across groups: that evicts one user's trials to a slower kind
                # for another user's, a trade between users the allotment above already made (with it,
                # gandiva with shares and rho_bound on b436b2's V100+K80 mix: +14 % mean JCT, not +9 %).
                placement, moved = rebalance(snapshot, placement, take_nodes=False)
                if moved:
                    notes.append(f"share: {moved} trials exchanged between device kinds")
            eff = Effective(snapshot)
            by_id = {t.id: t for r in rounds for t in r.group.trials}

            def effective(device: str, trial_id: int) -> float:
                return eff.of(by_id[trial_id]).get(km.kind_of[device], 1.0)

            weight_of = effective

        # Whose each placed trial is (placed ones only: the held are most of the alive).
        trial_user = {i: r.group.user for r in rounds for ids in r.plan.placement.values() for i in ids}
        alloc = allocation(placement, trial_user, weight_of)
        share_state = account.after(snapshot.now, alloc, fair_u, ideal)
        if len(fair_u) > 1:
            rho = Accounts.of(share_state).rho()
            notes.extend(
                f"share: user {u or '-'}: {alloc.get(u, 0.0):g} of {n_dev} devices (fair {fair_u[u]:.2f}), "
                f"rho {rho[u]:.2f}" + (" (share guaranteed: behind the bound)" if u in protected else "")
                if u in rho
                else f"share: user {u or '-'}: {alloc.get(u, 0.0):g} devices"
                for u in sorted(fair_u)
            )
        return Plan(
            placement=placement,
            stop=tuple(stop),
            reasons=reasons,
            state={SHARE_STATE: share_state, GROUPS_STATE: groups_state},
            notes=tuple(notes),
            hold=tuple(hold),
            release=tuple(release),
            limits=limits,
            exploits=exploits,
            publish=tuple(publish),
        )


# ---- groups ----------------------------------------------------------------------------------------


_DEVICES_NEEDED = attrgetter("devices_needed")
_ID = attrgetter("id")


def _weight(weights: Mapping[str, float], user: str) -> float:
    w = float(weights.get(user, 1.0))
    return w if w > 0 and math.isfinite(w) else 1.0


def _demand(r: _Round) -> int:
    """Devices the group's alive trials need, those its policy held last round excepted."""
    trials = r.group.trials
    if not r.held:
        return sum(map(_DEVICES_NEEDED, trials))
    return sum(map(_DEVICES_NEEDED, compress(trials, map(not_, map(r.held.__contains__, map(_ID, trials))))))


def _waiting(r: _Round) -> bool:
    """The group left a trial it did not hold, stop or place (it wants more devices)."""
    placed = {i for ids in r.plan.placement.values() for i in ids}
    out = set(r.plan.hold) | set(r.plan.stop) | placed
    return any(t.id not in out for t in r.group.trials)


# ---- devices --------------------------------------------------------------------------------------


def assign_devices(
    snapshot: ClusterSnapshot, groups: Sequence[Group], allot: Mapping[str, int], behind: Mapping[str, float]
) -> dict[str, list[str]]:
    """Which devices each group plans on (step 3 of the module docstring), in cluster order. On a
    cluster of several kinds a group takes unclaimed devices of kinds its trials run on first (and,
    kind-aware, those they gain most on: the mean effective rate of its trials there), and the groups
    whose trials run on fewest kinds (then, kind-aware, gain most from one) choose first: the counts
    are fixed by then, so this changes only which devices each group gets."""
    order, node_of, members = device_maps(snapshot.devices)
    km = kind_map(snapshot.devices)
    eff = Effective(snapshot) if km.several else None
    owner: dict[str, str] = {}
    mine: dict[str, list[str]] = {g.key: [] for g in groups}
    ranked = sorted(groups, key=lambda g: (-behind.get(g.user, 0.0), g.key))

    def claim(g: Group, trials: Iterable[TrialView]) -> None:
        for t in trials:
            ds = [d for d in t.devices if d in order]
            if not ds or len(ds) != len(t.devices) or any(owner.get(d, g.key) != g.key for d in ds):
                continue
            new = [d for d in ds if d not in owner]
            if len(mine[g.key]) + len(new) > allot[g.key]:
                continue
            for d in new:
                owner[d] = g.key
                mine[g.key].append(d)

    for g in ranked:  # running trials keep their devices
        claim(g, (t for t in g.trials if t.running))
    for g in ranked:  # then parked trials' own devices (a resume without a move)
        claim(g, (t for t in g.trials if t.devices and not t.running))
    # Per group and kind: (none of its trials runs there, minus their mean effective rate there).
    prefs: dict[str, dict[str, tuple[bool, float]]] = {g.key: {} for g in groups}
    if eff is not None:
        for g in groups:
            effs = [eff.of(t) for t in g.trials]
            for k in km.counts:
                runs = any(e.get(k, 1.0) > 0 for e in effs)
                gain = sum(e.get(k, 1.0) for e in effs) / len(effs) if snapshot.kind_aware else 0.0
                prefs[g.key][k] = (not runs, -gain)

        def constraint(g: Group) -> tuple[int, float]:
            p = prefs[g.key].values()
            return sum(1 for no, _ in p if not no), min(x for _, x in p) - max(x for _, x in p)

        ranked = sorted(ranked, key=constraint)  # stable: the account order within equals
    kind_of = km.kind_of
    for g in ranked:
        need = allot[g.key] - len(mine[g.key])
        if need <= 0:
            continue
        free_on: dict[str, int] = {}
        for n, ds in members.items():
            free_on[n] = sum(1 for d in ds if d not in owner)
        home = {node_of[d] for d in mine[g.key]}
        pref = prefs[g.key]
        free = sorted(
            (d for d in order if d not in owner),
            key=lambda d: (
                pref.get(kind_of[d], (False, 0.0)),
                node_of[d] not in home,
                -free_on[node_of[d]],
                node_of[d],
                order[d],
            ),
        )
        for d in free[:need]:
            owner[d] = g.key
            mine[g.key].append(d)
    return {k: sorted(ds, key=order.__getitem__) for k, ds in mine.items()}


def sub_snapshot(
    snapshot: ClusterSnapshot,
    group: Group,
    devices: Sequence[str],
    state: Mapping[str, Any],
    verdicts: Mapping[int, Verdict],
) -> ClusterSnapshot:
    """The snapshot one group's policy plans on: its trials (those resident outside `devices` shown as
    not resident), `devices` only, its search, its own policy state and verdicts."""
    mine = set(devices)
    trials = tuple(
        t if not t.devices or all(d in mine for d in t.devices) else replace(t, devices=(), running=False)
        for t in group.trials
    )
    s = snapshot.search(group.search_id) if group.search_id else None
    return replace(
        snapshot,
        devices=tuple(d for d in snapshot.devices if d.id in mine),
        trials=trials,
        searches=(s,) if s is not None else (),
        policy_state=state,
        verdicts=verdicts,
        kind_counts=snapshot.kind_counts or kind_map(snapshot.devices).counts,
        in_arrival_order=True,
        resident_trials=tuple(t for t in trials if t.devices),
    )
