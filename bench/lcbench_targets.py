"""Per-task targets for the LCBench benchmark, computed once and committed.

For each task: 1,000 random configurations (fixed seed), each one's best val_accuracy over its 52
epochs (curves can peak before the last epoch); medium = the 95th and hard = the 99th percentile of
those bests (numpy's linear interpolation). Values are fractions.

    python bench/lcbench_targets.py --json bench/results/lcbench_targets.json          # the 24 tasks
    python bench/lcbench_targets.py --tasks 3945,34539 --json /tmp/t.json

JSON: {"n_configs", "seed", "percentiles": {"medium": 95, "hard": 99}, "tasks": {"<id>": {"medium",
"hard", "max", "median"}}}. `bench/lcbench.py` reads it (`load_targets`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


N_CONFIGS = 1000
SEED = 0
PERCENTILES = {"medium": 95.0, "hard": 99.0}
DEFAULT_JSON = ROOT / "bench" / "results" / "lcbench_targets.json"


def targets_from_curves(accs: np.ndarray) -> dict[str, float]:
    """Targets from learning curves `accs` (configurations x epochs, fractions): the percentiles of each
    configuration's best epoch. Raises ValueError on an empty or non-2-D array, or one with NaNs."""
    accs = np.asarray(accs, dtype=float)
    if accs.ndim != 2 or accs.size == 0:
        raise ValueError(f"accs: need a non-empty (configurations, epochs) array, got shape {accs.shape}")
    if not np.isfinite(accs).all():
        raise ValueError("accs: contains NaN or infinite values")
    best = accs.max(axis=1)
    out = {name: float(np.percentile(best, q)) for name, q in PERCENTILES.items()}
    out["max"] = float(best.max())
    out["median"] = float(np.median(best))
    return out


def curve_targets(bench: Any, n: int = N_CONFIGS, seed: int = SEED) -> dict[str, float]:
    """The targets of one task through `bench` (an `quanta.sim.lcbench.LCBench` or a stand-in with its
    `sample(n, seed)` and batched `curves(configs)`): `n` random configurations, whole curves."""
    curves = bench.curves(bench.sample(n, seed))
    return targets_from_curves(np.array([c.val_accuracy for c in curves], dtype=float))


def task_targets(task: str, n: int = N_CONFIGS, seed: int = SEED, data_path: Path | None = None) -> dict[str, float]:
    """The targets of one LCBench task from the real surrogate (`quanta.sim.lcbench.load_lcbench`)."""
    from quanta.sim.lcbench import load_lcbench

    return curve_targets(load_lcbench(task, data_path), n, seed)


def load_targets(path: Path = DEFAULT_JSON) -> dict[str, dict[str, float]]:
    """The committed targets, keyed by task id. Raises FileNotFoundError / ValueError naming the file."""
    if not path.is_file():
        raise FileNotFoundError(f"targets file not found: {path} (make it with bench/lcbench_targets.py)")
    data = json.loads(path.read_text())
    tasks = data.get("tasks") if isinstance(data, dict) else None
    if not isinstance(tasks, dict):
        raise ValueError(f"{path}: no 'tasks' object")
    for task, t in tasks.items():
        if not (isinstance(t, dict) and 0 < t.get("medium", 0) <= t.get("hard", 0) <= 1):
            raise ValueError(f"{path}: task {task}: need 0 < medium <= hard <= 1, got {t}")
    return {str(k): v for k, v in tasks.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=None, help="comma-separated OpenML task ids (default: the 24 of the suite)")
    ap.add_argument("--n", type=int, default=N_CONFIGS)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--data", type=Path, default=None, help="YAHPO data folder (default ../shared/data/yahpo)")
    ap.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from quanta.sim.lcbench import SUITE

    tasks = list(SUITE) if args.tasks is None else [t.strip() for t in args.tasks.split(",") if t.strip()]
    out: dict[str, Any] = {
        "n_configs": args.n,
        "seed": args.seed,
        "percentiles": PERCENTILES,
        "tasks": {},
    }
    table = Table(title=f"LCBench targets ({args.n} random configurations, seed {args.seed})")
    for col in ("task", "median best", "medium (p95)", "hard (p99)", "max", "s"):
        table.add_column(col, justify="right")
    for task in tasks:
        t0 = time.perf_counter()
        t = task_targets(task, args.n, args.seed, args.data)
        out["tasks"][task] = t
        took = time.perf_counter() - t0
        table.add_row(
            task, f"{t['median']:.4f}", f"{t['medium']:.4f}", f"{t['hard']:.4f}", f"{t['max']:.4f}", f"{took:.1f}"
        )
        print(f"{task}: medium {t['medium']:.4f} hard {t['hard']:.4f} ({took:.1f} s)", file=sys.stderr)
    Console().print(table)
    # Written whole at the end (a temporary file renamed), so an interrupted run leaves nothing half-written.
    args.json.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.json.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    tmp.replace(args.json)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
