"""Where a trace simulation spends its time in a window of simulated days: cProfile of one run from day
`--from-day` for `--days`, the run stopped at the window's end.

    python bench/sim_profile.py --trace all --gpus 500 --gpus-per-server 8 --policy gandiva --from-day 20 --days 1

Prints the profiled window (simulated days, seconds), the functions by own time and by cumulative time,
and writes the raw profile to `--out` (pstats format) for further reading. The window opens and closes
on the simulator's progress callback, which runs about once a wall second: its edges are that coarse,
and the days actually profiled are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.sim.traces import load_trace  # noqa: E402
from bench.sim_speed import add_cluster_args, simulate_cluster  # noqa: E402

DAY_S = 86400.0


class _WindowDone(Exception):
    """Raised from the progress callback to stop the run at the window's end."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cluster_args(ap, "gandiva")
    ap.add_argument("--from-day", type=float, default=20.0)
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--top", type=int, default=30, help="rows of each table")
    ap.add_argument("--out", type=Path, default=Path("sim_profile.prof"))
    args = ap.parse_args()
    if args.days <= 0 or args.from_day < 0:
        raise SystemExit("--days must be > 0 and --from-day >= 0")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as sim_speed.py measures
    prof = cProfile.Profile()
    window: dict[str, float] = {}

    def progress(done: int, n: int, now: float) -> None:
        day = now / DAY_S
        if not window and day >= args.from_day:
            window.update(day=day, t=time.perf_counter())
            prof.enable()
        elif window and day >= window["day"] + args.days:
            prof.disable()
            window.update(end_day=day, seconds=time.perf_counter() - window["t"])
            raise _WindowDone

    jobs = load_trace(args.trace, None)
    with contextlib.suppress(_WindowDone):  # the window's end stops the run
        simulate_cluster(args, jobs, progress)
    if "seconds" not in window:
        prof.disable()
        raise SystemExit(f"the run ended before simulated day {args.from_day + args.days:g}: nothing profiled in full")
    prof.dump_stats(args.out)
    print(
        f"profiled simulated days {window['day']:.2f}-{window['end_day']:.2f} in {window['seconds']:.1f} s "
        f"(under the profiler); raw profile in {args.out}"
    )
    stats = pstats.Stats(str(args.out))
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
