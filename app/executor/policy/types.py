"""The values every policy reads and writes: `ClusterSnapshot` in, `Plan` out.

Policies are pure functions `plan(snapshot) -> Plan`: no I/O, no clock (the snapshot carries `now`),
no torch/celery/sqlmodel. Anything a policy must remember between rounds (stride passes, packs on
trial, bad pairs, feedback-queue levels) goes out in `Plan.state` and comes back in the next
snapshot's `policy_state`; the controller persists it, so a restarted controller plans the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Protocol

from quanta.search.verdict import NOT_JUDGED as NOT_JUDGED  # the judge's verdicts, as policies read them
from quanta.search.verdict import JudgeKnobs
from quanta.search.verdict import Verdict as Verdict

# TrialStatus is defined in the ground module quanta.status; importing it from here keeps working.
from quanta.status import TRIAL_FINAL, TrialStatus

_FINAL = frozenset(TRIAL_FINAL)


@dataclass(frozen=True)
class DeviceView:
    """One device a trial can run on. `id` is unique in the cluster (e.g. ``cpu:0``, ``n2/cuda:1``)."""

    id: str
    node: str = "local"
    kind: str = "cpu"
    memory_mb: float = 0.0  # capacity; 0 = unknown/unbounded


@dataclass(frozen=True)
class MutableDim:
    """One mutable parameter of a search's space, as a policy that changes values reads it: its dotted
    `name`, its distribution `kind` (``uniform``, ``loguniform``, ``quniform``, ``qloguniform``,
    ``randint``, ``normal``) and that kind's arguments (``[low, high]``, ``[low, high, q]``, ``[mu, sigma]``)."""

    name: str
    kind: str
    args: tuple[float, ...]


@dataclass(frozen=True)
class TrialView:
    """What a policy knows about one trial.

    `devices` is where the trial is resident (its process holds state for those devices; empty when it
    is queued); `running` says whether it computes now or is parked. Rates are mini-batches per second
    measured by the runtime: `rate_solo` when it ran alone on its device(s), `rate_packed` beside
    another trial (see `ClusterSnapshot.pair_rates` for the pair). `kind_rates` is its solo rate per
    device kind, as ``(kind, rate)`` pairs sorted by kind: measured on devices of that kind, or known
    beforehand (the simulator's throughput table); a kind it has no figure for is absent, and a rate
    of 0 means it cannot run on that kind (it does not fit). `curve` is the objective as reported,
    as (step, value) pairs, oriented so that larger is better for `maximize` and smaller for `minimize`
    exactly as the user reported it.
    """

    id: int
    search_id: int = 0
    status: TrialStatus = TrialStatus.QUEUED
    devices: tuple[str, ...] = ()
    running: bool = False
    devices_needed: int = 1
    arrival: float = 0.0  # when it became runnable (snapshot clock)
    steps_done: int = 0
    max_steps: int = 0
    device_seconds: float = 0.0  # device time attained so far (summed over its devices)
    rate_solo: float | None = None
    rate_packed: float | None = None
    memory_mb: float | None = None
    curve: tuple[tuple[int, float], ...] = ()
    priority: float = 0.0  # higher runs first (early feedback; 0 when unknown)
    p_reach: float | None = None  # predicted probability of reaching the target (None = no prediction yet)
    elastic: bool = False
    kind: str = ""  # job type (simulator traces); empty for search trials
    owner: str = ""  # the user of a trial outside any search (a trace job); a search's trials: `SearchView.owner`
    kind_rates: tuple[tuple[str, float], ...] = ()  # solo rate per device kind (see the docstring)
    # The values in force of its search's mutable parameters (`SearchView.mutable`), sorted by name.
    values: tuple[tuple[str, float], ...] = ()
    # A search with several objectives or constraints (`SearchView.pareto`): its reports as points, (step,
    # losses, violation) in step order (`quanta.search.pareto`: each objective oriented smaller-is-better;
    # violation 0 when feasible).
    points: tuple[tuple[int, tuple[float, ...], float], ...] = ()

    @property
    def resident(self) -> bool:
        return bool(self.devices)

    def rate_on(self, kind: str) -> float | None:
        """Its solo rate on devices of `kind` (None: no figure for that kind)."""
        for k, r in self.kind_rates:
            if k == kind:
                return r
        return None


@dataclass(frozen=True)
class SearchView:
    """Search-level facts a policy may use (goal, target, steps per trial). The scheduler knobs are
    the policy's own (it is built from them), never carried per round."""

    id: int
    goal: str = "maximize"
    target: float | None = None
    max_steps: int = 0
    more_trials: bool = False  # the search will create more trials (its trial budget is not spent)
    owner: str = ""  # the user who submitted it (the share layer divides device time between users)
    mutable: tuple[MutableDim, ...] = ()  # its mutable parameters (a population's exploits change them)
    # Its trials are ranked by their points (several objectives, or constraints), not by `curve` alone
    # (`goal` and `target` then speak of its first objective only).
    pareto: bool = False
    reference: tuple[float, ...] | None = None  # its hypervolume's reference point as losses (None: not given)
    point: tuple[float, ...] | None = None  # its point target as losses, one per objective (None: none)


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything a policy may look at, frozen at one instant `now` (seconds, any epoch).

    `pair_rates[(a, b)]` = (rate of a, rate of b) measured while a and b were packed on one device
    (trial ids, a < b). `policy_state` is what this policy returned in `Plan.state` last round.
    `verdicts[trial id]` is the judge's verdict this round, for the policies that ask for judging
    (`Policy.judge_knobs`); a trial without one is not judged. `user_weights[user]` is that user's share of
    device time relative to other users (`SearchView.owner`, `TrialView.owner`), 1 when not named.
    """

    now: float
    devices: tuple[DeviceView, ...]
    trials: tuple[TrialView, ...]
    searches: tuple[SearchView, ...] = ()
    pair_rates: Mapping[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    policy_state: Mapping[str, Any] = field(default_factory=dict)
    quantum_s: float = 2.0
    round_no: int = 0
    verdicts: Mapping[int, Verdict] = field(default_factory=dict)
    # Each user's weight in the share layer (`quanta.executor.policy.share`); a user not named weighs 1.
    user_weights: Mapping[str, float] = field(default_factory=dict)
    # When devices of several kinds are free, place each trial where its rate relative to its rates on
    # the other kinds is highest (Gavel; `quanta.executor.policy.placement.kinds`). False: kind-blind (a trial is still
    # never placed on a kind where its rate is 0). A cluster of one kind plans the same either way.
    kind_aware: bool = True
    # Devices of each kind in the whole cluster, when `devices` is only part of it (the share layer's
    # sub-snapshots), so that effective rates are normalised cluster-wide; empty: count `devices`.
    kind_counts: Mapping[str, int] = field(default_factory=dict)
    # Hints a producer may give so that a round on a large cluster costs O(resident), not O(queue):
    # `in_arrival_order` says `trials` holds alive trials only, already in arrival order (then `alive()`
    # is `trials` itself); `resident_trials`, when given, is exactly the alive trials with devices, in
    # arrival order. Both describe `trials`; they never add information.
    in_arrival_order: bool = False
    resident_trials: tuple[TrialView, ...] | None = None

    def trial(self, trial_id: int) -> TrialView:
        for t in self.trials:
            if t.id == trial_id:
                return t
        raise KeyError(trial_id)

    def alive(self) -> tuple[TrialView, ...]:
        """Trials that are queued or resident, in arrival order (ties by id). Computed once per
        snapshot (policies ask several times; the snapshot is frozen, so the answer cannot change)."""
        if self.in_arrival_order:
            return self.trials
        cached = self.__dict__.get("_alive")
        if cached is None:
            live = [t for t in self.trials if t.status not in _FINAL]
            cached = tuple(sorted(live, key=ARRIVAL_ORDER))
            object.__setattr__(self, "_alive", cached)
        return cached

    def resident(self) -> tuple[TrialView, ...]:
        """Alive trials resident on devices (running or parked), in arrival order."""
        if self.resident_trials is not None:
            return self.resident_trials
        cached = self.__dict__.get("_resident")
        if cached is None:
            cached = tuple(t for t in self.alive() if t.devices)
            object.__setattr__(self, "_resident", cached)
        return cached

    def search(self, search_id: int) -> SearchView | None:
        for s in self.searches:
            if s.id == search_id:
                return s
        return None


ARRIVAL_ORDER = attrgetter("arrival", "id")  # the sort key of alive() and resident()


@dataclass(frozen=True)
class Plan:
    """What runs in the next quantum.

    `placement[device_id]` lists the trials that run on that device (two or more = packed). A trial
    needing k devices appears under k devices. Alive trials absent from `placement` are parked (if
    resident) or stay queued. `stop` lists trials to end for good (killed, with `reasons`). `state` is carried to the
    next snapshot's `policy_state`. `notes` explain decisions (shown in logs and the dashboard).
    """

    placement: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    stop: tuple[int, ...] = ()
    state: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # `reasons[trial]`: the verdict that stops a trial in `stop` (why the policy judged it hopeless),
    # stored with the killed trial and shown to users. A trial in `stop` without one is "stopped by policy".
    reasons: Mapping[int, str] = field(default_factory=dict)
    # Successive-halving policies: `hold` lists alive trials paused at a rung until the policy promotes
    # them (they do not count against their search's parallelism, so new trials keep coming);
    # `release` lists held, resident trials to checkpoint and free from host memory (they come back
    # from the checkpoint when promoted); `limits[trial]` is the step at which a placed trial parks
    # itself (its next rung), so that it stops exactly there rather than at the next quantum.
    hold: tuple[int, ...] = ()
    release: tuple[int, ...] = ()
    limits: Mapping[int, int] = field(default_factory=dict)
    # `quiet_until`: the policy's promise that, until this time (snapshot clock; `math.inf`: none), every
    # round would plan exactly this placement unless an event wakes the controller first (a trial
    # arrives or ends, a command comes); None: no promise. A controller may skip planning until then
    # (`ControllerOptions.trust_quiet`); the decisions are the same either way.
    quiet_until: float | None = None
    # Population-based training: `exploits[b] = (a, values)` replaces trial b's state by trial a's (a fork
    # of a into b itself, at a's next boundary) and gives b `values` for its mutable parameters. The
    # controller carries it out through its forks; until it is done (or failed: b then goes on from its
    # own state) b does not run, whatever `placement` says.
    exploits: Mapping[int, tuple[int, Mapping[str, float]]] = field(default_factory=dict)
    # `publish`: trials whose state at their current boundary is worth keeping ready for an exploit (the
    # top of a population that others have yet to reach): the controller has it written beside the
    # trial's checkpoint before the trial runs on, so an exploit decided later takes it at once instead of
    # waiting for the trial's next boundary. A hint: nothing else changes when it is not carried out.
    publish: tuple[int, ...] = ()

    def devices_of(self, trial_id: int) -> tuple[str, ...]:
        return tuple(sorted(d for d, ids in self.placement.items() if trial_id in ids))

    def running(self) -> set[int]:
        return {i for ids in self.placement.values() for i in ids}


class Policy(Protocol):
    """Decides placement for one quantum. Must be pure and deterministic in the snapshot.

    `judge_knobs`: None, or the knobs the judge (`quanta.search.judge`) judges trials with before each
    of this policy's rounds (the verdicts arrive in `ClusterSnapshot.verdicts`)."""

    name: str
    judge_knobs: JudgeKnobs | None

    def plan(self, snapshot: ClusterSnapshot) -> Plan: ...


@dataclass(frozen=True)
class Placement:
    """Where trials are now, as the runtime reports it: resident devices and whether running."""

    resident: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    running: frozenset[int] = frozenset()
