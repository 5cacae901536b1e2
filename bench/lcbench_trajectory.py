"""Every decision of simulated LCBench searches, as JSON: to check that a speed-up changed nothing.

For each (system, task, seed) it replays one search with `app.sim.search_bench.run_search` (no stop
target, the whole budget) and records what the policy and searcher decided: every trial's number,
configuration (`vals`), status, steps, start and end times, reason, and every report (trial, step,
simulated time, objective), plus the runtime's counters (starts, parks, resumes, migrations). Two runs
of the same code must give byte-identical files; a change that keeps decisions keeps them identical.

    python bench/lcbench_trajectory.py --systems default,gandiva --tasks 3945 --seeds 0 --hours 2 \\
        --out /tmp/before.json
    python bench/lcbench_trajectory.py ... --out /tmp/after.json --compare /tmp/before.json

Systems are named as in `bench/lcbench_speed.py`. `--compare` exits 1 naming the first difference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.controller import Controller  # noqa: E402
from app.sim.runtime import SimRuntime  # noqa: E402
from app.sim.search_bench import lcbench, run_search  # noqa: E402
from bench.lcbench_speed import SYSTEMS  # noqa: E402


def trajectory(task: str, system: str, seed: int, workers: int, hours: float, data: str | None) -> dict[str, Any]:
    """What one search decided (see the module docstring)."""
    policy, algorithm = SYSTEMS[system]
    seen: list[tuple[Controller, SimRuntime]] = []

    def keep(ctl: Controller, rt: SimRuntime) -> None:
        if not seen:
            seen.append((ctl, rt))

    res = run_search(
        lcbench(task, data), policy=policy, algorithm=algorithm, workers=workers, hours=hours, seed=seed, on_tick=keep
    )
    ctl, rt = seen[0]
    (search,) = ctl.searches()
    trials = [
        {
            "id": t.id,
            "number": t.number,
            "vals": t.vals,
            "status": str(t.status),
            "steps": t.steps,
            "started_at": t.started_at,
            "finished_at": t.finished_at,
            "reason": t.reason,
        }
        for t in sorted(ctl.trials_of(search.id), key=lambda t: t.id)
    ]
    rows = ctl.store.search_reports(search.id)  # type: ignore[attr-defined]  # a MemoryStore's
    reports = [[r.trial_id, r.step, r.at, r.objective] for r in sorted(rows, key=lambda r: (r.at, r.trial_id, r.step))]
    counters = {k: getattr(rt, k) for k in ("starts", "suspends", "resumes", "migrations", "limit_parks", "reports")}
    return {
        "result": {
            "started": res.started,
            "parked": res.parked,
            "killed": res.killed,
            "completed": res.completed,
            "reports": res.reports,
            "sim_seconds": res.sim_seconds,
            "best_so_far": res.best_so_far,
        },
        "counters": counters,
        "rounds": ctl.round_no,
        "trials": trials,
        "reports": reports,
    }


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two JSON values first differ (None: equal)."""
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}/{k}: only in {'after' if k in a else 'before'}"
            d = first_difference(a[k], b[k], f"{path}/{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return f"{path}: {len(a)} vs {len(b)} items" if len(a) != len(b) else None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default="default,fifo_tpe,gandiva")
    ap.add_argument("--tasks", default="3945")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--data", default=None)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--compare", type=Path, default=None, help="a file written before: exit 1 if different")
    args = ap.parse_args()
    out: dict[str, Any] = {}
    for task in args.tasks.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            for system in args.systems.split(","):
                t0 = time.process_time()
                run = trajectory(task, system, seed, args.workers, args.hours, args.data)
                key = f"{system}/{task}/{seed}"
                run = json.loads(json.dumps(run))  # tuples as lists, as a file read back has them
                out[key] = run
                digest = hashlib.sha256(json.dumps(run, sort_keys=True).encode()).hexdigest()[:16]
                print(
                    f"{key}: {run['result']['started']} trials, {run['rounds']} rounds, "
                    f"{time.process_time() - t0:.1f} CPU s, sha {digest}",
                    flush=True,
                )
    args.out.write_text(json.dumps(out, sort_keys=True))
    if args.compare is not None:
        before = json.loads(args.compare.read_text())
        bad = 0
        for key in out:
            if key not in before:
                print(f"{key}: not in {args.compare}")
                continue
            d = first_difference(before[key], out[key], key)
            print(f"{key}: {'SAME' if d is None else 'DIFFERENT at ' + d}")
            bad += d is not None
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
