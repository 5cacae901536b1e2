"""How much lower than FIFO's can any policy's mean job completion time be on a trace?

No job finishes sooner than its run time alone at its best measured rate (consolidated on one server
when it fits in one, else the unconsolidated rate; packing only slows a job down). So the mean of
those run times bounds every policy's mean JCT from below, and `1 - bound / fifo` is the largest
reduction any scheduler could report against FIFO. This puts the simulated results in
bench/results/sim_*.json next to that ceiling.

    python bench/sim_bounds.py

Prints a table and writes bench/results/sim_bounds.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.sim.throughputs import Throughputs  # noqa: E402
from app.sim.traces import load_trace, throughputs_path  # noqa: E402

# (trace, first N jobs or None for all, GPUs, GPUs per server, results file)
RUNS = (
    ("ee9e8c", None, 200, 4, "sim_ee9e8c_200_full.json"),
    ("6c71a0", None, 100, 4, "sim_6c71a0_100_full.json"),
    ("b436b2", None, 100, 4, "sim_b436b2_100_full.json"),
    ("ee9e8c", 800, 200, 4, "sim_ee9e8c_200.json"),
    ("6c71a0", 300, 100, 4, "sim_6c71a0_100.json"),
    ("b436b2", 300, 100, 4, "sim_b436b2_100.json"),
)


def mean_solo_jct(trace: str, max_jobs: int | None, gpus: int, per_server: int, thr: Throughputs) -> float:
    total = 0.0
    jobs = load_trace(trace, max_jobs)
    for j in jobs:
        devices = min(j.devices, gpus)
        consolidated = devices <= per_server
        rate = j.rate or thr.solo(j.job_type, j.devices, "v100", consolidated)
        rate = rate or thr.solo(j.job_type, j.devices, "v100", True)
        if not rate:
            raise ValueError(f"{trace}: job {j.id} ({j.job_type}) has no solo rate")
        total += j.steps / rate
    return total / len(jobs)


def bound_rows(thr: Throughputs) -> list[dict[str, Any]]:
    """One row per run in RUNS: its mean-JCT floor from the trace, the policies' means from the
    published result file, and the reductions against fifo (what sim_bounds.json holds)."""
    rows: list[dict[str, Any]] = []
    for trace, n, gpus, per, fname in RUNS:
        bound = mean_solo_jct(trace, n, gpus, per, thr)
        res = json.loads((ROOT / "bench" / "results" / fname).read_text())
        fifo, gan, tir = (res[p]["mean_jct_s"] for p in ("fifo", "gandiva", "tiresias"))
        rows.append(
            {
                "trace": trace,
                "jobs": res["fifo"]["jobs"],
                "gpus": gpus,
                "gpus_per_server": per,
                "results": fname,
                "mean_solo_jct_s": bound,
                "fifo_mean_jct_s": fifo,
                "gandiva_mean_jct_s": gan,
                "tiresias_mean_jct_s": tir,
                "max_reduction_vs_fifo": 1 - bound / fifo,
                "gandiva_reduction_vs_fifo": 1 - gan / fifo,
                "tiresias_reduction_vs_fifo": 1 - tir / fifo,
            }
        )
    return rows


def main() -> None:
    rows = bound_rows(Throughputs.load(throughputs_path()))
    print(f"{'run':<26}{'bound h':>9}{'fifo h':>9}{'gandiva h':>11}{'tiresias h':>12}{'ceiling':>9}{'gandiva':>9}")
    for row in rows:
        bound, fifo = row["mean_solo_jct_s"], row["fifo_mean_jct_s"]
        gan, tir = row["gandiva_mean_jct_s"], row["tiresias_mean_jct_s"]
        label = f"{row['trace']} {row['jobs']} jobs / {row['gpus']} GPUs"
        print(
            f"{label:<26}{bound / 3600:>9.2f}{fifo / 3600:>9.2f}{gan / 3600:>11.2f}{tir / 3600:>12.2f}"
            f"{row['max_reduction_vs_fifo']:>9.1%}{row['gandiva_reduction_vs_fifo']:>9.1%}"
        )
    out = ROOT / "bench" / "results" / "sim_bounds.json"
    out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
