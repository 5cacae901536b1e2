"""Re-run the published Quanta runs of `bench/results/lcbench.json` and say whether each decides as it did.

The LCBench simulator is deterministic (exact clock): a Quanta system run again on the same task and seed
reaches each target at the very same simulated second unless a change altered a decision. This checks
that, for the tasks and seeds asked (default: every published seed of the tasks given), printing one line
per (task, seed, target) and a count; exit 1 when any differs.

    python bench/lcbench_rerun.py --tasks 3945,34539,126025,167149 --system quanta_default
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.lcbench import TARGETS, quanta_system  # noqa: E402

PUBLISHED = ROOT / "bench" / "results" / "lcbench.json"
# The published file's systems whose settings have since become another name's: its `quanta_default` runs
# were made before the default's model asks became a GP's (2026-12-03), with TPE's, which
# `quanta_acq_tpe` pins.
RUN_AS = {"quanta_default": "quanta_acq_tpe"}


def rerun(
    task: str, system: str, seeds: list[int] | None, published: dict
) -> list[tuple[int, str, float | None, float | None]]:
    """(seed, target, published seconds, seconds now) for each published seed of `system` on `task`, run
    with the settings the published runs had (`RUN_AS`)."""
    from quanta.sim.search_bench import simulate_search

    entry = published["tasks"][task]
    runs = entry["systems"][system]
    policy, algorithm, scheduler, search = quanta_system(RUN_AS.get(system, system))
    out = []
    for i, seed in enumerate(runs["seeds"]):
        if seeds is not None and seed not in seeds:
            continue
        res = simulate_search(
            task,
            policy,
            algorithm,
            published["workers"],
            published["hours"],
            seed,
            targets={k: entry["targets"][k] for k in TARGETS},
            stop_at=entry["targets"]["hard"],
            scheduler=scheduler,
            search=search,
        )
        for name in TARGETS:
            was = None if runs[name]["missed"][i] else runs[name]["runs_s"][i]
            out.append((seed, name, was, res.time_to_target[name]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", required=True, help="comma-separated LCBench task ids of the published file")
    ap.add_argument("--system", default="quanta_default", help="a Quanta system of the published file")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds (default: every published seed)")
    ap.add_argument("--published", type=Path, default=PUBLISHED)
    args = ap.parse_args(argv)
    published = json.loads(args.published.read_text())
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
    same = differ = 0
    for task in args.tasks.split(","):
        for seed, name, was, now in rerun(task, args.system, seeds, published):
            ok = (was is None and now is None) or (was is not None and now is not None and abs(was - now) < 1e-6)
            same, differ = same + ok, differ + (not ok)
            print(f"{task} seed {seed} {name}: published {was} now {now} {'same' if ok else 'DIFFERENT'}")
    print(f"{same} same, {differ} different")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
