"""`JobSpeeds`: how fast a simulated job computes, for `SimRuntime`.

Contract:
- `solo_rates(trial_id, spec)`: a new job's (consolidated, spread) solo rate on each device kind of the
  cluster: the throughput table's for its type and device count, or its own `spec.rate` (spread: times
  the table's `spread_factor`) when it has one or the table does not know its type on that kind; times
  its speed noise when `jitter` > 0 (log-normal, drawn from (seed, job): the same on every kind, and on
  every run). (0, 0) where it cannot run (the table's 0). KeyError for a job with neither a rate nor a
  type the table knows.
- `known_rates(trial_id, spec)`: the solo rates the controller may know beforehand (no jitter; 0 where
  it cannot run): consolidated where it fits on one server, else spread.
- `rate_of(job, on, jobs)`: a computing job's rate where it is placed, and the jobs it shares its devices
  with: its solo rate on the slowest kind among its devices (spread when they span servers), times the
  worst sharing factor over its devices (the measured pair table's for two jobs, cached per pair and
  kind; a plain time share for more), times a reporting job's speed on the step it is computing.
Pure but for the cache of pair factors: no clock, no events.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

from quanta.executor.policy.types import DeviceView
from quanta.sim.jobs import JobSpec, SimJob
from quanta.sim.throughputs import Throughputs


class JobSpeeds:
    """The speed model of a cluster of `devices` (`per_server` to a server) over the `throughputs` table."""

    def __init__(
        self,
        throughputs: Throughputs,
        devices: Sequence[DeviceView],
        per_server: int,
        *,
        jitter: float = 0.0,
        seed: int = 0,
    ):
        self.throughputs = throughputs
        self.per_server = per_server
        self.jitter = jitter
        self.seed = seed
        self.kinds = tuple(dict.fromkeys(d.kind for d in devices))
        self._node = {d.id: d.node for d in devices}
        self._kind_of = {d.id: d.kind for d in devices}
        self._pair_factor: dict[tuple[int, int, str], float] = {}

    def solo_rates(self, trial_id: int, spec: JobSpec) -> dict[str, tuple[float, float]]:
        """A new job's (consolidated, spread) solo rate on each kind, with its speed noise."""
        noise = 1.0
        if self.jitter > 0:  # per-job speed noise, the same for a given (seed, job) on every kind
            noise = math.exp(random.Random(self.seed * 1_000_003 + trial_id).gauss(0.0, self.jitter))
        return {kind: self._solo_rates(trial_id, spec, kind, noise) for kind in self.kinds}

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

    def rate_of(
        self, j: SimJob, on: Mapping[str, list[int]], jobs: Mapping[int, SimJob]
    ) -> tuple[float, tuple[int, ...]]:
        """A computing job's rate: its solo rate on the slowest kind among its devices (consolidated or
        spread), times the worst sharing factor over its devices (`on`: the jobs computing on each
        device, all in `jobs`); and the jobs it shares them with."""
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
            on_d = on[d]
            if len(on_d) == 1:
                continue
            others = [o for o in on_d if o != j.id]
            partners.update(others)
            f = self._factor(j, jobs[others[0]], self._kind_of[d]) if len(others) == 1 else 1.0 / len(on_d)
            factor = min(factor, f)
        return base * factor, tuple(sorted(partners))
