"""Validate the simulator against the real runtime: a small trace, scaled to seconds, simulated with
SimRuntime and run for real with LocalRuntime on CPU devices (each mini-batch a sleep at the job's
rate, `app.sim.workload:train`), both through the same controller and policy. Reports per-job
completion times both ways and their relative differences (goal: within 10 %).

    python bench/sim_validate.py --jobs 10 --devices 2 --policy fifo

Writes bench/results/sim_validate.json.
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

from app.controller import Controller  # noqa: E402
from app.db.store import Store  # noqa: E402
from app.executor.policy import make_policy  # noqa: E402
from app.executor.runtime.devices import cpu_devices  # noqa: E402
from app.executor.runtime.local import LocalRuntime  # noqa: E402
from app.sim.driver import simulate  # noqa: E402
from app.sim.runtime import SimCosts  # noqa: E402
from app.sim.traces import TraceJob, synthetic  # noqa: E402


def real_run(jobs: list[TraceJob], devices: int, policy: str, quantum: float) -> dict[int, float]:
    """JCT per job id, running for real on `devices` CPU devices."""
    work = Path(tempfile.mkdtemp(prefix="quanta-validate-"))
    ctl: Controller | None = None
    rt = LocalRuntime(cpu_devices(devices), lambda tid: ctl.launch(tid), warm_modules=["app.sim.workload"])  # type: ignore[union-attr]
    ctl = Controller(
        Store(f"sqlite:///{work / 'v.db'}"), rt, workdir=work, policy=make_policy(policy), quantum_s=quantum
    )
    # Warm up (the template imports torch; the first fork pays for it): one tiny job before the clock starts.
    warm = ctl.add_job("warm-up", 2, 1, trainable="app.sim.workload:train", config={"rate": 20.0, "steps": 2})
    while not ctl.trials[warm].status.final:
        ctl.step()
    t0 = rt.now()
    pending = sorted(jobs, key=lambda j: (j.arrival, j.id))
    ids: dict[int, TraceJob] = {}
    try:
        while pending or ctl.alive():
            now = rt.now() - t0
            while pending and pending[0].arrival <= now:
                j = pending.pop(0)
                tid = ctl.add_job(
                    j.job_type,
                    j.steps,
                    j.devices,
                    trainable="app.sim.workload:train",
                    config={"rate": j.rate, "steps": j.steps},
                )
                ids[tid] = j
            ctl.step(max_wait=(pending[0].arrival - now) if pending else None)
    finally:
        ctl.close()
    return {j.id: ctl.trials[tid].finished_at - (t0 + j.arrival) for tid, j in ids.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--quantum", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sim_validate.json")
    args = ap.parse_args()

    # A small trace in seconds: ~3 s gaps, 2-10 s jobs at 20 mini-batches/s, one device each.
    jobs = synthetic(
        args.jobs,
        seed=args.seed,
        mean_interarrival_s=3.0,
        median_steps=100,
        sigma=0.5,
        rate=20.0,
        mix=(("sleep", 1, 1.0),),
    )
    sim = simulate(
        jobs,
        args.policy,
        gpus=args.devices,
        gpus_per_server=args.devices,
        quantum_s=args.quantum,
        costs=SimCosts(start_s=0.0, suspend_s=0.0, resume_s=0.0, migrate_s=0.0),
        check=True,
    )
    sim_jct = {r["id"]: r["jct_s"] for r in sim.jobs}
    t = time.perf_counter()
    real_jct = real_run(jobs, args.devices, args.policy, args.quantum)
    wall = time.perf_counter() - t
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
    worst = max(abs(x["rel_diff"]) for x in rows)
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
    out = {
        "policy": args.policy,
        "devices": args.devices,
        "jobs": rows,
        "mean_sim_jct_s": mean_sim,
        "mean_real_jct_s": mean_real,
        "worst_rel_diff": worst,
        "within_10pct": worst <= 0.10,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
