"""How fast the simulator replays a trace: wall seconds and jobs/s for a policy on a cluster.

Targets: every Philly trace merged (15,264 jobs) on 500 GPUs in under 60 s on one core with fifo and in
under 120 s with gandiva. `rounds` counts the ticks whose plan changed the placement.

    python bench/sim_speed.py --trace all --gpus 500 --gpus-per-server 8 --policy fifo
    python bench/sim_speed.py --trace all --gpus 500 --policy tiresias --max-jobs 3000

Prints a table and writes bench/results/sim_speed.json (one entry per run, keyed by its settings).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from quanta.sim.driver import SimResult, simulate  # noqa: E402
from quanta.sim.traces import TraceJob, load_trace  # noqa: E402

TARGET_S = 60.0  # fifo
TIMESLICED_TARGET_S = 120.0  # the time-slicing policies, gandiva above all


def add_cluster_args(ap: argparse.ArgumentParser, policy: str) -> None:
    """The options that say which trace runs on which simulated cluster under which policy (shared with
    bench/sim_profile.py): --trace, --gpus, --gpus-per-server, --policy, --quantum."""
    ap.add_argument("--trace", default="all")
    ap.add_argument("--gpus", type=int, default=500)
    ap.add_argument("--gpus-per-server", type=int, default=8)
    ap.add_argument("--policy", default=policy)
    ap.add_argument("--quantum", type=float, default=60.0)


def simulate_cluster(
    args: argparse.Namespace, jobs: list[TraceJob], progress: Callable[[int, int, float], None]
) -> SimResult:
    """`simulate` of `jobs` on the cluster and policy `add_cluster_args` parsed, without invariant checks
    (they are for tests, and slow), `progress` called about once a wall second."""
    return simulate(
        jobs,
        args.policy,
        gpus=args.gpus,
        gpus_per_server=args.gpus_per_server,
        quantum_s=args.quantum,
        check=False,
        progress=progress,
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cluster_args(ap, "fifo")
    ap.add_argument("--max-jobs", type=int, default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sim_speed.json")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    jobs = load_trace(args.trace, args.max_jobs)
    load_s = time.perf_counter() - t0
    res = simulate_cluster(
        args,
        jobs,
        lambda done, n, now: print(f"  {done}/{n} done, virtual day {now / 86400:.1f}", file=sys.stderr),
    )
    wall = time.perf_counter() - t0
    s = res.summary
    target = TARGET_S if args.policy == "fifo" else TIMESLICED_TARGET_S
    row = {
        "trace": args.trace,
        "jobs": s["jobs"],
        "gpus": args.gpus,
        "gpus_per_server": args.gpus_per_server,
        "policy": args.policy,
        "quantum_s": args.quantum,
        "wall_s": round(wall, 2),
        "load_s": round(load_s, 2),
        "jobs_per_s": round(s["jobs"] / wall, 1),
        "ticks": s["ticks"],
        "rounds": s["rounds"],  # ticks that changed the placement
        "target_s": target,
        "met": wall < target and s["jobs"] >= 15_000,
        "makespan_days": round(s["makespan_s"] / 86400, 1),
        "mean_jct_h": round(s["mean_jct_s"] / 3600, 2),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    print(f"{'setting':<22}{'value':>14}")
    for k, v in row.items():
        print(f"{k:<22}{v!s:>14}")
    data = json.loads(args.out.read_text()) if args.out.exists() else {}
    key = f"{args.trace}/{row['jobs']}jobs/{args.gpus}gpus/{args.gpus_per_server}per/{args.policy}/q{args.quantum:g}"
    data[key] = row
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
