"""Validate the simulator against the real runtime: a small trace, scaled to seconds, simulated with
SimRuntime and run for real with LocalRuntime on CPU devices (each mini-batch a sleep at the job's
rate, `quanta.sim.workload:train`), both through the same controller and policy. Reports per-job
completion times both ways and their relative differences (goal: within 10 %).

    python bench/sim_validate.py --jobs 10 --devices 2 --policy fifo --out bench/results/sim_validate_fifo.json
    python bench/sim_validate.py --jobs 12 --devices 2 --policy timeslice --median-steps 300 \
        --interarrival 3 --calibrate --repeat 5 --out bench/results/sim_validate_timeslice.json

`--calibrate` gives the simulator the mechanism costs the real run measured (median start, park,
resume and migration latencies from its store), as the Philly runs use Gandiva's measured costs;
without it the simulated mechanism is free. Rates are never calibrated: every job runs at its nominal
rate in the simulator.

    python bench/sim_validate.py --jobs 12 --devices 2 --policy gandiva --knobs '{"packing": false}' \
        --median-steps 300 --interarrival 3 --calibrate --repeat 3 --out bench/results/sim_validate_gandiva.json

Gandiva is validated with packing off: the sleeping jobs of this workload run at full speed when two
share a CPU device, which the simulator (no pair rate for them: each at half speed) cannot know.

Writes bench/results/sim_validate_<policy>.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from quanta.controller import Controller, ControllerOptions  # noqa: E402
from quanta.db.store import Store  # noqa: E402
from quanta.devices import cpu_devices  # noqa: E402
from quanta.executor.policy import make_policy  # noqa: E402
from quanta.executor.runtime.local import LocalRuntime  # noqa: E402
from quanta.sim.driver import simulate  # noqa: E402
from quanta.sim.runtime import SimCosts  # noqa: E402
from quanta.sim.traces import TraceJob, synthetic  # noqa: E402


def real_run(
    jobs: list[TraceJob], devices: int, policy: str, quantum: float, knobs: dict | None = None
) -> tuple[dict[int, float], dict[str, float], dict[str, int]]:
    """JCT per job id, running for real on `devices` CPU devices; median mechanism latencies (seconds,
    by kind: start, park, resume, migrate) and how many of each the run had."""
    work = Path(tempfile.mkdtemp(prefix="quanta-validate-"))
    rt = LocalRuntime(cpu_devices(devices), warm_modules=["quanta.sim.workload"])
    pol = make_policy(policy, **(knobs or {}))
    options = ControllerOptions(workdir=work, policy=pol, quantum_s=quantum)
    ctl = Controller(Store(f"sqlite:///{work / 'v.db'}"), rt, options)
    # Warm up (the template imports torch; the first fork pays for it): one tiny job before the clock starts.
    warm = ctl.add_job("warm-up", 2, 1, trainable="quanta.sim.workload:train", config={"rate": 20.0, "steps": 2})
    while not ctl.trial(warm).status.final:
        ctl.step()
    t0 = rt.now()
    pending = sorted(jobs, key=lambda j: (j.arrival, j.id))
    ids: dict[int, TraceJob] = {}
    try:
        while pending or ctl.has_alive():
            now = rt.now() - t0
            while pending and pending[0].arrival <= now:
                j = pending.pop(0)
                tid = ctl.add_job(
                    j.job_type,
                    j.steps,
                    j.devices,
                    trainable="quanta.sim.workload:train",
                    config={"rate": j.rate, "steps": j.steps},
                )
                ids[tid] = j
            ctl.step(max_wait=(pending[0].arrival - now) if pending else None)
    finally:
        ctl.close()
    jct = {j.id: ctl.trial(tid).finished_at - (t0 + j.arrival) for tid, j in ids.items()}
    costs: dict[str, float] = {}
    counts: dict[str, int] = {}
    for kind in ("start", "park", "resume", "migrate"):
        ms = sorted(r.ms for r in ctl.store.latencies(kind) if r.trial_id in ids)
        counts[kind] = len(ms)
        if ms:
            costs[kind] = ms[len(ms) // 2] / 1000.0
    return jct, costs, counts


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--quantum", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--interarrival", type=float, default=3.0, help="mean seconds between arrivals")
    ap.add_argument("--median-steps", type=int, default=100, help="median job length in mini-batches (20/s)")
    ap.add_argument("--calibrate", action="store_true", help="simulate with the real run's measured costs")
    ap.add_argument("--repeat", type=int, default=1, help="real runs to compare with the one simulation")
    ap.add_argument("--knobs", default="{}", help="policy knobs as JSON, e.g. '{\"packing\": false}'")
    ap.add_argument("--out", type=Path, default=None, help="default bench/results/sim_validate_<policy>.json")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = ROOT / "bench" / "results" / f"sim_validate_{args.policy}.json"
    try:
        knobs = json.loads(args.knobs)
        if not isinstance(knobs, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        ap.error(f"--knobs: {exc}")

    # A small trace in seconds: jobs at 20 mini-batches/s (100 steps median: 2-10 s), one device each.
    jobs = synthetic(
        args.jobs,
        seed=args.seed,
        mean_interarrival_s=args.interarrival,
        median_steps=args.median_steps,
        sigma=0.5,
        rate=20.0,
        mix=(("sleep", 1, 1.0),),
    )
    t = time.perf_counter()
    real_jct, measured, mechanism = real_run(jobs, args.devices, args.policy, args.quantum, knobs)
    wall = time.perf_counter() - t
    costs = SimCosts(start_s=0.0, suspend_s=0.0, resume_s=0.0, migrate_s=0.0)
    if args.calibrate:
        costs = SimCosts(
            start_s=measured.get("start", 0.0),
            suspend_s=measured.get("park", 0.0),
            resume_s=measured.get("resume", 0.0),
            migrate_s=measured.get("migrate", measured.get("resume", 0.0)),
        )
    sim = simulate(
        jobs,
        args.policy,
        policy_knobs=knobs,
        gpus=args.devices,
        gpus_per_server=args.devices,
        quantum_s=args.quantum,
        costs=costs,
        check=True,
    )
    sim_jct = {r["id"]: r["jct_s"] for r in sim.jobs}
    rows = []
    for j in jobs:
        s, r = sim_jct[j.id], real_jct[j.id]
        rows.append(
            {
                "id": j.id,
                "steps": j.steps,
                "arrival_s": j.arrival,
                "sim_jct_s": round(s, 3),
                "real_jct_s": round(r, 3),
                "rel_diff": round((r - s) / s, 4),
            }
        )
    first = _agreement(real_jct, sim_jct)
    worst = first["worst_rel_diff"]
    mean_sim = sum(sim_jct.values()) / len(jobs)
    mean_real = sum(real_jct.values()) / len(jobs)
    print(f"{'job':>4} {'steps':>6} {'arrival':>8} {'sim JCT':>8} {'real JCT':>9} {'diff':>7}")
    for x in rows:
        print(
            f"{x['id']:>4} {x['steps']:>6} {x['arrival_s']:>8.2f} {x['sim_jct_s']:>8.2f} {x['real_jct_s']:>9.2f} "
            f"{x['rel_diff']:>+7.1%}"
        )
    print(
        f"mean JCT: sim {mean_sim:.2f} s, real {mean_real:.2f} s ({(mean_real - mean_sim) / mean_sim:+.1%}); "
        f"worst job {worst:.1%}; real run took {wall:.1f} s"
    )
    print(
        "real mechanism: "
        + ", ".join(f"{k} x{mechanism[k]} (median {measured[k] * 1000:.1f} ms)" for k in mechanism if k in measured)
        + f"; simulated: {sim.summary['suspends']} suspends, {sim.summary['migrations']} migrations"
    )
    # Further real runs of the same trace against the same (deterministic) simulation: how much of the
    # per-job difference is run-to-run noise of the real side.
    repeats = [first]
    for _ in range(args.repeat - 1):
        again, _, _ = real_run(jobs, args.devices, args.policy, args.quantum, knobs)
        repeats.append(_agreement(again, sim_jct))
    if args.repeat > 1:
        within = sum(r["jobs_within_10pct"] for r in repeats)
        print(f"{'run':>4} {'mean diff':>10} {'worst job':>10} {'jobs within 10 %':>17}")
        for i, r in enumerate(repeats):
            n_ok = r["jobs_within_10pct"]
            print(f"{i:>4} {r['mean_rel_diff']:>+10.1%} {r['worst_rel_diff']:>10.1%} {n_ok:>14}/{len(jobs)}")
        print(f"all runs: {within} of {len(jobs) * len(repeats)} job completions within 10 %")
    out = {
        "policy": args.policy,
        "knobs": knobs,
        "repeats": repeats,
        "devices": args.devices,
        "quantum_s": args.quantum,
        "mean_interarrival_s": args.interarrival,
        "calibrated": args.calibrate,
        "sim_costs_s": costs.__dict__,
        "real_mechanism_counts": mechanism,
        "real_median_latency_s": measured,
        "sim_suspends": sim.summary["suspends"],
        "sim_migrations": sim.summary["migrations"],
        "jobs": rows,
        "mean_sim_jct_s": mean_sim,
        "mean_real_jct_s": mean_real,
        "worst_rel_diff": worst,
        "within_10pct": worst <= 0.10,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


def _agreement(real: dict[int, float], sim: dict[int, float]) -> dict[str, float]:
    diffs = [(real[k] - sim[k]) / sim[k] for k in sim]
    mean_sim, mean_real = sum(sim.values()) / len(sim), sum(real.values()) / len(real)
    return {
        "mean_rel_diff": round((mean_real - mean_sim) / mean_sim, 4),
        "worst_rel_diff": round(max(abs(d) for d in diffs), 4),
        "jobs_within_10pct": sum(abs(d) <= 0.10 for d in diffs),
    }


if __name__ == "__main__":
    main()
