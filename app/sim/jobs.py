"""What `SimRuntime` simulates: the mechanism's costs (`SimCosts`), a job as the simulator knows it
(`JobSpec`, with a `StepCurve` when it reports after every step, as a replayed search trial does) and the
runtime's per-job state (`SimJob`).

Pure data: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from quanta.executor.actions import Residency

__all__ = ["JobSpec", "SimCosts", "SimJob", "StepCurve", "reporting_job"]


@dataclass(frozen=True)
class SimCosts:
    """Mechanism costs in seconds. Gandiva: suspend + resume well under a second; migration 1-2 s."""

    start_s: float = 0.0  # a fresh job's first mini-batch (trace run times already include start-up)
    suspend_s: float = 0.1  # reported as the park latency; the device is free once parked
    resume_s: float = 0.4  # resuming on the devices it was parked on
    migrate_s: float = 1.5  # resuming on other devices (state copied through a checkpoint)


@dataclass(frozen=True)
class StepCurve:
    """What a reporting job does: step k (1-based) ends `ends[k-1]` seconds of solo computing after the
    job began (strictly increasing), and the job then reports `{metric: values[k-1]}`, plus
    `{name: series[k-1]}` for each `(name, series)` of `more` (further metrics the same report carries,
    e.g. the objectives of a multi-objective search; none by default)."""

    ends: tuple[float, ...]
    metric: str
    values: tuple[float, ...]
    more: tuple[tuple[str, tuple[float, ...]], ...] = ()

    def __post_init__(self) -> None:
        if not self.ends or len(self.values) != len(self.ends):
            raise ValueError(f"StepCurve: {len(self.ends)} step ends and {len(self.values)} values")
        for name, series in self.more:
            if name == self.metric:
                raise ValueError(f"StepCurve.more: '{name}' is the curve's own metric")
            if len(series) != len(self.ends):
                raise ValueError(f"StepCurve.more: '{name}' has {len(series)} values for {len(self.ends)} steps")
        if self.ends[0] <= 0 or any(b <= a for a, b in zip(self.ends, self.ends[1:], strict=False)):
            raise ValueError("StepCurve.ends: must be positive and strictly increasing")


@dataclass(frozen=True)
class JobSpec:
    """What the simulator needs to know about a job: its type (throughput table key), devices asked
    for, total mini-batches, and an explicit solo rate when the trace gives one. A job with a `curve`
    reports after every step (its `rate` is then its mean solo rate, `steps / curve.ends[steps-1]`,
    and `steps` must not exceed the curve's length): see `reporting_job`."""

    job_type: str
    steps: int
    devices: int = 1
    rate: float | None = None
    curve: StepCurve | None = None


def reporting_job(job_type: str, curve: StepCurve, steps: int | None = None, devices: int = 1) -> JobSpec:
    """The `JobSpec` of a job that runs the first `steps` steps of `curve` (all of them when None)."""
    n = len(curve.ends) if steps is None else max(1, min(int(steps), len(curve.ends)))
    return JobSpec(job_type, n, devices, n / curve.ends[n - 1], curve)


class SimJob:
    """One job's state in `SimRuntime`: its progress, devices, rate and measurement window, settled
    lazily (up to `mark`) whenever something about it changes. Owned by the runtime; nothing else writes it."""

    __slots__ = (
        "id",
        "spec",
        "total",
        "steps",
        "devices",
        "state",
        "rate",
        "mark",
        "compute_from",
        "device_seconds",
        "partners",
        "version",
        "opened",
        "measured",
        "win_start",
        "win_steps",
        "first_target",
        "first_at",
        "rates",
        "res",
        "mult",
        "until",
        "win_compute",
        "next_report",
    )

    def __init__(self, jid: int, spec: JobSpec, rates: dict[str, tuple[float, float]], first_target: float):
        self.id = jid
        self.spec = spec
        self.total = float(spec.steps)
        self.steps = 0.0
        self.devices: tuple[str, ...] = ()
        self.state = "new"  # running | parked | exited
        self.rate = 0.0
        self.mark = 0.0  # progress and device time are settled up to here
        self.compute_from = 0.0  # overhead (start/resume/migration) ends here
        self.device_seconds = 0.0
        self.partners: tuple[int, ...] = ()
        self.version = 0
        self.opened = False  # a stretch at `rate` is open
        self.measured = False  # the current stretch has had its first measurement
        self.win_start = 0.0
        self.win_steps = 0.0
        self.first_target = first_target
        self.first_at: float | None = None
        self.rates = rates  # device kind -> (solo rate on one server, solo rate spread over servers)
        self.res: Residency | None = None
        # A reporting job: step k's speed relative to the mean solo rate (mean step time / step k's time).
        self.mult: tuple[float, ...] | None = None
        curve = spec.curve
        if curve is not None:
            n = spec.steps
            if n > len(curve.ends):
                raise ValueError(f"job {jid}: {n} steps but its curve has {len(curve.ends)}")
            mean = curve.ends[n - 1] / n
            self.mult = tuple(mean / (b - a) for a, b in zip((0.0, *curve.ends[: n - 1]), curve.ends[:n], strict=True))
        self.until: int | None = None  # park itself after its first report at or past this step
        self.win_compute = 0.0  # computing seconds in the open measurement window (reporting jobs)
        self.next_report = 1  # a reporting job's next step to end (and report)
