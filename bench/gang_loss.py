"""Where sticky + gang gandiva loses mean JCT against the default gandiva, job by job.

Runs one trace (or its first N jobs) twice, the default gandiva and `sticky` + `gang` without
`gang_patience` (4 GPUs per server, quantum 60 s, V100, as `bench/sim_churn.py`), and for the second
run follows every multi-device unit through the placement's rounds (by wrapping
`placement.select_sticky`, as sim_churn does): in how many rounds it was selected, and, in the rounds
it waited, how many devices the round left unclaimed after its selection and how far the pass of the
lowest unit claiming its home lay below its own. Prints the JCT lost per job size and the jobs that lost
most, with those figures, and writes them as JSON.

    python bench/gang_loss.py ee9e8c 200 --jobs 1000 --json bench/results/gang_loss_ee9e8c_1000.json

Reading it: a waiting unit whose round left at least its own number of devices unclaimed is held up
by its home alone (the default gandiva would have run it on those devices); a large pass gap means the
unit claiming its home joined the rotation far behind it (stride scheduling lets it catch up, here all
on the waiting unit's block).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.executor.policy.gandiva import placement, tiers  # noqa: E402
from app.sim.driver import simulate  # noqa: E402
from app.sim.traces import load_trace  # noqa: E402
from bench.sim_churn import size_class  # noqa: E402

# The functions Follower wraps, as they were before it patched them in.
tiers_rank = tiers.rank
select_sticky = placement.select_sticky
# Blocks alone, as analysed in stop 34: `gang_patience` (added later) places waiting gangs after
# select_sticky, in `placement.idle_runs`, which this script does not follow.
GANG = {"sticky": True, "gang": True, "gang_patience": None}


class Follower:
    """Per multi-device unit (first trial id): rounds seen, rounds selected, and for the rounds it waited
    the devices left unclaimed and the pass gap to the lowest unit above it claiming its home."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = defaultdict(int)
        self.selected: dict[int, int] = defaultdict(int)
        self.free_when_waiting: dict[int, list[int]] = defaultdict(list)
        self.gap: dict[int, list[float]] = defaultdict(list)
        self.passes: dict[int, float] = {}

    def rank(self, *args: Any, **kwargs: Any) -> Any:
        out = tiers_rank(*args, **kwargs)
        self.passes = out.passes
        return out

    def select(self, ranked: Any, order: Any, grown_old: Any, load: Any, *rest: Any, **kw: Any) -> Any:
        out = select_sticky(ranked, order, grown_old, load, *rest, **kw)
        selected, _waiting, movers, targets, _caps = out
        chosen = {u[0].id for u in selected}
        left = len(order) - sum(max(t.devices_needed for t in u) for u in selected)
        claims: list[tuple[int, set[str]]] = []  # (unit, devices it claims) in rank order
        for u in ranked:
            uid = u[0].id
            need = max(t.devices_needed for t in u)
            home = placement.home_of(u, grown_old)
            if need > 1:
                self.seen[uid] += 1
                if uid in chosen:
                    self.selected[uid] += 1
                elif home:
                    mine = set(home)
                    above = [v for v, ds in claims if ds & mine]
                    self.free_when_waiting[uid].append(left)
                    if above:
                        p = self.passes.get(uid, 0.0)
                        self.gap[uid].append(p - min(self.passes.get(v, 0.0) for v in above))
            if uid in chosen:  # a mover does not keep its home (it is placed elsewhere later)
                ds = targets.get(uid) or (home if uid not in movers else None)
                if ds:
                    claims.append((uid, set(ds)))
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("gpus", type=int)
    ap.add_argument("--jobs", type=int, default=None, help="only the first N jobs")
    ap.add_argument("--worst", type=int, default=10, help="jobs listed")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    jobs = load_trace(args.trace, args.jobs)
    t0 = time.perf_counter()
    base = simulate(jobs, "gandiva", gpus=args.gpus, gpus_per_server=4, check=False)
    follow = Follower()
    tiers.rank = follow.rank  # type: ignore[assignment]
    placement.select_sticky = follow.select  # type: ignore[assignment]
    try:
        gang = simulate(jobs, "gandiva", gpus=args.gpus, gpus_per_server=4, policy_knobs=GANG, check=False)
    finally:
        tiers.rank, placement.select_sticky = tiers_rank, select_sticky  # type: ignore[assignment]
    before = {r["id"]: r for r in base.jobs}
    rows = []
    for r in gang.jobs:
        b, tid = before[r["id"]], r["trial"]
        waits = follow.free_when_waiting.get(tid, [])
        gaps = follow.gap.get(tid, [])
        rows.append(
            {
                "job": r["id"],
                "devices": r["devices"],
                "jct_default_h": round(b["jct_s"] / 3600, 2),
                "jct_gang_h": round(r["jct_s"] / 3600, 2),
                "lost_h": round((r["jct_s"] - b["jct_s"]) / 3600, 2),
                "rounds": follow.seen.get(tid, 0),
                "selected": follow.selected.get(tid, 0),
                "waiting_with_room": sum(1 for n in waits if n >= r["devices"]),
                "median_unclaimed_when_waiting": statistics.median(waits) if waits else None,
                "median_pass_gap": round(statistics.median(gaps)) if gaps else None,
            }
        )
    by_size: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        by_size[size_class(row["devices"])].append(row["lost_h"])
    worst = sorted(rows, key=lambda row: -row["lost_h"])[: args.worst]
    out = {
        "trace": args.trace,
        "gpus": args.gpus,
        "jobs": len(rows),
        "mean_jct_h": {
            "gandiva": round(base.summary["mean_jct_s"] / 3600, 2),
            "sticky_gang": round(gang.summary["mean_jct_s"] / 3600, 2),
        },
        "lost_job_hours_by_size": {k: [len(v), round(sum(v), 1)] for k, v in sorted(by_size.items())},
        "worst": worst,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps({k: v for k, v in out.items() if k != "worst"}))
    cols = (
        "job",
        "devices",
        "jct_default_h",
        "jct_gang_h",
        "selected",
        "rounds",
        "waiting_with_room",
        "median_unclaimed_when_waiting",
        "median_pass_gap",
    )
    print(" | ".join(cols))
    for row in worst:
        print(" | ".join(str(row[c]) for c in cols))
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
