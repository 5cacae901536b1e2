"""`Occupancy`: which jobs compute on which device of `SimRuntime`'s cluster, and which pairs share one.

Contract:
- `place(job, devices)` lists a job on each of `devices` and `release(job)` takes it off them; `busy`
  counts the devices with at least one computing job. A placement that cannot exist raises
  `InvariantError` (an unknown device, more than `max_per_device` jobs on one, a device of a kind the
  job cannot run on) rather than being simulated: a policy that asked for it has a bug.
- `neighbours(job)`: the job and every job on its devices (those whose rate a change of it may change).
- Packs: `pack_change` is told when a job's set of co-runners changes (at `now`); a pair of jobs that
  begins to share a device opens a pack (`packs`: the pairs sharing one now, for the packed time;
  `pack_stretches` counts these beginnings). Pairs are also counted once each (one packing decision):
  *undone* if ever split while one of them kept computing, else *kept* (`packs_kept`, `packs_undone`).
- `check(jobs, running)`: the occupancy agrees with the jobs (no device over capacity, every listed job
  runs there, every running job on as many devices as it asked for and listed on each).
No clock and no events: the runtime says when.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from quanta.executor.policy.types import DeviceView
from quanta.sim.jobs import SimJob


class InvariantError(AssertionError):
    """The simulated cluster reached a state that cannot exist (a device over capacity, ...)."""


class Occupancy:
    """The computing jobs on each of `devices`, at most `max_per_device` to a device."""

    def __init__(self, devices: Sequence[DeviceView], max_per_device: int):
        self.max_per_device = max_per_device
        self._kind_of = {d.id: d.kind for d in devices}
        self.on: dict[str, list[int]] = {d.id: [] for d in devices}  # computing jobs per device
        self.busy = 0  # devices with at least one computing job
        self.packs: dict[tuple[int, int], float] = {}  # pair sharing a device -> since
        # Packs are counted per pair of jobs (one packing decision), not per stretch: a kept pack that
        # is time-sliced out and back in many times is still one pack. A pair is *undone* if it was ever
        # split while one of its jobs kept computing, else *kept*.
        self._pairs_packed: set[tuple[int, int]] = set()
        self._pairs_undone: set[tuple[int, int]] = set()
        self.pack_stretches = 0  # times two jobs began sharing a device

    def place(self, j: SimJob, devices: tuple[str, ...]) -> None:
        """List `j` on each of `devices` (InvariantError where it cannot be)."""
        for d in devices:
            if d not in self.on:
                raise InvariantError(f"job {j.id}: unknown device {d}")
            on = self.on[d]
            if not on:
                self.busy += 1
            on.append(j.id)
            if len(on) > self.max_per_device:
                raise InvariantError(f"device {d} runs {len(on)} jobs {on} (capacity {self.max_per_device})")
        for d in devices:
            if j.rates[self._kind_of[d]][0] <= 0:
                kind = self._kind_of[d]
                raise InvariantError(f"job {j.id} ({j.spec.job_type}) placed on {d}: its throughput on {kind} is 0")

    def release(self, j: SimJob) -> None:
        """Take `j` off its devices."""
        for d in j.devices:
            on = self.on[d]
            on.remove(j.id)
            if not on:
                self.busy -= 1

    def neighbours(self, j: SimJob) -> set[int]:
        out = {j.id}
        for d in j.devices:
            out.update(self.on[d])
        return out

    def pack_change(
        self, j: SimJob, old: tuple[int, ...], new: tuple[int, ...], now: float, jobs: Mapping[int, SimJob]
    ) -> None:
        """`j`'s co-runners went from `old` to `new` at `now` (`jobs`: every job, by id)."""
        for p in new:
            if p not in old:
                key = (min(j.id, p), max(j.id, p))
                if key not in self.packs:
                    self.packs[key] = now
                    self._pairs_packed.add(key)
                    self.pack_stretches += 1
        for p in old:
            if p in new:
                continue
            key = (min(j.id, p), max(j.id, p))
            if self.packs.pop(key, None) is None:
                continue
            other = jobs[p]
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

    def check(self, jobs: Mapping[int, SimJob], running: Collection[int]) -> None:
        """No device over capacity, each device's jobs running there, and each running job (of `running`)
        on as many devices as it asked for (when the cluster has that many) and listed on each."""
        for d, on in self.on.items():
            if len(on) > self.max_per_device:
                raise InvariantError(f"device {d} runs {on}")
            for jid in on:
                if d not in jobs[jid].devices or jobs[jid].state != "running":
                    raise InvariantError(f"device {d} lists job {jid} that does not run there")
        for jid in running:
            j = jobs[jid]
            if len(j.devices) != j.spec.devices and j.spec.devices <= len(self.on):
                raise InvariantError(f"job {jid} asked for {j.spec.devices} devices, runs on {j.devices}")
            if any(jid not in self.on[d] for d in j.devices):
                raise InvariantError(f"job {jid} not listed on its devices {j.devices}")
