"""Each policy's knobs, declared once: validated, defaulted and documented here, nowhere else.

A search spec's `scheduler` block is one of these models, chosen by its `policy` field (a union
discriminated by policy name; see `SchedulerKnobs`), and the policy is built from that model
(`quanta.executor.policy.policy_for`). `MechanismKnobs` holds what every policy shares: how long a
quantum is, how often trials checkpoint, how often a crashed trial restarts. `JudgeKnobs` holds the
early-feedback knobs that `quanta.search.judge` reads (declared in `quanta.search.verdict`, beneath this
layer); `GandivaKnobs` includes them. `ShareKnobs` are the share layer's (cluster-wide, not a spec's).

Knobs kept for research sit in a policy's `experimental` block (`GandivaExperimental`): off by default,
measured but not made the default, and a warning is logged whenever a spec sets them. Knobs that lost
their measurements were removed; a spec stored with one at its old default still loads (`Retired`).

Every model is frozen and refuses unknown fields (a typo is an error naming the field, e.g.
``scheduler.kill_treshold``). Pure: pydantic only, so the spec can import it without numpy/scipy.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from quanta.cadence import CHECKPOINT_EVERY_QUANTA, CHECKPOINT_EVERY_S
from quanta.search.fidelity import DEFAULT_ETA
from quanta.search.knobs import KnobError, Retired, drop_retired
from quanta.search.verdict import JudgeKnobs as JudgeKnobs  # declared beside the judge's vocabulary

log = logging.getLogger(__name__)


class _Knobs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Names a block of this model may still carry from before a knob moved or went (its validators map
    # them away): stored specs are dumps of every field.
    legacy_fields: ClassVar[frozenset[str]] = frozenset()


class MechanismKnobs(_Knobs):
    """Knobs of the mechanism every policy runs on (the controller and the runtimes read them)."""

    quantum_s: float = Field(default=2.0, gt=0, description="scheduling quantum, seconds")
    checkpoint_every_quanta: int = Field(
        default=CHECKPOINT_EVERY_QUANTA, ge=1, description="checkpoint a running trial every this many quanta"
    )
    checkpoint_every_s: float = Field(
        default=CHECKPOINT_EVERY_S, gt=0, description="checkpoint a trial that never parks"
    )
    max_retries: int = Field(default=2, ge=0, description="restarts from checkpoint after a crash")


MECHANISM = MechanismKnobs()  # the defaults, for code that runs a trial outside any search


class RunToRungKnobs(MechanismKnobs):
    """Knobs of the policies that run a placed trial on until it ends or reaches its next rung (fifo,
    asha, hyperband), never time-slicing it with others: there a trial waiting to start only waits, and
    a configuration asked of the searcher long before a device takes it up was chosen without what every
    trial reported meanwhile. So the controller asks for a new trial just in time: a search keeps at
    most (the cluster's devices / devices per trial) + `lookahead` trials running or waiting to start
    (trials held at a rung aside), fewer if its `parallelism` says so. On MNIST-1D with 2 devices and
    parallelism 8, pause ASHA's trials waited up to 15 s to start; with the cap its search reached the
    medium target 1.28x sooner over 7 seeds (docs/decisions.md, "Trials are made just in time")."""

    lookahead: int | None = Field(
        default=1,
        ge=0,
        description="trials made ahead of a free device: at most devices / devices_per_trial + lookahead "
        "running or waiting to start (held ones aside); None: parallelism alone",
    )


class FifoKnobs(RunToRungKnobs):
    policy: Literal["fifo"] = "fifo"


class TimesliceKnobs(MechanismKnobs):
    policy: Literal["timeslice"] = "timeslice"


class GandivaExperimental(_Knobs):
    """Gandiva's research knobs (`scheduler.experimental`), all off by default. On the Philly traces
    (docs/simulation.md) they cut moves per job from 68-181 to 1.6-3.4 and shortened mean JCT on two of
    three traces (6c71a0 -1.1 %, b436b2 -5.5 %) but lengthened it on ee9e8c (+2.1 %): not the default."""

    sticky: bool = Field(
        default=False,
        description="time-slice trials on their own devices: a parked trial resumes where it is and moves "
        "only when its device's queue is longer than the target's by more than one (off: rotate across the "
        "cluster, moving trials onto whatever freed)",
    )
    gang: bool = Field(
        default=False,
        description="with sticky: a multi-device trial that starts or moves claims an aligned block of whole servers "
        "(the least loaded), and its occupants there leave together when its turn comes (gang time-slicing); "
        "packs form only from a trial parked on its host's own device",
    )
    gang_patience: int | None = Field(
        default=1,
        ge=0,
        description="with gang: rounds in a row a multi-device trial may wait for its block before it runs on "
        "devices the round leaves idle (a move; gang blocks are not work-conserving otherwise); None: it "
        "waits for its block",
    )


NO_EXPERIMENTS = GandivaExperimental()


class GandivaKnobs(MechanismKnobs, JudgeKnobs):
    """Gandiva: tiers (exclusive top-M, starvation guard, weighted stride sharing), introspective
    packing and grow-shrink, on top of the judge's verdicts (a `JudgeKnobs` itself: the judge reads
    its share of these fields, `rung_eta` among them)."""

    policy: Literal["gandiva"] = "gandiva"
    top_m: int | None = Field(default=None, ge=0, description="exclusive trials; default: half the devices")
    promise_weight: float = Field(default=4.0, ge=0, description="stride weight = 1 + promise_weight * P(reach)")
    swap_margin: float = Field(default=0.02, ge=0, description="extra promise an exclusive incumbent keeps")
    packing: bool = Field(default=True, description="pack light trials onto one device when measured rates say it pays")
    pack_margin: float = Field(default=0.05, ge=0, description="keep a pack whose summed normalised rate > 1 + this")
    pack_patience: int = Field(default=8, ge=1, description="rounds a pack on trial may wait for a measurement")
    grow_shrink: bool = Field(default=False, description="lend devices idle for idle_grow_s to elastic trials")
    idle_grow_s: float = Field(default=30.0, ge=0, description="lend a device idle this long to an elastic trial")
    experimental: GandivaExperimental | None = Field(
        default=None, description="research knobs, off by default (sticky, gang, gang_patience); a warning is logged"
    )
    legacy_fields: ClassVar[frozenset[str]] = frozenset(GandivaExperimental.model_fields)

    @model_validator(mode="before")
    @classmethod
    def _experimental_moved(cls, data: Any) -> Any:
        """`sticky`, `gang` and `gang_patience` sat beside the other knobs before they moved under
        `experimental`: a block that gives them there (a stored spec, an old one) has them moved, those at
        their default dropped."""
        if not isinstance(data, Mapping) or not any(k in data for k in _GANDIVA_MOVED):
            return data
        out = dict(data)
        moved = {k: out.pop(k) for k in _GANDIVA_MOVED if k in out}
        moved = {k: v for k, v in moved.items() if v != GandivaExperimental.model_fields[k].default}
        if moved:
            given = out.get("experimental")
            if given is not None and not isinstance(given, Mapping):
                return data  # validation names what is wrong
            out["experimental"] = {**moved, **(given or {})}
        return out

    @model_validator(mode="after")
    def _warn_experimental(self) -> GandivaKnobs:
        if self.experimental is not None:
            given = ", ".join(f"{k}={v!r}" for k, v in self.experimental.model_dump(exclude_defaults=True).items())
            log.warning(
                "scheduler.experimental (%s): research knobs of gandiva, off by default and not its measured "
                "default; they may change or go",
                given or "defaults",
            )
        return self

    @property
    def research(self) -> GandivaExperimental:
        """The experimental knobs in effect (all off when `experimental` is not given)."""
        return self.experimental or NO_EXPERIMENTS


_GANDIVA_MOVED = tuple(GandivaExperimental.model_fields)


class TiresiasKnobs(MechanismKnobs):
    policy: Literal["tiresias"] = "tiresias"
    queue_limits: tuple[float, ...] = Field(
        default=(3250.0, 7200.0), description="attained device-seconds that end each queue (increasing)"
    )
    starvation_factor: float = Field(default=8.0, ge=0, description="promote after waiting this x last run (0: off)")

    @field_validator("queue_limits")
    @classmethod
    def _increasing(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if any(b <= a for a, b in zip(v, v[1:], strict=False)):
            raise ValueError(f"must increase: {list(v)}")
        return v


# Knobs of the ASHA block that lost their measurements. `judge` and `go_p` (the judge's curve fits
# read by ASHA): equal to the default at MNIST-1D's hard target over 7 seeds, 1.13x slower at medium, and
# too slow to run on LCBench's searches of thousands of trials. `rung_check_on: best` (correlating the
# best-so-far records): hardly ever fired on LCBench, where the reports (the default) did.
ASHA_RETIRED = {
    "judge": Retired(None, "ASHA with the judge's verdicts was no faster than without them"),
    "go_p": Retired(0.5, "it set the judge's threshold", inert=lambda block: block.get("judge") is None),
    "rung_check_on": Retired(
        "report",
        "correlating the best-so-far records hardly ever fired where each rung's reports did",
        inert=lambda block: "rung_check" in block and block["rung_check"] is None,
    ),
}
# Values of `rule` that lost theirs: the stopping rule (a trial in the top 1/eta so far goes on at once)
# was later to the hard target live (MNIST-1D) and on LCBench (0.78x the default); `hybrid` (the stopping
# rule while a rung has fewer than eta records) 0.88x at hard on LCBench. Kill mode never read the rule.
_RETIRED_RULES = {"stopping": "later to hard targets than promotion", "hybrid": "later to hard targets than rent"}


class AshaKnobs(RunToRungKnobs):
    """Asynchronous successive halving (`quanta.executor.policy.asha`): rungs at `min_steps * eta**k` steps;
    `mode` pause parks a trial below its rung in host memory (promoted later, no work lost), kill stops
    it (the classic variant). Its `eta` and `min_steps` are the searcher's rungs too (bohb): one place
    for the rungs both read (`SearchSpec.searcher_rungs`)."""

    policy: Literal["asha"] = "asha"
    eta: float = Field(default=DEFAULT_ETA, gt=1, description="reduction factor: the top 1/eta of a rung goes on")
    min_steps: int | None = Field(default=None, ge=1, description="first rung in steps; default max_steps / eta**4")
    mode: Literal["pause", "kill"] = Field(default="pause", description="pause: park below a rung; kill: stop")
    # `rent` cut the winners' waits at thin rungs on the longer MNIST-1D workload (docs/decisions.md, "A thin
    # rung's best waits only as long as its next rung costs").
    rule: Literal["promotion", "rent"] = Field(
        default="rent",
        description="pause mode: promotion = a rung's top 1/eta are promoted (Li et al.); rent = promotion, but "
        "the best of a rung with fewer than eta recorded goes on once it has waited as long as its next rung "
        "costs the cluster (its device time there / the devices)",
    )
    brackets: int = Field(default=1, ge=1, le=8, description="Hyperband brackets (1 = ASHA)")
    # 0.5 on each rung's own report, after 10 pairs: on LCBench's 24 tasks it changed 15 of 72 hard runs (hard
    # geo-mean 0.936x the time before), and live, 7 seeds on each MNIST-1D workload, it was no slower on any
    # target and sooner at hard (docs/decisions.md, "rung_check on each rung's report is on by default").
    # Where the first rung ranks well (most live runs) it never fires.
    rung_check: float | None = Field(
        default=0.5,
        ge=-1,
        le=1,
        description="pause mode: a rung judges only while its ranks agree with the next rung's; once "
        "rung_check_pairs trials are recorded at both (each trial's loss at its first report past each rung), "
        "a rung whose Spearman correlation with the next is below this is passed over for the rest of the "
        "search (its held trials go on), lowest rungs first; None: every rung judges",
    )
    rung_check_pairs: int = Field(
        default=10, ge=3, le=100_000, description="trials recorded at a rung and the next before rung_check decides"
    )
    # lowest: on LCBench with 64 trials, 10 seeds, each half of the 24 tasks, the searches that reached a
    # target in their tail got there sooner in 12 and 9 runs and later in 4 and 2 at hard, none lost
    # (docs/decisions.md, "Once a search makes no more trials").
    tail_order: Literal["lowest", "highest"] = Field(
        default="lowest",
        description="pause mode, once the search makes no more trials: which held trials a free device runs on "
        "first, one rung further: those of the lowest rung (every held trial climbs a rung before any runs to "
        "its end, and the next rung's ranks promote the late bloomers) or of the highest (each in turn to its "
        "last step); best first within a rung",
    )
    # Held trials are whole processes; measured RSS counts the pages they share with the template too,
    # so this over-counts: 4 GiB holds a few dozen small trials.
    memory_budget_mb: float = Field(default=4096.0, ge=0, description="host memory for held trials; 0 = no limit")
    legacy_fields: ClassVar[frozenset[str]] = frozenset(ASHA_RETIRED)

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: Any) -> Any:
        out = drop_retired(data, ASHA_RETIRED)
        if isinstance(out, Mapping) and out.get("rule") in _RETIRED_RULES:
            rule = out["rule"]
            if out.get("mode") != "kill":
                raise KnobError("rule", f"{rule!r} was removed ({_RETIRED_RULES[rule]}); use 'rent' or 'promotion'")
            out = {**out, "rule": "rent"}  # kill mode never read it
        return out


class HyperbandKnobs(AshaKnobs):
    """Hyperband as brackets of ASHA: bracket b's first rung is `min_steps * eta**b`."""

    policy: Literal["hyperband"] = "hyperband"  # type: ignore[assignment]  # narrows the parent's literal
    brackets: int = Field(default=3, ge=1, le=8, description="Hyperband brackets")


class FreezeThawKnobs(RunToRungKnobs):
    """Freeze-thaw (`quanta.executor.policy.freeze_thaw`): every freed device goes to the trial, parked or
    new, whose next increment buys the most chance of reaching the target per device-second, by one
    learning-curve model per search (`quanta.search.curve_model`)."""

    policy: Literal["freeze_thaw"] = "freeze_thaw"
    give_up_p: float = Field(
        default=1e-3,
        ge=0,
        lt=1,
        description="once no new trials will come, stop a trial (not the best) whose P(reach target) is below this",
    )
    memory_budget_mb: float = Field(default=4096.0, ge=0, description="host memory for parked trials; 0 = no limit")


class PbtKnobs(MechanismKnobs):
    """Population-based training (`quanta.executor.policy.pbt`; Jaderberg et al. 2017): `population`
    trials time-sliced on the devices; each pauses every `interval_steps` and is ranked among the members
    that reached the same interval: one in the bottom `quantile` exploits one in the top (takes its state)
    and explores (its mutable values perturbed by a factor of `perturb`, or resampled from the space with
    probability `resample_p`). The search needs mutable parameters (`space`, `mutable`)."""

    policy: Literal["pbt"] = "pbt"
    population: int = Field(default=8, ge=2, le=10_000, description="trials alive at once (the population)")
    interval_steps: int | None = Field(
        default=None, ge=1, description="steps between exploit decisions; default: budget.max_steps / 10"
    )
    quantile: float = Field(default=0.25, gt=0, le=0.5, description="bottom fraction that exploits the top fraction")
    perturb: tuple[float, float] = Field(
        default=(0.8, 1.2), description="factors a mutable value is multiplied by, one chosen at random"
    )
    resample_p: float = Field(default=0.25, ge=0, le=1, description="probability a value is resampled from the space")
    seed: int = Field(default=0, description="seed of the exploit and explore draws")

    @field_validator("perturb")
    @classmethod
    def _positive(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not all(f > 0 for f in v):
            raise ValueError(f"factors must be above 0: {list(v)}")
        return v

    def interval(self, max_steps: int) -> int:
        """Steps between decisions for a search of `max_steps` per trial."""
        if self.interval_steps is not None:
            return self.interval_steps
        return max(1, max_steps // 10) if max_steps > 0 else 1000


class ShareKnobs(_Knobs):
    """The share layer's knobs: cluster-wide (not a search's: no search may choose its own share)."""

    window_s: float = Field(default=3600.0, gt=0, description="time constant of the device-second accounts")
    favour_worst_rho: bool = Field(default=False, description="weigh users by their rho (Themis): worst first")
    rho_cap: float = Field(default=4.0, ge=1, description="largest weight multiplier favour_worst_rho gives")
    rho_bound: float | None = Field(
        default=None,
        ge=1,
        description="guarantee fair shares only to users whose rho exceeds this; the rest divided by demand",
    )


PolicyKnobs = (
    FifoKnobs | TimesliceKnobs | GandivaKnobs | TiresiasKnobs | AshaKnobs | HyperbandKnobs | FreezeThawKnobs | PbtKnobs
)
SchedulerKnobs = Annotated[PolicyKnobs, Field(discriminator="policy")]
# Policy name -> its knob model, read off the union (each model's `policy` literal): the one list of names.
KNOBS: dict[str, type[PolicyKnobs]] = {m.model_fields["policy"].default: m for m in get_args(PolicyKnobs)}
# The policy of a spec that names none: the one that reached targets soonest in bench/search.py
# (docs/decisions.md, "Pause-ASHA is the default policy").
DEFAULT_POLICY = "asha"

# Every field of the flat scheduler block specs were dumped with before the union: a stored spec
# holding all of them is such a dump, and keeps only the fields its policy knows (see `upgrade`).
_FLAT_FIELDS = frozenset(
    {
        "policy", "quantum_s", "checkpoint_every_quanta", "checkpoint_every_s", "max_retries",
        "feedback_every_steps", "min_steps_before_judgement", "kill_threshold", "top_m", "packing",
        "pack_margin", "grow_shrink", "idle_grow_s",
    }
)  # fmt: skip


def upgrade(block: Any) -> Any:
    """A scheduler block as given, with the default policy filled in; a spec stored before the knobs
    were split by policy (a dump of every flat field) keeps the fields its own policy knows.
    Anything else passes unchanged, so that validation names what is wrong."""
    if not isinstance(block, dict):
        return block
    out = dict(block)
    out.setdefault("policy", DEFAULT_POLICY)
    model = KNOBS.get(out["policy"]) if isinstance(out["policy"], str) else None
    if model is not None and set(out) >= _FLAT_FIELDS:
        out = {k: v for k, v in out.items() if k in model.model_fields or k in model.legacy_fields}
    return out


def knobs_for(name: str, **knobs: Any) -> PolicyKnobs:
    """Validated knobs of policy `name` (raises KeyError for an unknown policy, ValueError for a bad
    or unknown knob)."""
    if name not in KNOBS:
        raise KeyError(f"unknown policy '{name}' (known: {', '.join(sorted(KNOBS))})")
    return KNOBS[name](**{k: v for k, v in knobs.items() if k != "policy"})
