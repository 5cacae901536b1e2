"""A search that runs out of trials, in simulated time: the order its held trials go on in its tail.

Once a search has made its last trial, pause-ASHA's idle-device rule runs its held trials on, one rung at
a time, rather than leave a device idle (`quanta.executor.policy.asha.rules.idle_runs`); which go first is
`scheduler.tail_order`: `highest` (the highest rung's best, each in turn to its last step) or `lowest`
(every held trial one rung further, lowest rung first, so that the ranks of the next rung pick what goes
on). This script runs the default with each order given (`--orders`, the first the baseline) side by side
per (task, seed) on LCBench with a trial budget (`--trials`, 64 as in a small live search), each search
stopping at the hard target as `quanta run` with a target does, and reports per order:

- hits at the medium and hard targets (a miss counts the whole budget, 8 simulated hours);
- per target, over the runs whose time differs from the baseline's: how many are sooner and later, and
  the geometric mean of baseline time / its time; the median over the tasks of the per-task median ratio;
- the device-seconds a search took to its end: median over the runs that missed hard (what a miss costs);
- `end_s`: simulated seconds from the start to the search's end (its last trial stopped or done).

    python bench/tail.py --tasks suite-even --seeds 0,1,2,3,4,5,6,7,8,9 --jobs 2 --json bench/results/tail_even.json

Writes JSON shaped {"runs": [{"task", "seed", "order", "medium_s", "hard_s", "end_s", "device_s",
"completed", "killed", "started"}], "summary": {"<order>": {...}}, "trials", "workers", "hours", "seeds",
"tasks", "command"}.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run_unit(
    task: str, seed: int, order: str, targets: dict[str, float], trials: int, workers: int, hours: float
) -> dict[str, Any]:
    """One search of the default on `task` with `tail_order` `order`, to `targets` ("medium", "hard")."""
    from quanta.sim.search_bench import simulate_search

    res = simulate_search(
        task, "default", None, workers, hours, seed, targets, stop_at=targets["hard"], max_trials=trials,
        scheduler={"tail_order": order},
    )  # fmt: skip
    return {
        "task": task,
        "seed": seed,
        "order": order,
        "medium_s": res.time_to_target["medium"],
        "hard_s": res.time_to_target["hard"],
        "end_s": res.sim_seconds,
        "device_s": res.device_seconds,
        "completed": res.completed,
        "killed": res.killed,
        "started": res.started,
    }


def summarize(runs: Sequence[dict[str, Any]], orders: Sequence[str], miss_s: float) -> dict[str, dict[str, Any]]:
    """Per order: hits, the device-seconds of misses, and against the first order (the baseline) per target
    the runs sooner and later, their geometric mean ratio, and the median of the per-task median ratios."""
    by = {(r["task"], r["seed"], r["order"]): r for r in runs}
    units = sorted({(r["task"], r["seed"]) for r in runs})
    tasks = sorted({t for t, _ in units})
    seeds_of = {t: [s for u, s in units if u == t] for t in tasks}  # units are sorted: each task's in order
    base = orders[0]

    def secs(r: dict[str, Any], target: str) -> float:
        return miss_s if r[f"{target}_s"] is None else float(r[f"{target}_s"])

    out: dict[str, dict[str, Any]] = {}
    for o in orders:
        mine = [by[(t, s, o)] for t, s in units if (t, s, o) in by]
        missed = [r for r in mine if r["hard_s"] is None]
        row: dict[str, Any] = {
            "runs": len(mine),
            "hits_medium": sum(r["medium_s"] is not None for r in mine),
            "hits_hard": sum(r["hard_s"] is not None for r in mine),
            "median_device_s_missed": statistics.median(r["device_s"] for r in missed) if missed else None,
            "median_end_s_missed": statistics.median(r["end_s"] for r in missed) if missed else None,
        }
        if o != base:
            for target in ("medium", "hard"):
                logs = []
                for t, s in units:
                    a, b = by.get((t, s, base)), by.get((t, s, o))
                    if a is not None and b is not None and abs(secs(a, target) - secs(b, target)) > 1e-6:
                        logs.append(math.log(secs(a, target) / secs(b, target)))
                per_task = [
                    statistics.median(secs(by[(t, s, base)], target) for s in seeds_of[t])
                    / statistics.median(secs(by[(t, s, o)], target) for s in seeds_of[t])
                    for t in tasks
                ]
                row[target] = {
                    "differ": len(logs),
                    "sooner": sum(x > 0 for x in logs),
                    "later": sum(x < 0 for x in logs),
                    "geomean_ratio_differing": math.exp(statistics.fmean(logs)) if logs else None,
                    "median_task_ratio": statistics.median(per_task),
                }
        out[o] = row
    return out


def main(argv: Sequence[str] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    from bench.lcbench_mo import _tasks
    from bench.lcbench_targets import load_targets

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="suite-even", help="task ids, `suite`, `suite-even` or `suite-odd`")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--orders", default="highest,lowest", help="tail_order values, the first the baseline")
    ap.add_argument("--trials", type=int, default=64, help="the search's trial budget")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--hours", type=float, default=8.0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    tasks = _tasks(a.tasks)
    seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
    orders = [x.strip() for x in a.orders.split(",") if x.strip()]
    units = [(t, s, o) for s in seeds for t in tasks for o in orders]  # interleaved per seed
    every = load_targets()  # read once, handed to each unit
    targets = {t: {k: v for k, v in every[t].items() if k in ("medium", "hard")} for t in tasks}
    started = time.time()
    with ProcessPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futures = [pool.submit(run_unit, t, s, o, targets[t], a.trials, a.workers, a.hours) for t, s, o in units]
        runs = [f.result() for f in futures]
    summary = summarize(runs, orders, a.hours * 3600.0)
    title = f"a search of {a.trials} trials to the hard target, {len(tasks)} tasks x {len(seeds)} seeds"
    table = Table(title=title)
    cols = ("order", "hits medium", "hits hard", "medium: sooner/later, geo", "hard: sooner/later, geo")
    for col in (*cols, "task median ratio (med, hard)", "device-s of a miss"):
        table.add_column(col)
    for o in orders:
        row = summary[o]

        def vs(target: str, row: dict[str, Any] = row) -> str:
            x = row.get(target)
            if x is None:
                return "baseline"
            geo = x["geomean_ratio_differing"]
            return f"{x['sooner']}/{x['later']}, " + ("-" if geo is None else f"{geo:.2f}")

        ratios = "-"
        if "hard" in row:
            ratios = f"{row['medium']['median_task_ratio']:.2f}, {row['hard']['median_task_ratio']:.2f}"
        dev = row["median_device_s_missed"]
        table.add_row(
            o, f"{row['hits_medium']}/{row['runs']}", f"{row['hits_hard']}/{row['runs']}", vs("medium"), vs("hard"),
            ratios, "-" if dev is None else f"{dev:,.0f}",
        )  # fmt: skip
    console = Console()
    console.print(table)
    if a.json is not None:
        doc = {
            "runs": runs,
            "summary": summary,
            "trials": a.trials,
            "workers": a.workers,
            "hours": a.hours,
            "seeds": seeds,
            "tasks": tasks,
            "wall_s": round(time.time() - started, 1),
            "command": "python bench/tail.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        }
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(doc, indent=1))
        console.print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
