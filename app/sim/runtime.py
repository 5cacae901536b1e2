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
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Sequence

from quanta.executor.actions import (
    Action,
    Configured,
    Event,
    Exited,
    Fork,
    Forked,
    Migrate,
    Parked,
    Profiled,
    Reconfigure,
    Release,
    Reported,
    Residency,
    Resumed,
    Run,
    Started,
    Stop,
    Suspend,
)
from quanta.executor.policy.types import DeviceView
from quanta.executor.runtime.base import Launcher, TrialLaunch
from quanta.sim.jobs import JobSpec, SimCosts, SimJob, StepCurve
from quanta.sim.throughputs import Throughputs
from quanta.status import TrialStatus

# The job model lives in quanta.sim.jobs; importers of quanta.sim.runtime keep finding it here.
__all__ = ["InvariantError", "JobSpec", "SimCosts", "SimRuntime", "StepCurve"]


class InvariantError(AssertionError):
    """The simulated cluster reached a state that cannot exist (a device over capacity, ...)."""


class SimRuntime:
    """Virtual-clock runtime. `register()` or else the launcher (the controller's, bound) says what
    each job is: `TrialLaunch.max_steps` and `config` keys ``job_type``, ``devices`` and ``rate``."""

    adopts_in_place = False  # a simulated job has no state (its forks are refused)

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
        self.throughputs = throughputs or Throughputs()
        self.launcher = launcher
        self.workload = workload
        self.costs = costs
        self.profile_after_s = profile_after_s
        self.first_steps = first_steps
        self.max_per_device = max_per_device
        self.jitter = jitter
        self.seed = seed
        self.per_server = per_server
        # One device kind per server: `kinds[s]` for server s (a mixed cluster), else `kind` everywhere.
        if kinds is not None and len(kinds) != servers:
            raise ValueError(f"kinds: {len(kinds)} given for {servers} servers")
        server_kind = list(kinds) if kinds is not None else [kind] * servers
        self._devices = tuple(
            DeviceView(f"s{s:03d}/g{g}", f"s{s:03d}", server_kind[s], memory_mb)
            for s in range(servers)
            for g in range(per_server)
        )[:total]
        self.kinds = tuple(dict.fromkeys(d.kind for d in self._devices))
        self._node = {d.id: d.node for d in self._devices}
        self._kind_of = {d.id: d.kind for d in self._devices}
        self._on: dict[str, list[int]] = {d.id: [] for d in self._devices}  # computing jobs per device
        self._now = float(start)
        self._jobs: dict[int, SimJob] = {}
        self._specs: dict[int, JobSpec] = {}
        self._running: set[int] = set()
        self._resident: dict[int, Residency] = {}
        self._res_at = -math.inf
        self._heap: list[tuple[float, int, int, int, int]] = []  # (time, seq, kind 0=finish 1=profile, job, version)
        self._seq = 0
        self._pending: list[Event] = []
        self._last_round: dict[int, int] = {}
        self._round = 0
        self._pair_factor: dict[tuple[int, int, str], float] = {}
        self._busy = 0  # devices with at least one computing job
        self._packs: dict[tuple[int, int], float] = {}  # pair sharing a device -> since
        # Counters the driver reports.
        self.busy_device_seconds = 0.0
        self.exited_at: dict[int, float] = {}
        self.first_at: dict[int, float] = {}
        self.migrations = 0
        self.migrations_by_devices: dict[int, int] = {}  # devices the moved job asked for -> moves
        self.suspends = 0
        self.resumes = 0
        self.starts = 0
        self.limit_parks = 0  # reporting jobs that parked themselves at their `until` step
        self.reports = 0
        self.parked_ids: set[int] = set()  # jobs parked at least once (asked to, or at their limit)
        # Packs are counted per pair of jobs (one packing decision), not per stretch: a kept pack that
        # is time-sliced out and back in many times is still one pack. A pair is *undone* if it was ever
        # split while one of its jobs kept computing, else *kept*.
        self._pairs_packed: set[tuple[int, int]] = set()
        self._pairs_undone: set[tuple[int, int]] = set()
        self.pack_stretches = 0  # times two jobs began sharing a device
        self.packed_seconds = 0.0
        self.steps_done_total = 0.0

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
        noise = 1.0
        if self.jitter > 0:  # per-job speed noise, the same for a given (seed, job) on every kind
            noise = math.exp(random.Random(self.seed * 1_000_003 + trial_id).gauss(0.0, self.jitter))
        rates = {kind: self._solo_rates(trial_id, spec, kind, noise) for kind in self.kinds}
        job = SimJob(trial_id, spec, rates, float(min(self.first_steps, spec.steps)))
        self._jobs[trial_id] = job
        return job

    def _solo_rates(self, trial_id: int, spec: JobSpec, kind: str, noise: float) -> tuple[float, float]:
        """(consolidated, spread) solo rate of a job on devices of `kind`; (0, 0) where it cannot run
        (the table's 0: it does not fit, e.g. ResNet-50 at batch 128 on a K80): the policies never place
        it there, and a placement there is an `InvariantError`."""
        t = self.throughputs
        if spec.rate is not None or not t.knows(spec.job_type, kind):
            if spec.rate is None:
                raise KeyError(
                    f"job {trial_id}: no rate and job type '{spec.job_type}' not in the throughput table for {kind}"
                )
            solo_c, solo_u = spec.rate, spec.rate * t.spread_factor
        else:
            solo_c = t.solo(spec.job_type, spec.devices, kind, True) or 0.0
            solo_u = t.solo(spec.job_type, spec.devices, kind, False) or solo_c
        if solo_c <= 0:
            return 0.0, 0.0
        return solo_c * noise, solo_u * noise

    def known_rates(self, trial_id: int, spec: JobSpec) -> dict[str, float]:
        """A job's solo rate on each kind of the cluster as the throughput table gives it for the placement
        it can get there (without `jitter`; 0 where it cannot run): consolidated when it fits on one
        server, else spread over servers. What the simulator lets the controller know beforehand
        (`Controller.add_job(kind_rates=...)`), as Gavel's simulator knows its throughput matrix. (The
        consolidated figure for a job larger than a server misled placement by kind: Gavel's table has an
        8-GPU LM at 699 mini-batches/s on V100s consolidated, 134 on P100s, but spread over two 4-GPU
        servers, the only way it runs here, 73 and 95.)"""
        out: dict[str, float] = {}
        for kind in self.kinds:
            consolidated, spread = self._solo_rates(trial_id, spec, kind, 1.0)
            out[kind] = spread if spec.devices > self.per_server else consolidated
        return out

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
        stopped_or_parked: set[int] = set()
        for a in todo:
            j = self._jobs.get(a.trial_id)
            if isinstance(a, Stop):
                if j is not None and j.state in ("running", "parked"):
                    touched |= self._neighbours(j)
                    self._exit(j, TrialStatus.KILLED, a.reason)
                    stopped_or_parked.add(j.id)
            elif isinstance(a, Suspend):
                if j is not None and j.state == "running":
                    touched |= self._neighbours(j)
                    self._park(j)
                    stopped_or_parked.add(j.id)
            elif isinstance(a, Release):
                if j is not None and j.state in ("running", "parked"):
                    touched |= self._neighbours(j)
                    self._free(j)
                    stopped_or_parked.add(j.id)
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
                touched |= self._neighbours(j)
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
            touched |= self._neighbours(j)
        self._refresh(touched, stopped_or_parked)

    def poll(self, timeout: float) -> list[Event]:
        if self._pending:
            out, self._pending = self._pending, []
            return out
        target = self._now + max(0.0, timeout)
        heap = self._heap
        while heap:
            t, _, kind, jid, version = heap[0]
            j = self._jobs[jid]
            if j.version != version or j.state != "running":
                heapq.heappop(heap)
                continue
            if t > target:
                break
            self._advance(t)
            while heap and heap[0][0] <= t:
                _, _, kind, jid, version = heapq.heappop(heap)
                j = self._jobs[jid]
                if j.version != version or j.state != "running":
                    continue
                if kind == 0:
                    self._settle(j, t)
                    j.steps = j.total
                    touched = self._neighbours(j)
                    self._exit(j, TrialStatus.COMPLETED, None)
                    self._refresh(touched, {j.id})
                elif kind == 2:
                    self._step_end(j, t)
                else:
                    self._close_window(j, t)
                    j.measured = True
            out, self._pending = self._pending, []
            return out
        if math.isinf(target):
            raise InvariantError("stalled: nothing computes and nothing will happen (a job fits no placement?)")
        self._advance(target)
        return []

    # ---- mechanics -----------------------------------------------------------------------------

    def _advance(self, t: float) -> None:
        if t > self._now:
            self.busy_device_seconds += self._busy * (t - self._now)
            if self._packs:
                self.packed_seconds += len(self._packs) * (t - self._now)
            self._now = t

    def _neighbours(self, j: SimJob) -> set[int]:
        out = {j.id}
        for d in j.devices:
            out.update(self._on[d])
        return out

    def _place(self, j: SimJob, devices: tuple[str, ...], cost: float) -> None:
        for d in devices:
            if d not in self._on:
                raise InvariantError(f"job {j.id}: unknown device {d}")
            on = self._on[d]
            if not on:
                self._busy += 1
            on.append(j.id)
            if len(on) > self.max_per_device:
                raise InvariantError(f"device {d} runs {len(on)} jobs {on} (capacity {self.max_per_device})")
        for d in devices:
            if j.rates[self._kind_of[d]][0] <= 0:
                kind = self._kind_of[d]
                raise InvariantError(f"job {j.id} ({j.spec.job_type}) placed on {d}: its throughput on {kind} is 0")
        now = self._now
        j.devices = devices
        j.state = "running"
        j.mark = now
        j.compute_from = now + cost
        j.opened = False
        self._running.add(j.id)
        old = j.res
        # A new object even on a resume: an object handed out while parked never changes (see `_park`).
        if old is None:
            j.res = Residency(devices, True, int(j.steps), j.device_seconds)
        else:
            j.res = Residency(devices, True, old.steps, old.device_seconds, old.elastic, old.extra)
        self._resident[j.id] = j.res
        self._res_at = -math.inf

    def _release(self, j: SimJob) -> None:
        for d in j.devices:
            on = self._on[d]
            on.remove(j.id)
            if not on:
                self._busy -= 1
        self._running.discard(j.id)
        self._res_at = -math.inf

    def _park(self, j: SimJob, report: bool = True, at_limit: bool = False) -> None:
        self._close_window(j, self._now)
        self._release(j)
        j.state = "parked"
        j.opened = False
        j.version += 1
        assert j.res is not None
        # A new object, not the running one changed: an object handed out while its trial is not running is
        # never changed (`Runtime.residency`'s contract), so the snapshot need not look at it again.
        j.res = Residency(j.res.devices, False, int(j.steps + 1e-9), j.device_seconds, j.res.elastic, j.res.extra)
        self._resident[j.id] = j.res
        if at_limit:  # parked itself at a step boundary: nobody asked, nothing to wait for
            self.limit_parks += 1
            self.parked_ids.add(j.id)
            self._pending.append(Parked(j.id, int(j.steps + 1e-9), 0.0, self._now, True))
        elif report:
            self.suspends += 1
            self.parked_ids.add(j.id)
            self._pending.append(Parked(j.id, int(j.steps + 1e-9), self.costs.suspend_s * 1000, self._now))

    def _resume(self, j: SimJob, devices: tuple[str, ...]) -> None:
        migrated = devices != j.devices
        cost = self.costs.migrate_s if migrated else self.costs.resume_s
        if migrated:
            self.migrations += 1
            self.migrations_by_devices[j.spec.devices] = self.migrations_by_devices.get(j.spec.devices, 0) + 1
        else:
            self.resumes += 1
        self._place(j, devices, cost)
        self._pending.append(Resumed(j.id, devices, cost * 1000, migrated, self._now))

    def _free(self, j: SimJob) -> None:
        """Release: checkpoint (its cost is the suspend cost), end the process, keep its progress (a
        reporting job keeps its steps too: it stopped at a step boundary, where it parked)."""
        if j.state == "running":
            self._close_window(j, self._now)
            self._release(j)
        j.state = "released"
        j.opened = False
        j.version += 1
        self._resident.pop(j.id, None)
        j.res = None
        self._pending.append(Exited(j.id, "released", int(j.steps + 1e-9), None, self._now, False, j.device_seconds))

    def _exit(self, j: SimJob, status: TrialStatus, error: str | None) -> None:
        if j.state == "running":
            self._close_window(j, self._now)
            self._release(j)
        j.state = "exited"
        j.version += 1
        self._resident.pop(j.id, None)
        self.exited_at[j.id] = self._now
        self.steps_done_total += j.steps
        self._pending.append(Exited(j.id, status, int(j.steps + 1e-9), error, self._now, False, j.device_seconds))

    def _settle(self, j: SimJob, t: float) -> None:
        """Advance a computing job's progress and device time to `t` at its current rate."""
        if t <= j.mark:
            return
        j.device_seconds += (t - j.mark) * len(j.devices)
        c0 = j.compute_from if j.compute_from > j.mark else j.mark
        if t > c0 and j.rate > 0:
            dt = t - c0
            j.win_compute += dt
            before = j.steps
            j.steps = min(j.total, before + j.rate * dt)
            j.win_steps += j.steps - before
            if j.first_at is None and j.steps >= j.first_target - 1e-9:
                j.first_at = c0 + max(0.0, j.first_target - before) / j.rate
                self.first_at[j.id] = j.first_at
        j.mark = t

    def _close_window(self, j: SimJob, t: float) -> None:
        """Settle to `t` and report the measured stretch since the window opened."""
        if not j.opened:
            return
        self._settle(j, t)
        steps = int(j.win_steps + 1e-9)
        if steps >= 1 and j.rate > 0:
            # A reporting job's rate changes from step to step: its window's seconds are counted, not
            # derived from the rate (trace jobs keep the derived figure the published results used).
            seconds = steps / j.rate if j.mult is None else j.win_compute * steps / j.win_steps
            self._pending.append(
                Profiled(j.id, j.devices, steps, seconds, 0.0, t, j.win_start, j.partners, self._round)
            )
        j.win_start, j.win_steps, j.win_compute = t, 0.0, 0.0

    def _factor(self, j: SimJob, o: SimJob, kind: str) -> float:
        key = (j.id, o.id, kind)
        f = self._pair_factor.get(key)
        if f is None:
            f = self.throughputs.unmeasured_pair_factor
            if j.spec.rate is None and o.spec.rate is None:
                a, b = (j.spec.job_type, j.spec.devices), (o.spec.job_type, o.spec.devices)
                pair = self.throughputs.pair(a, b, kind)
                solo = self.throughputs.solo(*a, kind, True)
                if pair is not None and solo:
                    f = pair[0] / solo
            self._pair_factor[key] = f
        return f

    def _rate_of(self, j: SimJob) -> tuple[float, tuple[int, ...]]:
        """A computing job's rate: its solo rate on the slowest kind among its devices (consolidated or
        spread), times the worst sharing factor over its devices; and the jobs it shares them with."""
        devices = j.devices
        node = self._node[devices[0]]
        spread = any(self._node[d] != node for d in devices)
        kind = self._kind_of[devices[0]]
        if len(self.kinds) > 1 and any(self._kind_of[d] != kind for d in devices):
            base = min(j.rates[self._kind_of[d]][1 if spread else 0] for d in devices)
        else:
            base = j.rates[kind][1 if spread else 0]
        if j.mult is not None:  # a reporting job's speed on the step it is computing
            base *= j.mult[min(j.next_report, len(j.mult)) - 1]
        factor = 1.0
        partners: set[int] = set()
        for d in devices:
            on = self._on[d]
            if len(on) == 1:
                continue
            others = [o for o in on if o != j.id]
            partners.update(others)
            f = self._factor(j, self._jobs[others[0]], self._kind_of[d]) if len(others) == 1 else 1.0 / len(on)
            factor = min(factor, f)
        return base * factor, tuple(sorted(partners))

    def _refresh(self, touched: set[int], gone: set[int]) -> None:
        """After a change at `now`: close the stretch of every computing job among `touched` whose
        co-runners or rate changed, open its new stretch, and schedule its completion."""
        now = self._now
        for jid in sorted(touched):
            j = self._jobs.get(jid)
            if j is None:
                continue
            old = j.partners
            if j.state != "running":
                new: tuple[int, ...] = ()
                rate = 0.0
            else:
                rate, new = self._rate_of(j)
            if old != new:
                self._pack_change(j, old, new, gone)
            if j.state != "running":
                j.partners = ()
                continue
            if j.opened and new == old and rate == j.rate:
                continue
            self._close_window(j, now)
            self._settle(j, now)
            j.partners, j.rate = new, rate
            j.version += 1
            j.opened, j.measured = True, False
            j.win_start, j.win_steps, j.win_compute = now, 0.0, 0.0
            c0 = max(now, j.compute_from)
            self._seq += 1
            if j.mult is None:
                heapq.heappush(self._heap, (c0 + (j.total - j.steps) / rate, self._seq, 0, j.id, j.version))
            else:  # a reporting job: its next step's end (a report; the last one completes it)
                left = max(0.0, j.next_report - j.steps)
                heapq.heappush(self._heap, (c0 + left / rate, self._seq, 2, j.id, j.version))
            if self.profile_after_s > 0:
                self._seq += 1
                heapq.heappush(self._heap, (c0 + self.profile_after_s, self._seq, 1, j.id, j.version))

    def _step_end(self, j: SimJob, t: float) -> None:
        """A reporting job ends step `next_report` at `t`: it reports (at the step's index, as the SDK
        does); then it completes (its last step), parks itself (a report at or past its `until`), or goes
        on at the next step's rate."""
        curve = j.spec.curve
        assert curve is not None
        self._settle(j, t)
        k = j.next_report
        j.steps = float(k)  # the float error of rate x time is not progress
        j.next_report = k + 1
        self.reports += 1
        metrics: dict[str, float | None] = {curve.metric: curve.values[k - 1]}
        for name, series in curve.more:
            metrics[name] = series[k - 1]
        self._pending.append(Reported(j.id, k - 1, metrics, t))
        if k >= j.total:
            touched = self._neighbours(j)
            self._exit(j, TrialStatus.COMPLETED, None)
            self._refresh(touched, {j.id})
        elif j.until is not None and k - 1 >= j.until:
            touched = self._neighbours(j)
            self._park(j, at_limit=True)
            self._refresh(touched, {j.id})
        else:
            # Same stretch (same devices and co-runners): the measurement window stays open and only the
            # speed changes, so the next step's end is scheduled under the same version.
            j.rate = self._rate_of(j)[0]
            self._seq += 1
            heapq.heappush(self._heap, (max(t, j.compute_from) + 1.0 / j.rate, self._seq, 2, j.id, j.version))

    def _pack_change(self, j: SimJob, old: tuple[int, ...], new: tuple[int, ...], gone: set[int]) -> None:
        for p in new:
            if p not in old:
                key = (min(j.id, p), max(j.id, p))
                if key not in self._packs:
                    self._packs[key] = self._now
                    self._pairs_packed.add(key)
                    self.pack_stretches += 1
        for p in old:
            if p in new:
                continue
            key = (min(j.id, p), max(j.id, p))
            if self._packs.pop(key, None) is None:
                continue
            other = self._jobs[p]
            finished = j.state == "exited" or other.state == "exited"
            if not finished and (j.state == "running" or other.state == "running"):
                self._pairs_undone.add(key)  # split while one of them kept computing

    @property
    def packs_kept(self) -> int:
        """Pairs that shared a device and were never split while one of them kept computing (their
        stretches ended by a completion, or by both being time-sliced out together)."""
        return len(self._pairs_packed - self._pairs_undone)

    @property
    def packs_undone(self) -> int:
        """Pairs that shared a device and were split at least once while one of them kept computing."""
        return len(self._pairs_undone)

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
        for d, on in self._on.items():
            if len(on) > self.max_per_device:
                raise InvariantError(f"device {d} runs {on}")
            for jid in on:
                if d not in self._jobs[jid].devices or self._jobs[jid].state != "running":
                    raise InvariantError(f"device {d} lists job {jid} that does not run there")
        for jid in self._running:
            j = self._jobs[jid]
            if len(j.devices) != j.spec.devices and j.spec.devices <= len(self._devices):
                raise InvariantError(f"job {jid} asked for {j.spec.devices} devices, runs on {j.devices}")
            if any(jid not in self._on[d] for d in j.devices):
                raise InvariantError(f"job {jid} not listed on its devices {j.devices}")
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
