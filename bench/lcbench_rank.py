"""Two Quanta systems against each other on LCBench at several numbers of workers (simulated time).

Reads one `bench/lcbench.py --runs` log per number of workers, each holding both systems on the same
tasks and seeds, and prints per number of workers and target how much sooner `--b` is than `--a`:
the median over tasks of (a's median time / b's), their geometric mean, the tasks where b is strictly
sooner and strictly later, the geometric mean over runs, and each system's misses. Above 1: b is sooner.
It was written for stop 31's choice of `search.rank: auto` (`app.search.multifidelity.resolve_rank`).

    python bench/lcbench_rank.py --a quanta_level_rf33 --b quanta_depth_rf0 \
        --runs 2=bench/results/lcbench_rank_w2_stop31_runs.jsonl --runs 4=... --json out.json

A log may hold other systems; units (task, seed) where either system is missing are left out and counted.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lcbench import TARGETS, load_runs  # noqa: E402


def compare(log: Path, a: str, b: str, budget_s: float) -> dict[str, Any]:
    """b against a over the (task, seed) units of `log` that both finished; a miss counts `budget_s`."""
    times: dict[str, dict[tuple[str, int], dict[str, float]]] = {a: {}, b: {}}
    for r in load_runs(log):
        if r.system in times:
            times[r.system][(r.task, r.seed)] = {
                t: budget_s if r.time_to_target.get(t) is None else float(r.time_to_target[t]) for t in TARGETS
            }
    units = sorted(set(times[a]) & set(times[b]))
    if not units:
        raise SystemExit(f"--runs: {log} has no (task, seed) unit that both {a} and {b} finished")
    tasks = sorted({task for task, _ in units})
    out: dict[str, Any] = {
        "tasks": len(tasks),
        "units": len(units),
        "left_out": len(set(times[a]) ^ set(times[b])),
    }
    for target in TARGETS:
        per_task = []
        for task in tasks:
            ta = statistics.median(times[a][u][target] for u in units if u[0] == task)
            tb = statistics.median(times[b][u][target] for u in units if u[0] == task)
            per_task.append(ta / tb)
        per_run = [times[a][u][target] / times[b][u][target] for u in units]
        out[target] = {
            "median_ratio": statistics.median(per_task),
            "geo_ratio_tasks": statistics.geometric_mean(per_task),
            "b_sooner_tasks": sum(x > 1 for x in per_task),
            "b_later_tasks": sum(x < 1 for x in per_task),
            "geo_ratio_runs": math.exp(statistics.fmean(math.log(x) for x in per_run)),
            "misses": {name: sum(times[name][u][target] >= budget_s for u in units) for name in (a, b)},
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the reference system")
    ap.add_argument("--b", required=True, help="the system compared with it")
    ap.add_argument("--runs", action="append", required=True, help="WORKERS=PATH of a runs log (repeatable)")
    ap.add_argument("--hours", type=float, default=8.0, help="the simulated budget the runs had")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    result: dict[str, Any] = {"a": args.a, "b": args.b, "hours": args.hours, "workers": {}}
    for item in args.runs:
        workers, sep, path = item.partition("=")
        if not sep or not workers.isdigit():
            ap.error(f"--runs: expected WORKERS=PATH, got {item!r}")
        result["workers"][workers] = compare(Path(path), args.a, args.b, args.hours * 3600.0)
    print(f"{args.b} against {args.a} (above 1: {args.b} sooner)")
    print("workers | target | median over tasks | geo (tasks) | sooner / later tasks | geo (runs) | misses a / b")
    for workers, row in result["workers"].items():
        for target in TARGETS:
            e = row[target]
            print(
                f"{workers:>7} | {target:<6} | {e['median_ratio']:17.2f} | {e['geo_ratio_tasks']:11.2f} | "
                f"{e['b_sooner_tasks']:>2} / {e['b_later_tasks']:<2} of {row['tasks']:<6} | "
                f"{e['geo_ratio_runs']:10.2f} | "
                f"{e['misses'][args.a]} / {e['misses'][args.b]}"
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
