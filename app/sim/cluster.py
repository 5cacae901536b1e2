"""`SimCluster`: the mechanics of `SimRuntime` (its base class): jobs placed, parked, resumed, released
and ended on a virtual clock, their progress and device time settled, their measured stretches and step
reports emitted as events, and the schedule of what happens next.

Contract (for `SimRuntime`, which turns actions into these transitions and polls the schedule):
- A placed job (`_place`: a start, or `_resume` on the same or other devices, counted as a migration)
  holds its devices at once but computes only after the mechanism's cost (`SimCosts`: start, resume,
  migrate); a parked one (`_park`) frees them (its park reported with the suspend cost, or none when it
  parked itself at its `until` step); `_free` (a release) checkpoints and ends its process, keeping its
  progress; `_exit` ends it for good. Each transition appends the event the real runtime would send
  (`Started` comes from the caller; `Parked`, `Resumed`, `Exited` from here) and keeps the residency
  objects handed out unchanged (a new object per change).
- A computing job advances at its rate where it is placed (`JobSpeeds.rate_of`); `_refresh` is told
  which jobs a change touched and, for each whose co-runners or rate changed, closes its stretch
  (`Profiled`, with the jobs it shared devices with and the round) and opens a new one, scheduling its
  completion, or a reporting job's next step end, and a measurement `profile_after_s` into the stretch.
  Cost is O(changes), not O(time): a job running alone for a day produces two events, not 1,440.
- `_fire_next(target)` runs the schedule's earliest due time not after `target` (the clock moves there;
  stale entries, of a job changed since, are dropped): completions, measurements, and a reporting job's
  step ends (`Reported` at the step's index, then it completes, parks itself at its `until`, or goes on
  at the next step's speed).
- Counters (busy and packed device time, starts, suspends, resumes, migrations, reports, first
  `first_steps` reached, exits, ...) are kept as things happen, for the driver.
"""

from __future__ import annotations

import heapq
import math

from quanta.executor.actions import Event, Exited, Parked, Profiled, Reported, Residency, Resumed
from quanta.executor.policy.types import DeviceView
from quanta.sim.jobs import SimCosts, SimJob
from quanta.sim.occupancy import Occupancy
from quanta.sim.speeds import JobSpeeds
from quanta.status import TrialStatus

# What a schedule entry stands for (its third field).
_COMPLETE, _MEASURE, _STEP_END = 0, 1, 2


class SimCluster:
    """The state of a simulated cluster of `devices` and of its jobs, moved on by the transitions below."""

    def __init__(
        self,
        devices: tuple[DeviceView, ...],
        speeds: JobSpeeds,
        occupancy: Occupancy,
        *,
        costs: SimCosts,
        profile_after_s: float,
        start: float,
    ):
        self.costs = costs
        self.profile_after_s = profile_after_s
        self._devices = devices
        self._speeds = speeds
        self._occupancy = occupancy
        self._now = float(start)
        self._jobs: dict[int, SimJob] = {}
        self._running: set[int] = set()
        self._resident: dict[int, Residency] = {}
        self._res_at = -math.inf
        self._heap: list[tuple[float, int, int, int, int]] = []  # (time, seq, what, job, version)
        self._seq = 0
        self._pending: list[Event] = []
        self._round = 0
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
        self.packed_seconds = 0.0
        self.steps_done_total = 0.0

    @property
    def pack_stretches(self) -> int:
        """Times two jobs began sharing a device."""
        return self._occupancy.pack_stretches

    @property
    def packs_kept(self) -> int:
        """Pairs that shared a device and were never split while one of them kept computing (their
        stretches ended by a completion, or by both being time-sliced out together)."""
        return self._occupancy.packs_kept

    @property
    def packs_undone(self) -> int:
        """Pairs that shared a device and were split at least once while one of them kept computing."""
        return self._occupancy.packs_undone

    # ---- the clock -----------------------------------------------------------------------------

    def _advance(self, t: float) -> None:
        if t > self._now:
            occupancy = self._occupancy
            self.busy_device_seconds += occupancy.busy * (t - self._now)
            if occupancy.packs:
                self.packed_seconds += len(occupancy.packs) * (t - self._now)
            self._now = t

    def _fire_next(self, target: float) -> bool:
        """Run what is scheduled at the earliest time not after `target`, the clock moved there; False
        (the clock unmoved) when nothing is."""
        heap = self._heap
        while heap:
            t, _, _, jid, version = heap[0]
            j = self._jobs[jid]
            if j.version != version or j.state != "running":
                heapq.heappop(heap)
                continue
            if t > target:
                return False
            self._advance(t)
            while heap and heap[0][0] <= t:
                _, _, what, jid, version = heapq.heappop(heap)
                j = self._jobs[jid]
                if j.version != version or j.state != "running":
                    continue
                if what == _COMPLETE:
                    self._settle(j, t)
                    j.steps = j.total
                    touched = self._occupancy.neighbours(j)
                    self._exit(j, TrialStatus.COMPLETED, None)
                    self._refresh(touched)
                elif what == _STEP_END:
                    self._step_end(j, t)
                else:
                    self._close_window(j, t)
                    j.measured = True
            return True
        return False

    # ---- transitions ---------------------------------------------------------------------------

    def _place(self, j: SimJob, devices: tuple[str, ...], cost: float) -> None:
        self._occupancy.place(j, devices)
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
        self._occupancy.release(j)
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

    # ---- progress and stretches ----------------------------------------------------------------

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

    def _refresh(self, touched: set[int]) -> None:
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
                rate, new = self._speeds.rate_of(j, self._occupancy.on, self._jobs)
            if old != new:
                self._occupancy.pack_change(j, old, new, now, self._jobs)
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
                heapq.heappush(self._heap, (c0 + (j.total - j.steps) / rate, self._seq, _COMPLETE, j.id, j.version))
            else:  # a reporting job: its next step's end (a report; the last one completes it)
                left = max(0.0, j.next_report - j.steps)
                heapq.heappush(self._heap, (c0 + left / rate, self._seq, _STEP_END, j.id, j.version))
            if self.profile_after_s > 0:
                self._seq += 1
                heapq.heappush(self._heap, (c0 + self.profile_after_s, self._seq, _MEASURE, j.id, j.version))

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
            touched = self._occupancy.neighbours(j)
            self._exit(j, TrialStatus.COMPLETED, None)
            self._refresh(touched)
        elif j.until is not None and k - 1 >= j.until:
            touched = self._occupancy.neighbours(j)
            self._park(j, at_limit=True)
            self._refresh(touched)
        else:
            # Same stretch (same devices and co-runners): the measurement window stays open and only the
            # speed changes, so the next step's end is scheduled under the same version.
            j.rate = self._speeds.rate_of(j, self._occupancy.on, self._jobs)[0]
            self._seq += 1
            heapq.heappush(self._heap, (max(t, j.compute_from) + 1.0 / j.rate, self._seq, _STEP_END, j.id, j.version))
