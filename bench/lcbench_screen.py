"""Variants of Quanta's default against the default and against Syne Tune, on LCBench in simulated time.

Reads two `bench/lcbench.py --runs` logs: the screen's (the default and its `VARIANTS`, all on the same
tasks and seeds) and the committed one holding the Syne Tune runs. Uses only the (task, seed) units that
every screened system finished, and for each system as the reference prints and writes, per target:

- `vs_default`: median over tasks of (the default's median time / the system's): above 1, the system
  is the sooner; `geo_vs_default` the geometric mean of the same ratios; `faster_tasks` how many tasks
  it is strictly sooner on;
- `best_syne`, `won_vs_best_syne`: as `bench/lcbench.py`'s summary, with this system as the reference.

It also counts the screen's `quanta_default` runs that equal the committed log's (same code: all).

    python bench/lcbench_screen.py --screen /tmp/screen_runs.jsonl --peers bench/results/lcbench_runs.jsonl \
        --json bench/results/lcbench_screen.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lcbench import REFERENCE, TARGETS, load_runs, summarize, tabulate  # noqa: E402
from bench.lcbench_targets import DEFAULT_JSON, load_targets  # noqa: E402


def screen(screen_log: Path, peers_log: Path, hours: float) -> dict[str, Any]:
    ran = load_runs(screen_log)
    if not ran:
        raise SystemExit(f"--screen: no runs in {screen_log}")
    committed = load_runs(peers_log)
    systems = sorted({r.system for r in ran})
    if REFERENCE not in systems:
        raise SystemExit(f"--screen: {screen_log} has no {REFERENCE} runs to compare with")
    units: dict[tuple[str, int], set[str]] = {}
    for r in ran:
        units.setdefault((r.task, r.seed), set()).add(r.system)
    complete = {u for u, s in units.items() if s == set(systems)}
    before = {(r.task, r.seed): r.time_to_target for r in committed if r.system == REFERENCE}
    mine = [r for r in ran if r.system == REFERENCE]
    same = sum(1 for r in mine if before.get((r.task, r.seed)) == r.time_to_target)
    runs = [r for r in ran if (r.task, r.seed) in complete]
    runs += [r for r in committed if r.system.startswith("syne_") and (r.task, r.seed) in complete]
    table = tabulate(runs, load_targets(DEFAULT_JSON), hours * 3600.0)
    out: dict[str, Any] = {}
    for name in systems:
        summary = summarize(table, reference=name)
        row: dict[str, Any] = {}
        for target in TARGETS:
            entry: dict[str, Any] = {
                "best_syne": summary[target]["median_ratio_best_syne"],
                "won_vs_best_syne": summary[target]["tasks_won_vs_best_syne"],
            }
            if name != REFERENCE:  # the default as the peer of this reference: its time / this one's
                entry["vs_default"] = summary[target]["median_ratio_vs"][REFERENCE]
                entry["faster_tasks"] = summary[target]["wins_vs"][REFERENCE]
                entry["geo_vs_default"] = statistics.geometric_mean(
                    block["systems"][REFERENCE][target]["median_s"] / block["systems"][name][target]["median_s"]
                    for block in table.values()
                )
            row[target] = entry
        out[name] = row
    return {
        "tasks": len(table),
        "units": len(complete),
        "default_same_as_committed": [same, len(mine)],
        "systems": out,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--screen", type=Path, required=True, help="runs log of the default and its variants")
    ap.add_argument("--peers", type=Path, default=ROOT / "bench/results/lcbench_runs.jsonl")
    ap.add_argument("--hours", type=float, default=8.0, help="the simulated budget the runs had")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    result = screen(args.screen, args.peers, args.hours)
    print(
        f"{result['tasks']} tasks, {result['units']} (task, seed) units; default runs equal to the committed "
        f"log: {result['default_same_as_committed'][0]}/{result['default_same_as_committed'][1]}"
    )
    for name, row in result["systems"].items():
        cells = []
        for target in TARGETS:
            e = row[target]
            vs = (
                ""
                if "vs_default" not in e
                else (f" vs default {e['vs_default']:.2f} (geo {e['geo_vs_default']:.2f}, {e['faster_tasks']} sooner)")
            )
            cells.append(f"{target}: best Syne {e['best_syne']:.2f} ({e['won_vs_best_syne']} won){vs}")
        print(f"{name}: " + "; ".join(cells))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
