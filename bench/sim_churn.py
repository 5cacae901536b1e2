"""Migration churn of one gandiva simulation: moves per job (mean, 95th percentile, largest, jobs moved
more than 5 times) and mean JCT per job size, beside the summary `quanta simulate` prints.

    python bench/sim_churn.py TRACE GPUS [--jobs N] [--sticky] [--gang] [--knob NAME=JSON ...] [--json OUT]

(4 GPUs per server, quantum 60 s, V100, as docs/simulation.md). The runtime counts migrations in
total only; this wraps its resume to count them per job (a move = a resume on other devices). With
`--sticky`, each move is also put down to what sent the job away in the plan before it (`moves_by_cause`,
from wrapping `select_sticky`): `guard` (a unit in its starvation guard whose home was claimed moves at
once), `exclusive on its home` (an exclusive trial, e.g. a new job in its guard, claimed its home),
`balance` (its home was claimed and its load exceeds a target's by two), `gang block` (a multi-device
unit claimed a block), `gang patience` (a gang that waited its patience for its block ran on devices
left idle, knob `gang_patience`), `placed elsewhere` (not a mover, yet resumed off its home: its home was not free
when the board placed it, e.g. a released or spread unit).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from app.executor.policy.gandiva import placement
from app.executor.policy.knobs import GandivaKnobs
from app.sim import runtime as sim_runtime
from app.sim.driver import simulate
from app.sim.traces import load_trace


def size_class(devices: int) -> str:
    """The job-size bucket the churn and loss tables report by: 1, 2-4, 5-8 or over 8 GPUs."""
    return "1" if devices == 1 else "2-4" if devices <= 4 else "5-8" if devices <= 8 else ">8"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("gpus", type=int)
    ap.add_argument("--jobs", type=int, default=None, help="only the first N jobs")
    ap.add_argument("--sticky", action="store_true")
    ap.add_argument("--gang", action="store_true")
    ap.add_argument("--knob", action="append", default=[], help="NAME=JSON, another gandiva knob")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    moves: Counter[int] = Counter()
    causes: Counter[str] = Counter()
    cause_of: dict[int, str] = {}  # trial -> why the last plan sent it away (sticky only)
    resume = sim_runtime.SimRuntime._resume
    select_sticky = placement.select_sticky
    idle_runs = placement.idle_runs

    def counting(self: Any, j: Any, devices: tuple[str, ...]) -> None:
        if devices != j.devices:
            moves[j.id] += 1
            causes[cause_of.get(j.id, "placed elsewhere")] += 1
        resume(self, j, devices)

    def why(
        ranked: Any, order: Any, grown_old: Any, load: Any, movable: Any = (), exclusive: Any = (), *a: Any, **kw: Any
    ) -> Any:
        out = select_sticky(ranked, order, grown_old, load, movable, exclusive, *a, **kw)
        selected, _waiting, movers, targets, _caps = out
        held = {  # devices exclusive units claimed as their home
            d
            for u in selected
            if u[0].id in exclusive and u[0].id not in movers
            for d in placement.home_of(u, grown_old) or ()
        }
        cause_of.clear()
        for u in ranked:
            first = u[0].id
            if first in targets:
                cause = "gang block"
            elif first in movers:
                home = placement.home_of(u, grown_old) or ()
                cause = (
                    "guard"
                    if all(t.id in movable for t in u)
                    else "exclusive on its home"
                    if not held.isdisjoint(home)
                    else "balance"
                )
            else:
                continue
            for t in u:
                cause_of[t.id] = cause
        return out

    def idle(board: Any, waiting: Any, patient: Any, *a: Any) -> Any:
        out = idle_runs(board, waiting, patient, *a)
        for tid in out:
            cause_of[tid] = "gang patience"
        return out

    sim_runtime.SimRuntime._resume = counting  # type: ignore[method-assign]
    placement.select_sticky = why  # type: ignore[assignment]
    placement.idle_runs = idle  # type: ignore[assignment]

    knobs: dict[str, Any] = {k: True for k in ("sticky", "gang") if getattr(args, k)}
    for kv in args.knob:
        name, _, value = kv.partition("=")
        try:
            knobs[name] = json.loads(value)
        except json.JSONDecodeError:
            ap.error(f"--knob {kv!r}: expected NAME=JSON, e.g. gang_patience=4 or gang_patience=null")
    jobs = load_trace(args.trace, args.jobs)
    t0 = time.perf_counter()
    res = simulate(jobs, "gandiva", gpus=args.gpus, gpus_per_server=4, policy_knobs=knobs or None, check=False)
    s = res.summary
    per_job = np.array([moves.get(r["trial"], 0) for r in res.jobs])
    by_size: dict[str, list[float]] = defaultdict(list)
    moved: Counter[str] = Counter()
    for r in res.jobs:
        size = size_class(r["devices"])
        by_size[size].append(r["jct_s"] / 3600)
        moved[size] += moves.get(r["trial"], 0)
    out = {
        "trace": args.trace,
        "gpus": args.gpus,
        "jobs": s["jobs"],
        "knobs": knobs,
        # what the placement ran with, defaults included (a default may change after these figures)
        "placement_knobs": {k: getattr(GandivaKnobs(**knobs), k) for k in ("sticky", "gang", "gang_patience")},
        "mean_jct_h": round(s["mean_jct_s"] / 3600, 2),
        "median_jct_h": round(s["median_jct_s"] / 3600, 2),
        "p95_jct_h": round(s["p95_jct_s"] / 3600, 1),
        "makespan_h": round(s["makespan_s"] / 3600, 1),
        "utilization": round(s["utilization"], 4),
        "mean_time_to_100_minibatches_s": round(s["mean_time_to_100_minibatches_s"], 1),
        "migrations": s["migrations"],
        "moves_per_job": round(float(per_job.mean()), 2),
        "moves_p95": int(np.percentile(per_job, 95)),
        "moves_max": int(per_job.max()),
        "jobs_moved_over_5": int((per_job > 5).sum()),
        "moves_by_cause": dict(causes.most_common()),
        "migrations_by_job_devices": s["migrations_by_job_devices"],
        "suspends": s["suspends"],
        "packs_kept_undone": [s["packs_kept"], s["packs_undone"]],
        "by_job_size": {  # jobs, mean JCT (h), moves per job
            k: [len(v), round(sum(v) / len(v), 2), round(moved[k] / len(v), 2)] for k, v in sorted(by_size.items())
        },
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(out))
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
