"""Anatomy of one simulated LCBench search: which configurations it started could have reached the hard
target, how far it let them run, and where each ranked at the early epochs (issue 13: slow bloomers
held at the first rung).

    python bench/lcbench_anatomy.py --task 126025 --seed 2 [--scheduler '{"min_steps": 2}'] [--search '{}']

Runs the search as `bench/lcbench.py`'s `quanta_default` does (4 workers, 8 hours, stop at the hard
target; knobs merged over the spec's), then reads every started trial's whole curve from the surrogate.
`capable` is the pure part (tested).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def capable(acc: np.ndarray, target: float, epochs: Sequence[int]) -> list[dict[str, Any]]:
    """For curves `acc` (configurations x epochs, in start order), the configurations whose best reaches
    `target`: index, first epoch at or above it, best, and per epoch of `epochs` the share of all the
    configurations strictly better there (0 = the best)."""
    out = []
    for i in np.flatnonzero(acc.max(axis=1) >= target):
        row = acc[i]
        out.append(
            {
                "index": int(i),
                "reaches_at_epoch": int(np.argmax(row >= target)) + 1,
                "best": float(row.max()),
                "above": {e: float((acc[:, e - 1] > row[e - 1]).mean()) for e in epochs},
            }
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--hours", type=float, default=8.0)
    ap.add_argument("--scheduler", type=json.loads, default={}, help="scheduler knobs (JSON)")
    ap.add_argument("--search", type=json.loads, default={}, help="search knobs (JSON)")
    ap.add_argument("--data", default=None)
    a = ap.parse_args(argv)
    from app.sim.search_bench import lcbench, run_search
    from bench.lcbench_targets import load_targets

    targets = load_targets()
    if a.task not in targets:
        raise SystemExit(f"--task: no committed targets for {a.task}")
    t = targets[a.task]
    bench = lcbench(a.task, a.data)
    box: dict[str, Any] = {}
    res = run_search(
        bench, seed=a.seed, workers=a.workers, hours=a.hours, targets={k: t[k] for k in ("medium", "hard")},
        stop_at=t["hard"], on_tick=lambda c, r: box.setdefault("ctl", c), scheduler=a.scheduler, search=a.search,
    )  # fmt: skip
    store = box["ctl"].store
    trials = sorted(store.trials(store.searches()[0].id), key=lambda r: r.number)
    ran = {r.id: r.steps for r in trials}
    acc = np.array([c.val_accuracy for c in bench.curves([r.params for r in trials])], dtype=float)
    found = capable(acc, t["hard"], (1, 2, 3, 6))
    print(
        f"task {a.task} seed {a.seed}: hard target {t['hard']:.4f} reached at {res.time_to_target.get('hard')} s; "
        f"{len(trials)} configurations started, {len(found)} could reach it"
    )
    for f in found:
        r = trials[f["index"]]
        above = " ".join(f"e{e} {v:.2f}" for e, v in f["above"].items())
        print(
            f"  #{r.number} started at {r.started_at or 0:.0f} s, ran {ran[r.id]} epochs ({r.status}); reaches "
            f"the target at epoch {f['reaches_at_epoch']}, best {f['best']:.4f}; share ranked above it: {above}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
