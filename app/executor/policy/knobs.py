"""Each policy's knobs, declared once: validated, defaulted and documented here, nowhere else.

A search spec's `scheduler` block is one of these models, chosen by its `policy` field (a union
discriminated by policy name; see `SchedulerKnobs`), and the policy is built from that model
(`app.executor.policy.policy_for`). `MechanismKnobs` holds what every policy shares: how long a
quantum is, how often trials checkpoint, how often a crashed trial restarts. `JudgeKnobs` holds the
early-feedback knobs that `app.search.judge` reads (declared in `app.search.verdict`, beneath this
layer); `GandivaKnobs` includes them.

Every model is frozen and refuses unknown fields (a typo is an error naming the field, e.g.
``scheduler.kill_treshold``). Pure: pydantic only, so the spec can import it without numpy/scipy.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.search.verdict import JudgeKnobs as JudgeKnobs  # declared beside the judge's vocabulary


class _Knobs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MechanismKnobs(_Knobs):
    """Knobs of the mechanism every policy runs on (the controller and the runtimes read them)."""

    quantum_s: float = Field(default=2.0, gt=0, description="scheduling quantum, seconds")
    checkpoint_every_quanta: int = Field(default=10, ge=1)
    checkpoint_every_s: float = Field(default=60.0, gt=0, description="checkpoint a trial that never parks")
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
    medium target 1.28x sooner over 7 seeds (docs/benchmarks.md, the third 7-seed run)."""

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


class GandivaKnobs(MechanismKnobs, JudgeKnobs):
    """Gandiva: tiers (exclusive top-M, starvation guard, weighted stride sharing), introspective
    packing and grow-shrink, on top of the judge's verdicts (a `JudgeKnobs` itself: the judge reads
    its share of these fields)."""

    policy: Literal["gandiva"] = "gandiva"
    rung_eta: float | None = Field(
        default=3.0,
        gt=1,
        description="judge from the first successive-halving rung (max_steps / rung_eta**3) on, by rung ranks "
        "and the curve together; None: by the curve alone, from min_steps_before_judgement",
    )
    top_m: int | None = Field(default=None, ge=0, description="exclusive trials; default: half the devices")
    promise_weight: float = Field(default=4.0, ge=0, description="stride weight = 1 + promise_weight * P(reach)")
    swap_margin: float = Field(default=0.02, ge=0, description="extra promise an exclusive incumbent keeps")
    sticky: bool = Field(
        default=False,
        description="time-slice trials on their own devices: a parked trial resumes where it is and moves "
        "only when its device's queue is longer than the target's by more than one (default off: rotate "
        "across the cluster, moving trials onto whatever freed; docs/simulation.md has both measured)",
    )
    gang: bool = Field(
        default=False,
        description="with sticky: a multi-device trial that starts or moves claims an aligned block of whole servers "
        "(the least loaded), and its occupants there leave together when its turn comes (gang time-slicing); "
        "packs form only from a trial parked on its host's own device (docs/simulation.md)",
    )
    gang_patience: int | None = Field(
        default=1,
        ge=0,
        description="with gang: rounds in a row a multi-device trial may wait for its block before it runs on "
        "devices the round leaves idle (a move; gang blocks are not work-conserving otherwise); None: it "
        "waits for its block (docs/simulation.md)",
    )
    packing: bool = True
    pack_margin: float = Field(default=0.05, ge=0, description="keep a pack whose summed normalised rate > 1 + this")
    pack_patience: int = Field(default=8, ge=1, description="rounds a pack on trial may wait for a measurement")
    grow_shrink: bool = False
    idle_grow_s: float = Field(default=30.0, ge=0, description="lend a device idle this long to an elastic trial")


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


class AshaKnobs(RunToRungKnobs):
    """Asynchronous successive halving (`app.executor.policy.asha`): rungs at `min_steps * eta**k` steps;
    `mode` pause parks a trial below its rung in host memory (promoted later, no work lost), kill stops
    it (the classic variant)."""

    policy: Literal["asha"] = "asha"
    eta: float = Field(default=3.0, gt=1, description="reduction factor: the top 1/eta of a rung goes on")
    min_steps: int | None = Field(default=None, ge=1, description="first rung in steps; default max_steps / eta**4")
    mode: Literal["pause", "kill"] = Field(default="pause", description="pause: park below a rung; kill: stop")
    # `rent` is the default since 2026-11-25: on the longer MNIST-1D workload it cut the winners' waits at
    # thin rungs (docs/benchmarks.md, "A thin rung's best waits only as long as its next rung costs").
    rule: Literal["promotion", "stopping", "hybrid", "rent"] = Field(
        default="rent",
        description="pause mode: promotion = a rung's top 1/eta are promoted (Li et al.); stopping = a trial "
        "at or above the rung's 1/eta percentile goes on at once, the rest wait (kill mode always stops); "
        "hybrid = promotion, but the stopping rule while the rung has fewer than eta trials recorded; "
        "rent = promotion, but the best of a rung with fewer than eta recorded goes on once it has waited as "
        "long as its next rung costs the cluster (its device time there / the devices)",
    )
    brackets: int = Field(default=1, ge=1, le=8, description="Hyperband brackets (1 = ASHA)")
    judge: JudgeKnobs | None = Field(
        default=None,
        description="promote by the target too: the judge runs with these knobs, and a trial it condemns "
        "(P(reach target) below kill_threshold) is not promoted past its rung while new configurations may "
        "still come (kill mode: it is stopped at its rung); None: rungs alone, as textbook ASHA",
    )
    go_p: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="with judge knobs: a trial at its rung whose judged P(reach target) is at least this goes "
        "on at once, without waiting for eta trials to be recorded there (1: never)",
    )
    # On by default since 2026-11-25 (0.5 on each rung's own report, after 10 pairs): on LCBench's 24 tasks
    # it changed 15 of 72 hard runs (hard geo-mean 0.936x the time before), and live, 7 seeds on each MNIST-1D
    # workload, it was no slower on any target and sooner at hard (docs/benchmarks.md, "rung_check on each
    # rung's report becomes the default"). Where the first rung ranks well (most live runs) it never fires.
    rung_check: float | None = Field(
        default=0.5,
        ge=-1,
        le=1,
        description="pause mode: a rung judges only while its ranks agree with the next rung's; once "
        "rung_check_pairs trials are recorded at both, a rung whose Spearman correlation with the next is "
        "below this is passed over for the rest of the search (its held trials go on), lowest rungs first; "
        "None: every rung judges",
    )
    rung_check_on: Literal["best", "report"] = Field(
        default="report",
        description="what rung_check correlates: best = the rung records (best loss so far at each rung), "
        "report = each trial's loss at its first report past each rung",
    )
    rung_check_pairs: int = Field(
        default=10, ge=3, le=100_000, description="trials recorded at a rung and the next before rung_check decides"
    )
    # Held trials are whole processes; measured RSS counts the pages they share with the template too,
    # so this over-counts: 4 GiB holds a few dozen small trials.
    memory_budget_mb: float = Field(default=4096.0, ge=0, description="host memory for held trials; 0 = no limit")


class HyperbandKnobs(AshaKnobs):
    """Hyperband as brackets of ASHA: bracket b's first rung is `min_steps * eta**b`."""

    policy: Literal["hyperband"] = "hyperband"  # type: ignore[assignment]  # narrows the parent's literal
    brackets: int = Field(default=3, ge=1, le=8, description="Hyperband brackets")


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


PolicyKnobs = FifoKnobs | TimesliceKnobs | GandivaKnobs | TiresiasKnobs | AshaKnobs | HyperbandKnobs
SchedulerKnobs = Annotated[PolicyKnobs, Field(discriminator="policy")]
KNOBS: dict[str, type[PolicyKnobs]] = {
    "fifo": FifoKnobs,
    "timeslice": TimesliceKnobs,
    "gandiva": GandivaKnobs,
    "tiresias": TiresiasKnobs,
    "asha": AshaKnobs,
    "hyperband": HyperbandKnobs,
}
# The policy of a spec that names none: the one that reached targets soonest in bench/search.py
# (docs/benchmarks.md: pause-don't-kill ASHA beat fifo, timeslice and gandiva at every target).
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
        out = {k: v for k, v in out.items() if k in model.model_fields}
    return out


def knobs_for(name: str, **knobs: Any) -> PolicyKnobs:
    """Validated knobs of policy `name` (raises KeyError for an unknown policy, ValueError for a bad
    or unknown knob)."""
    if name not in KNOBS:
        raise KeyError(f"unknown policy '{name}' (known: {', '.join(sorted(KNOBS))})")
    return KNOBS[name](**{k: v for k, v in knobs.items() if k != "policy"})
