"""`SimRuntime`: the `Runtime` protocol on a virtual clock.

A cluster of servers with `per_server` devices each (`DeviceView.node` = server). Every computing job
advances at its measured rate: alone, its solo rate (the unconsolidated one when a multi-device job
spans servers); sharing a device with another job, its rate from the measured pair table. Suspending,
resuming and migrating cost virtual time as in Gandiva (sub-second suspend/resume, 1-2 s migration):
the job holds its devices but computes nothing for that long.

`poll(timeout)` fast-forwards the clock to the next event (a completion, or the end of a job's first
measurement window) or to the timeout, and reports what the real runtime would: `Started`, `Parked`,
`Resumed`, `Profiled` (with `packed_with`, so the controller measures solo and pair rates exactly as it
does for real processes) and `Exited`. Nothing here knows which policy runs; there are no
"if simulate" branches elsewhere.

Cost is O(changes), not O(time): a job emits a `Profiled` when its stretch of computing at one rate ends
(suspended, moved, a co-runner came or went, it finished) and once `profile_after_s` into each new
stretch, so a job running alone for a day produces two events, not 1,440.

Reporting jobs (a `JobSpec` with a `StepCurve`: search trials replayed from a learning-curve surrogate)
also report: step k ends `curve.ends[k-1]` solo seconds into the job (its rate changes from step to step,
times the sharing factor when packed) and the job then emits `Reported(step=k-1, {metric: values[k-1]})`
(and the curve's `more` metrics):
exactly what `trial.report(...)` at the end of the k-th iteration of `for step in trial.steps()` sends
(the SDK reports the iteration's index), so the simulated trial is `quanta.sim.lcbench_trial.train` run for
real. A `Run`/`Migrate` with `until` makes it park itself after its first report at or past that step
(`Parked(at_limit=True)`, no park cost), as a real trial does at a successive-halving rung. Trace jobs
report nothing, so `until` never stops them. `workload` says what a launched trial is (default: the
trace job of its config's ``job_type``, ``devices`` and ``rate``).

Its parts: this module is the protocol (actions in, events out, residency, what each job is, and
inspection for the driver and the tests); the mechanics it drives (transitions, progress, measured
stretches, the schedule) are its base class `SimCluster` (`quanta.sim.cluster`), over `JobSpeeds`
(`quanta.sim.speeds`: how fast a job computes where it is placed), `Occupancy` (`quanta.sim.occupancy`:
which jobs compute on which device; `InvariantError`) and the job model (`quanta.sim.jobs`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from quanta.executor.actions import (
    Action,
    Configured,
    Event,
    Fork,
    Forked,
    Migrate,
    Reconfigure,
    Release,
    Residency,
    Run,
    Started,
    Stop,
    Suspend,
)
from quanta.executor.policy.types import DeviceView
from quanta.executor.runtime.base import Launcher, TrialLaunch
from quanta.sim.cluster import SimCluster
from quanta.sim.jobs import JobSpec, SimCosts, SimJob, StepCurve
from quanta.sim.occupancy import InvariantError, Occupancy
from quanta.sim.speeds import JobSpeeds
from quanta.sim.throughputs import Throughputs
from quanta.status import TrialStatus

# The job model lives in quanta.sim.jobs and the invariants' error in quanta.sim.occupancy; importers of
# quanta.sim.runtime keep finding them here.
__all__ = ["InvariantError", "JobSpec", "SimCosts", "SimRuntime", "StepCurve"]


class SimRuntime(SimCluster):
    """Virtual-clock runtime. `register()` or else the launcher (the controller's, bound) says what
    each job is: `TrialLaunch.max_steps` and `config` keys ``job_type``, ``devices`` and ``rate``."""

    adopts_in_place = False  # a simulated job has no state (its forks are refused)
    acks_by_polling = False

    def __init__(
        self,
        servers: int,
        per_server: int,
        *,
        kind: str = "v100",
        kinds: Sequence[str] | None = None,
        throughputs: Throughputs | None = None,
        launcher: Launcher | None = None,
        costs: SimCosts = SimCosts(),
        profile_after_s: float = 10.0,
        first_steps: int = 100,
        max_per_device: int = 2,
        memory_mb: float = 16_000.0,
        start: float = 0.0,
        jitter: float = 0.0,
        seed: int = 0,
        total: int | None = None,
        workload: Callable[[TrialLaunch], JobSpec] | None = None,
    ):
        # One device kind per server: `kinds[s]` for server s (a mixed cluster), else `kind` everywhere.
        if kinds is not None and len(kinds) != servers:
            raise ValueError(f"kinds: {len(kinds)} given for {servers} servers")
        server_kind = list(kinds) if kinds is not None else [kind] * servers
        devices = tuple(
            DeviceView(f"s{s:03d}/g{g}", f"s{s:03d}", server_kind[s], memory_mb)
            for s in range(servers)
            for g in range(per_server)
        )[:total]
        speeds = JobSpeeds(throughputs or Throughputs(), devices, per_server, jitter=jitter, seed=seed)
        occupancy = Occupancy(devices, max_per_device)
        super().__init__(devices, speeds, occupancy, costs=costs, profile_after_s=profile_after_s, start=start)
        self.launcher = launcher
        self.workload = workload
        self.first_steps = first_steps
        self.kinds = speeds.kinds
        self._specs: dict[int, JobSpec] = {}
        self._last_round: dict[int, int] = {}

    @property
    def max_per_device(self) -> int:
        """How many jobs may compute on one device at once (packing policies: 2)."""
        return self._occupancy.max_per_device

    # ---- jobs ----------------------------------------------------------------------------------

    def register(self, trial_id: int, spec: JobSpec) -> None:
        """Say what trial `trial_id` is (instead of a launcher)."""
        self._specs[trial_id] = spec

    def _spec(self, trial_id: int, devices: int) -> JobSpec:
        spec = self._specs.pop(trial_id, None)
        if spec is not None:
            return spec
        if self.launcher is None:
            raise KeyError(f"job {trial_id}: not registered and no launcher")
        launch = self.launcher.launch(trial_id)
        if self.workload is not None:
            return self.workload(launch)
        cfg = launch.config
        return JobSpec(
            str(cfg.get("job_type", "")),
            int(launch.max_steps),
            int(cfg.get("devices", devices)),
            float(cfg["rate"]) if cfg.get("rate") is not None else None,
        )

    def _new_job(self, trial_id: int, devices: int) -> SimJob:
        spec = self._spec(trial_id, devices)
        rates = self._speeds.solo_rates(trial_id, spec)
        job = SimJob(trial_id, spec, rates, float(min(self.first_steps, spec.steps)))
        self._jobs[trial_id] = job
        return job

    def known_rates(self, trial_id: int, spec: JobSpec) -> dict[str, float]:
        """A job's solo rate on each kind of the cluster as the throughput table gives it for the placement
        it can get there (see `JobSpeeds.known_rates`): what the simulator lets the controller know
        beforehand (`Controller.add_job(kind_rates=...)`), as Gavel's simulator knows its throughput matrix."""
        return self._speeds.known_rates(trial_id, spec)

    # ---- Runtime protocol ----------------------------------------------------------------------

    def devices(self) -> tuple[DeviceView, ...]:
        return self._devices  # the same tuple every time: policies memoise per-device maps on it

    def warm(self, modules: Sequence[str]) -> None:
        return None

    def bind(self, launcher: Launcher) -> None:
        self.launcher = launcher

    def now(self) -> float:
        return self._now

    def close(self) -> None:
        self._pending.clear()

    def redeliver(self) -> None:
        """Events live only in this process: nothing to read again."""

    def residency(self) -> dict[int, Residency]:
        if self._res_at != self._now:
            now = self._now
            for jid in self._running:
                j = self._jobs[jid]
                r = j.res
                assert r is not None
                r.device_seconds = j.device_seconds + (now - j.mark) * len(j.devices)
                c0 = max(j.mark, j.compute_from)
                live = j.steps + j.rate * (now - c0) if now > c0 else j.steps
                r.steps = int(min(j.total, live) + 1e-9)
            self._res_at = now
        return dict(self._resident)

    def apply(self, round_no: int, actions: Sequence[Action]) -> None:
        now = self._now
        self._round = round_no
        todo = [a for a in actions if self._last_round.get(a.trial_id) != round_no]
        for a in todo:
            self._last_round[a.trial_id] = round_no
        if not todo:
            return
        touched: set[int] = set()  # jobs whose co-runners or rate may change
        for a in todo:
            j = self._jobs.get(a.trial_id)
            if isinstance(a, Stop):
                if j is not None and j.state in ("running", "parked"):
                    touched |= self._occupancy.neighbours(j)
                    self._exit(j, TrialStatus.KILLED, a.reason)
            elif isinstance(a, Suspend):
                if j is not None and j.state == "running":
                    touched |= self._occupancy.neighbours(j)
                    self._park(j)
            elif isinstance(a, Release):
                if j is not None and j.state in ("running", "parked"):
                    touched |= self._occupancy.neighbours(j)
                    self._free(j)
            elif isinstance(a, Fork):  # a simulated job has no state to copy: the fork is refused, said so
                why = f"trial {a.trial_id}: the simulator cannot copy a simulated trial's state"
                steps = int(j.steps + 1e-9) if j is not None else 0
                self._pending.append(Forked(a.trial_id, a.into, steps, now, why))
            elif isinstance(a, Reconfigure) and j is not None and j.state in ("running", "parked"):
                self._pending.append(Configured(a.trial_id, int(j.steps + 1e-9), dict(a.values), now))
            elif (
                isinstance(a, Migrate)  # like the real runtime: park every mover before any resumes
                and j is not None
                and j.state == "running"
                and tuple(sorted(a.devices)) != j.devices
            ):
                touched |= self._occupancy.neighbours(j)
                self._park(j, report=False)
        for a in todo:
            if not isinstance(a, Run | Migrate):
                continue
            devices = tuple(sorted(a.devices))
            j = self._jobs.get(a.trial_id)
            if j is None or j.state in ("new", "released"):
                # New, or back from its checkpoint after a release (its steps are kept).
                j = j or self._new_job(a.trial_id, len(devices))
                j.until = a.until
                self._place(j, devices, self.costs.start_s)
                self.starts += 1
                self._pending.append(Started(j.id, devices, self.costs.start_s * 1000, int(j.steps + 1e-9), now))
            elif j.state == "exited":
                continue
            elif j.state == "running":
                continue  # already computing there (a Migrate to where it is, or a repeated Run)
            else:
                j.until = a.until  # as a real trial: a resume carries the new run's limit
                self._resume(j, devices)
            touched |= self._occupancy.neighbours(j)
        self._refresh(touched)

    def poll(self, timeout: float) -> list[Event]:
        if self._pending:
            out, self._pending = self._pending, []
            return out
        target = self._now + max(0.0, timeout)
        if self._fire_next(target):
            out, self._pending = self._pending, []
            return out
        if math.isinf(target):
            raise InvariantError("stalled: nothing computes and nothing will happen (a job fits no placement?)")
        self._advance(target)
        return []

    # ---- inspection (driver, tests) ------------------------------------------------------------

    def running_ids(self) -> set[int]:
        return set(self._running)

    def progress(self, trial_id: int) -> tuple[float, float]:
        """(steps done, total steps) of a job, settled to now."""
        j = self._jobs[trial_id]
        if j.state == "running":
            self._settle(j, self._now)
        return j.steps, j.total

    def job_rate(self, trial_id: int) -> float:
        return self._jobs[trial_id].rate

    def check(self) -> None:
        """Cluster invariants: no device over capacity, each computing job on as many devices as it
        asked for and listed on each of them, and work conserved (0 <= steps <= total; no more steps
        than its device time at its best rate allows)."""
        self._occupancy.check(self._jobs, self._running)
        for j in self._jobs.values():
            if j.steps < 0 or j.steps > j.total + 1e-6:
                raise InvariantError(f"job {j.id}: {j.steps} steps of {j.total}")
            best = max(max(pair) for pair in j.rates.values())  # its fastest rate anywhere
            if j.mult is not None:
                best *= max(j.mult)  # on its quickest step
            if j.devices and j.steps > best * j.device_seconds / len(j.devices) + 1e-6:
                raise InvariantError(f"job {j.id}: {j.steps} steps in {j.device_seconds} device-seconds")
            if j.state == "exited" and j.id in self.exited_at and j.steps > j.total + 1e-6:
                raise InvariantError(f"job {j.id} overshot")
