"""How much does an LCBench rung say about where a configuration ends up? (issue 13: why ASHA's first rung
decides the ratio to FIFO random search)

For each task, `--configs` random configurations (the surrogate's own sampler, fixed seed) and their
whole curves. Per rung epoch e (default 1, 2, 3, 9):

- `rho_best`: Spearman's rank correlation of val_accuracy at epoch e with the configuration's best over
  its 52 epochs (what the hard target asks of it);
- `recall`: of the configurations whose best reaches the task's hard target, the share ranked in the
  top 1/eta at epoch e: the share ASHA's rank promotion would let past a rung at e (the others wait
  there: held, under Quanta's pause ASHA, until a rule lets them on);
- `rho_next`: Spearman's correlation of epoch e with epoch e * eta *among the top 1/eta at e*: what a
  search can measure itself from the trials it promoted (the others never reach the next rung).

    python bench/lcbench_rungs.py --json bench/results/lcbench_rungs.json

Pure accounting in `rung_stats` (tested on hand-made curves); the surrogate is read only in `main`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from app.sim.lcbench import SUITE  # noqa: E402
from bench.lcbench_targets import load_targets  # noqa: E402


def _rho(x: np.ndarray, y: np.ndarray) -> float | None:
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return float(spearmanr(x, y).statistic)


def rung_stats(acc: np.ndarray, target: float, epochs: Sequence[int], eta: float = 3.0) -> dict[int, dict[str, Any]]:
    """Per epoch e of `epochs` (1-based), for curves `acc` (configurations x epochs of val_accuracy):
    `rho_best`, `recall` (None when no curve reaches `target`), `capable` (curves reaching it) and
    `rho_next` (None when e * eta is past the last epoch). See the module docstring."""
    if acc.ndim != 2 or acc.shape[0] < 3:
        raise ValueError(f"acc: need a (configurations x epochs) array of at least 3 rows, got shape {acc.shape}")
    best = acc.max(axis=1)
    capable = best >= target
    out: dict[int, dict[str, Any]] = {}
    for e in epochs:
        if not 1 <= e <= acc.shape[1]:
            raise ValueError(f"epochs: {e} is outside 1..{acc.shape[1]}")
        at = acc[:, e - 1]
        top = at >= np.quantile(at, 1 - 1 / eta)
        nxt = round(e * eta)
        out[e] = {
            "rho_best": _rho(at, best),
            "recall": float(top[capable].mean()) if capable.any() else None,
            "capable": int(capable.sum()),
            "rho_next": _rho(at[top], acc[top, nxt - 1]) if nxt <= acc.shape[1] else None,
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default=",".join(SUITE))
    ap.add_argument("--configs", type=int, default=1000)
    ap.add_argument("--epochs", default="1,2,3,9")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=None, help="YAHPO data folder (default: ../shared/data/yahpo)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    from app.sim.lcbench import load_lcbench

    targets = load_targets()
    epochs = [int(e) for e in a.epochs.split(",")]
    tasks = a.tasks.split(",")
    unknown = [t for t in tasks if t not in targets]
    if unknown:
        raise SystemExit(f"--tasks: no committed targets for {unknown}")
    per_task: dict[str, dict[int, dict[str, Any]]] = {}
    for task in tasks:
        bench = load_lcbench(task, a.data)
        acc = np.array([c.val_accuracy for c in bench.curves(bench.sample(a.configs, a.seed))], dtype=float)
        per_task[task] = rung_stats(acc, targets[task]["hard"], epochs)
    table = Table(
        title=f"LCBench rungs: {a.configs} random configurations per task; per epoch e: Spearman with the best "
        "(best), recall of the hard-capable in the top third (recall), Spearman with epoch 3e in that third (next)"
    )
    table.add_column("task")
    for e in epochs:
        table.add_column(f"e{e} best", justify="right")
        table.add_column(f"e{e} recall", justify="right")
        table.add_column(f"e{e} next", justify="right")

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    for task, stats in per_task.items():
        table.add_row(task, *(f(stats[e][k]) for e in epochs for k in ("rho_best", "recall", "rho_next")))
    summary = {
        e: {
            k: statistics.median(v for s in per_task.values() if (v := s[e][k]) is not None)
            for k in ("rho_best", "recall", "rho_next")
            if any(s[e][k] is not None for s in per_task.values())
        }
        for e in epochs
    }
    table.add_row("median", *(f(summary[e].get(k)) for e in epochs for k in ("rho_best", "recall", "rho_next")))
    Console(width=160).print(table)
    if a.json:
        a.json.write_text(
            json.dumps(
                {
                    "command": "python bench/lcbench_rungs.py " + " ".join(argv or sys.argv[1:]),
                    "configs": a.configs,
                    "seed": a.seed,
                    "tasks": {t: {str(e): v for e, v in s.items()} for t, s in per_task.items()},
                    "median": {str(e): v for e, v in summary.items()},
                },
                indent=1,
            )
        )
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
