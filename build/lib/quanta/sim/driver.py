"""Replay a trace through the real `Controller` (with a `MemoryStore`) on a `SimRuntime`.

Jobs are added at their arrival times (`ctl.add_job`), and the controller ticks as it does in the
service: `ctl.step(max_wait=time to the next arrival)` = snapshot -> policy.plan -> reconcile -> record
intent -> runtime.apply, then runtime events until the next tick. The simulator's only liberties are
the virtual clock and controller options that change how often it does things, not what it decides:
polls are not capped at 0.5 s (`poll_cap_s`), the dashboard's cluster view is not republished every
tick (`publish_every_s`), unchanged trial views are reused between snapshots (`cache_views`) and the
rounds a policy promised would change nothing are not planned (`trust_quiet`, `Plan.quiet_until`).

What comes out (`SimResult.summary`): mean/median/p95 job completion time (finish - arrival), makespan
(last finish - first arrival), mean device utilisation (device-seconds with at least one job computing
over devices x makespan), mean time from arrival to the first 100 mini-batches, packs kept and undone,
migrations, ticks and rounds (the ticks whose plan changed the placement). Deterministic: the same
trace, policy, knobs and seed give the same numbers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quanta.controller import Controller, ControllerOptions
from quanta.db.memory import MemoryStore
from quanta.executor.policy import make_policy
from quanta.executor.policy.knobs import ShareKnobs
from quanta.executor.policy.share import SharePolicy
from quanta.executor.policy.types import Policy
from quanta.sim.runtime import InvariantError, JobSpec, SimCosts, SimRuntime
from quanta.sim.throughputs import Throughputs
from quanta.sim.traces import TraceJob, throughputs_path
from quanta.status import TrialStatus

PACKING_POLICIES = frozenset({"gandiva"})  # policies that may put two jobs on one device


@dataclass
class SimResult:
    policy: str
    summary: dict[str, Any]
    jobs: list[dict[str, Any]] = field(default_factory=list)


def simulate(
    jobs: Sequence[TraceJob],
    policy: str = "fifo",
    *,
    gpus: int = 100,
    gpus_per_server: int = 4,
    quantum_s: float = 60.0,
    seed: int = 0,
    kind: str = "v100",
    throughputs: Throughputs | None = None,
    costs: SimCosts = SimCosts(),
    policy_knobs: dict[str, Any] | None = None,
    max_per_device: int | None = None,
    check: bool = True,
    jitter: float = 0.0,
    event_driven: bool = True,
    progress: Callable[[int, int, float], None] | None = None,
    shares: Mapping[str, float] | None = None,
    share_knobs: ShareKnobs | None = None,
    kind_aware: bool = True,
) -> SimResult:
    """Run `jobs` under `policy` on `gpus` devices in servers of `gpus_per_server`.

    `check` verifies the invariants after every event batch (device capacity, no job both computing
    and queued, work conserved); it costs O(jobs) each time, so large runs turn it off.
    `kind` is one device kind or a mix with GPU counts (``v100=120,k80=80``; see `server_kinds`).
    `jitter` > 0 perturbs each job's solo rates by a log-normal factor drawn from `seed` (0 = exact
    table rates, and then `seed` changes nothing). `event_driven=False` ticks event-driven policies (fifo)
    every quantum too, and plans the rounds a policy promised quiet (`Plan.quiet_until`, gandiva's when
    nobody waits): the same results, slower (tests check they agree).
    `shares` (None: off) puts the share layer (`quanta.executor.policy.share`) over `policy`: each job counts
    against its `user`, weighted by `shares[user]` (1 when not named), with `share_knobs`.
    Each job's rate on every kind of the cluster is known to the controller from the throughput table
    (`SimRuntime.known_rates`); a job is never placed on a kind where it is 0, and with `kind_aware` (on a
    mix) the policies place jobs where their rate relative to the other kinds is highest
    (`quanta.executor.policy.kinds`); off: kind-blind. ValueError for a job that no device set of this
    cluster can run (its rate is 0 on every kind with enough devices)."""
    if gpus < 1 or gpus_per_server < 1:
        raise ValueError("gpus and gpus_per_server must be >= 1")
    started = time.perf_counter()
    jobs = sorted(jobs, key=lambda j: (j.arrival, j.id))
    thr = throughputs
    if thr is None and any(j.rate is None for j in jobs):
        thr = Throughputs.load(throughputs_path())
    pol: Policy = make_policy(policy, **(policy_knobs or {}))
    if shares is not None:
        pol = SharePolicy(pol, share_knobs)
    cap = max_per_device or (2 if policy in PACKING_POLICIES else 1)
    t0 = jobs[0].arrival if jobs else 0.0
    kinds = server_kinds(kind, gpus, gpus_per_server)  # one per server
    rt = SimRuntime(
        len(kinds),
        gpus_per_server,
        total=gpus,
        kinds=kinds,
        throughputs=thr,
        costs=costs,
        max_per_device=cap,
        start=t0,
        jitter=jitter,
        seed=seed,
    )
    store = MemoryStore(keep_measurements=False)
    if shares is not None:
        for user in sorted({j.user for j in jobs} - {""}):
            if store.user(user) is None:
                store.add_user(user, t0, weight=float(shares.get(user, 1.0)))
            else:
                store.update_user(user, weight=float(shares.get(user, 1.0)))
    # A policy whose plans change only on arrivals and completions (both wake the controller) is ticked
    # on those events alone: the same decisions, without a tick per idle quantum.
    tick_every = math.inf if event_driven and getattr(pol, "event_driven", False) else quantum_s
    options = ControllerOptions(
        policy=pol,
        quantum_s=tick_every,
        poll_cap_s=math.inf,
        publish_every_s=math.inf,
        cache_views=True,
        kind_aware=kind_aware,
        trust_quiet=event_driven,
    )
    ctl = Controller(store, rt, options)
    specs, known = _known_rates(jobs, rt, gpus)
    mixed = len(rt.kinds) > 1
    meta: dict[int, TraceJob] = {}
    clamped = 0
    i, n, ticks = 0, len(jobs), 0
    last_progress = time.perf_counter()
    while True:
        now = rt.now()
        while i < n and jobs[i].arrival <= now + 1e-6:
            j = jobs[i]
            devices = min(j.devices, gpus)
            clamped += devices != j.devices
            # On one kind the rates say nothing a policy could use (and a view without them is cheaper).
            tid = ctl.add_job(j.job_type, j.steps, devices, owner=j.user, kind_rates=known[i] if mixed else None)
            rt.register(tid, specs[i])
            meta[tid] = j
            i += 1
        if not ctl.has_alive():
            if i >= n:
                break
            ctl.handle(rt.poll(jobs[i].arrival - now))  # idle cluster: jump to the next arrival
            continue
        ctl.step(max_wait=(jobs[i].arrival - now) if i < n else None)
        ticks += 1
        if check:
            rt.check()
            _check_controller(ctl, rt)
        if progress is not None and time.perf_counter() - last_progress > 1.0:
            last_progress = time.perf_counter()
            progress(len(rt.exited_at), n, rt.now())
    ctl.flush()
    wall = time.perf_counter() - started
    return _result(policy, meta, rt, store, wall, (ticks, ctl.round_no), gpus, clamped, check)


def _known_rates(jobs: Sequence[TraceJob], rt: SimRuntime, gpus: int) -> tuple[list[JobSpec], list[dict[str, float]]]:
    """Each job's spec and its rate per kind (the throughput table's), in the order of `jobs`; ValueError
    for a job no devices of this cluster can run: 0 on every kind, or on the kinds with enough devices."""
    per_kind: dict[str, int] = {}
    for d in rt.devices():
        per_kind[d.kind] = per_kind.get(d.kind, 0) + 1
    specs: list[JobSpec] = []
    known: list[dict[str, float]] = []
    for j in jobs:
        spec = JobSpec(j.job_type, j.steps, min(j.devices, gpus), j.rate)
        rates = rt.known_rates(j.id, spec)
        specs.append(spec)
        known.append(rates)
        if sum(n for k, n in per_kind.items() if rates.get(k, 0.0) > 0) < spec.devices:
            zero = ", ".join(sorted(k for k, r in rates.items() if r <= 0))
            raise ValueError(
                f"job {j.id} ({j.job_type}, {spec.devices} GPUs) cannot run on this cluster: its throughput is 0 "
                f"on {zero} and the other kinds have fewer than {spec.devices} devices"
            )
    return specs, known


def server_kinds(kind: str, gpus: int, gpus_per_server: int) -> list[str]:
    """The device kind of each server. `kind` is one kind (``v100``: every server) or a mix with GPU
    counts (``v100=120,k80=80``), filled server by server in the order given; each count must be a
    whole number of servers and the counts must add up to `gpus`."""
    servers = -(-gpus // gpus_per_server)  # the last server is smaller when gpus_per_server does not divide gpus
    if "=" not in kind:
        return [kind.strip()] * servers
    out: list[str] = []
    total = 0
    for part in kind.split(","):
        name, _, count = part.partition("=")
        try:
            n = int(count)
        except ValueError:
            raise ValueError(f"kind: '{part}' is not NAME=GPUS") from None
        if n <= 0 or n % gpus_per_server:
            per = gpus_per_server
            raise ValueError(f"kind: {name.strip()}={n} is not a positive multiple of {per} GPUs per server")
        out += [name.strip()] * (n // gpus_per_server)
        total += n
    if total != gpus:
        raise ValueError(f"kind: the mix has {total} GPUs, the cluster {gpus}")
    return out


def _check_controller(ctl: Controller, rt: SimRuntime) -> None:
    """No job both computing and queued: what computes is RUNNING in the controller, and no QUEUED
    trial is resident."""
    resident = rt.residency()
    for tid in rt.running_ids():
        st = ctl.trial(tid).status
        if st != TrialStatus.RUNNING:
            raise InvariantError(f"job {tid} computes but the controller has it {st}")
    for t in ctl.alive():
        if t.status == TrialStatus.QUEUED and t.id in resident:
            raise InvariantError(f"job {t.id} is queued and resident")


def _result(
    policy: str,
    meta: dict[int, TraceJob],
    rt: SimRuntime,
    store: MemoryStore,
    wall: float,
    ticks_rounds: tuple[int, int],
    gpus: int,
    clamped: int,
    checked: bool,
) -> SimResult:
    import numpy as np

    rows: list[dict[str, Any]] = []
    for tid, j in meta.items():
        done, total = rt.progress(tid)
        if tid not in rt.exited_at or done + 1e-6 < total:
            raise InvariantError(f"job {tid} did not complete ({done} of {total} steps)")
        finish = rt.exited_at[tid]
        first = rt.first_at.get(tid, finish)
        rows.append(
            {
                "id": j.id,
                "trial": tid,
                "user": j.user,
                "job_type": j.job_type,
                "devices": j.devices,
                "steps": j.steps,
                "arrival_s": j.arrival,
                "finish_s": finish,
                "jct_s": finish - j.arrival,
                "first_100_s": first - j.arrival,
            }
        )
    jct = np.array([r["jct_s"] for r in rows]) if rows else np.zeros(1)
    first100 = np.array([r["first_100_s"] for r in rows]) if rows else np.zeros(1)
    start = min((r["arrival_s"] for r in rows), default=0.0)
    end = max((r["finish_s"] for r in rows), default=0.0)
    makespan = end - start
    total_steps = sum(r["steps"] for r in rows)
    if checked and abs(rt.steps_done_total - total_steps) > 1e-6 * max(1, total_steps):
        raise InvariantError(f"work not conserved: {rt.steps_done_total} steps done, {total_steps} asked")
    summary = {
        "jobs": len(rows),
        "mean_jct_s": float(jct.mean()),
        "median_jct_s": float(np.median(jct)),
        "p95_jct_s": float(np.percentile(jct, 95)),
        "makespan_s": float(makespan),
        "utilization": float(rt.busy_device_seconds / (gpus * makespan)) if makespan > 0 else 0.0,
        "mean_time_to_100_minibatches_s": float(first100.mean()),
        "packs_kept": rt.packs_kept,
        "packs_undone": rt.packs_undone,
        "pack_stretches": rt.pack_stretches,
        "packed_device_s": round(rt.packed_seconds, 1),
        "migrations": rt.migrations,
        "migrations_by_job_devices": {str(k): v for k, v in sorted(rt.migrations_by_devices.items())},
        "suspends": rt.suspends,
        "ticks": ticks_rounds[0],
        # Ticks whose plan changed what runs where (the others planned and changed nothing).
        "rounds": ticks_rounds[1],
        "wall_s": round(wall, 3),
        "jobs_per_s": round(len(rows) / wall, 1) if wall > 0 else None,
        "clamped_jobs": clamped,
    }
    return SimResult(policy, summary, rows)
