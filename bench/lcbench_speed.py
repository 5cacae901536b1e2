"""How fast a whole search replays on LCBench in simulated time (goal: one 8-hour, 4-worker search in
under 10 s on one core).

Each system is one `simulate_search` (app/sim/search_bench.py) on the real YAHPO Gym surrogate with no
stop target (the whole budget is simulated). The process is pinned to one core; the surrogate is
opened once before timing (as a benchmark script running many searches does), and its curve cache is
emptied before each run so every run pays for its own surrogate calls.

    python bench/lcbench_speed.py --task 3945 --workers 4 --hours 8 --json bench/results/lcbench_speed.json

Prints a table (wall and CPU seconds, trials started, reports, simulated seconds per CPU second; the
goal is judged on CPU seconds, which a loaded machine does not inflate) and writes {"task", "workers",
"hours", "seed", "cpu", "load_1min_at_end", "systems": {name: {...}}} after each system.

`--parts` also times, in CPU seconds and without a profiler's inflation, the calls each part of a round
makes (`PARTS`: the searcher's asks, the surrogate's curves, the policy's plan, the snapshot, the
recorder, the book's sync, the simulated runtime's apply and poll), written as `parts_cpu_s` per system.
The searcher and the surrogate are what any controller would pay: their sum is the floor under the
goal that no cheaper round can go below.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from quanta.controller.book import SearchBook  # noqa: E402
from quanta.controller.core import Controller  # noqa: E402
from quanta.controller.recorder import EventRecorder  # noqa: E402
from quanta.executor.policy.share import SharePolicy  # noqa: E402
from quanta.search.searcher import _TrialsSearcher  # noqa: E402
from quanta.sim.lcbench import LCBench  # noqa: E402
from quanta.sim.runtime import SimRuntime  # noqa: E402
from quanta.sim.search_bench import lcbench, simulate_search  # noqa: E402

SYSTEMS = {  # name -> (policy, algorithm)
    "default": ("default", None),
    "fifo_random": ("fifo", "random"),
    "fifo_tpe": ("fifo", "tpe"),
    "timeslice": ("timeslice", "tpe"),
    "gandiva": ("gandiva", "tpe"),
    "asha": ("asha", "bohb"),
    "hyperband": ("hyperband", "bohb"),
    # The simulator's own speed, with the cheapest searcher (TPE's asks grow with the trials told).
    "asha_random": ("asha", "random"),
    "gandiva_random": ("gandiva", "random"),
}

# part -> (class, method). Nested: the policy's plan (the share layer's, with the group policy's inside)
# and the snapshot are called from the controller's tick; the surrogate from the runtime's apply (a new
# trial's curve), so `runtime.apply` includes `surrogate`.
PARTS: dict[str, tuple[type, str]] = {
    "searcher.ask": (_TrialsSearcher, "ask"),
    "surrogate": (LCBench, "curves"),
    "policy.plan": (SharePolicy, "plan"),
    "snapshot": (Controller, "snapshot"),
    "recorder": (EventRecorder, "handle"),
    "book.sync": (SearchBook, "sync"),
    "runtime.apply": (SimRuntime, "apply"),
    "runtime.poll": (SimRuntime, "poll"),
}


@contextmanager
def timed_parts() -> Iterator[dict[str, float]]:
    """CPU seconds spent inside each of `PARTS`' methods while the block runs (the methods are wrapped
    on their classes for its duration and restored after)."""
    spent: dict[str, float] = dict.fromkeys(PARTS, 0.0)
    saved: list[tuple[type, str, Any]] = []

    def timer(part: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **kw: Any) -> Any:
            t0 = time.process_time()
            try:
                return f(*a, **kw)
            finally:
                spent[part] += time.process_time() - t0

        return timed

    for part, (cls, meth) in PARTS.items():
        f = cls.__dict__[meth]
        saved.append((cls, meth, f))
        setattr(cls, meth, timer(part, f))
    try:
        yield spent
    finally:
        for cls, meth, f in saved:
            setattr(cls, meth, f)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="3945")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--hours", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--data", default=None, help="YAHPO data folder (default: $QUANTA_YAHPO_DATA or ../shared)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--parts", action="store_true", help="also time each part of the round (PARTS)")
    args = ap.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    bench = lcbench(args.task, args.data)
    bench.curve(bench.sample(1, seed=0)[0])  # the ONNX session is warm before anything is timed
    console = Console()
    out: dict[str, dict[str, Any]] = {}
    for name in [s for s in args.systems.split(",") if s]:
        policy, algorithm = SYSTEMS[name]
        bench._cache.clear()  # each run pays for its own surrogate calls
        calls0 = bench.calls
        timing: AbstractContextManager[dict[str, float]] = timed_parts() if args.parts else nullcontext({})
        with timing as spent:
            cpu0 = time.process_time()
            res = simulate_search(
                args.task, policy, algorithm, args.workers, args.hours, args.seed, {}, None, args.data
            )
            cpu = time.process_time() - cpu0
        out[name] = {
            "policy": res.policy,
            "algorithm": res.algorithm,
            "wall_s": round(res.wall_seconds, 3),
            "cpu_s": round(cpu, 3),
            "sim_s": round(res.sim_seconds, 1),
            "started": res.started,
            "completed": res.completed,
            "parked": res.parked,
            "killed": res.killed,
            "reports": res.reports,
            "surrogate_calls": bench.calls - calls0,
            "best": res.best_so_far[-1][1] if res.best_so_far else None,
        }
        if args.parts:
            out[name]["parts_cpu_s"] = {part: round(spent[part], 3) for part in PARTS}
            floor = spent["searcher.ask"] + spent["surrogate"]
            console.print(
                f"{name} parts (CPU s): "
                + ", ".join(f"{part} {spent[part]:.2f}" for part in PARTS)
                + f"; searcher + surrogate {floor:.2f}"
            )
        console.print(f"{name}: {res.wall_seconds:.1f} s wall, {cpu:.1f} s CPU, {res.started} trials")
        if args.json:  # after each system: partial results survive an interrupted run
            write(args, out)
    table = Table(title=f"LCBench {args.task}: {args.workers} workers, {args.hours:g} simulated hours, one core")
    for col in ("system", "wall s", "cpu s", "trials", "reports", "sim s / cpu s", "best", "cpu < 10 s"):
        table.add_column(col, justify="left" if col == "system" else "right")
    for name, r in out.items():
        cpu = float(r["cpu_s"] or 0)
        table.add_row(
            name,
            f"{float(r['wall_s'] or 0):.2f}",
            f"{cpu:.2f}",
            str(r["started"]),
            f"{r['reports']:,}",
            f"{float(r['sim_s'] or 0) / cpu:,.0f}" if cpu else "-",
            f"{r['best']:.4f}" if r["best"] is not None else "-",
            "yes" if cpu < 10 else "NO",
        )
    console.print(table)
    if args.json:
        console.print(f"wrote {args.json}")


def write(args: argparse.Namespace, out: dict[str, dict[str, Any]]) -> None:
    args.json.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "task": args.task,
        "workers": args.workers,
        "hours": args.hours,
        "seed": args.seed,
        "cpu": platform.processor() or platform.machine(),
        "load_1min_at_end": os.getloadavg()[0],  # wall times mean little on a loaded machine; CPU seconds do
        "systems": out,
    }
    tmp = args.json.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2))
    os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
