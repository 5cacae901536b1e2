"""Choose a workload's easy / medium / hard targets from a random search, as `docs/benchmarks.md` says.

Runs `quanta run SPEC` with `search.algorithm: random`, `fifo`, no target and no time cap over
`--configs` configurations, each to its full budget, then takes every configuration's best report of
the metric. The targets are the `--ranks` best of those (default 6th, 4th and 2nd best of 40: easy is
reached by 6 configurations of 40, medium by 4, hard by 2, the rule used for `examples/mnist1d.yaml`),
rounded down to two decimals for a metric to maximize (up, to minimize; more decimals where two would
make two targets equal), so that at least that many configurations reach each. Training is seeded,
so the outcome does not depend on how busy the machine is (only how long it takes).

    python bench/choose_targets.py --spec examples/mnist1d_long.yaml --configs 40 \\
        --json bench/results/targets_mnist1d_long.json

With `--suite` (and `--workloads a,b`) it does the same for each workload of `bench/live_suite.py`,
with that workload's spec and number of configurations, writing `bench/results/targets_<workload>.json`
(`--out-dir`), the file `bench/search.py --suite` reads:

    python bench/choose_targets.py --suite --workloads digits,breast_cancer

Prints every configuration's best value and the targets; writes {"spec", "configs", "seed", "ranks",
"best": [...sorted best-first], "targets": {"easy", "medium", "hard"}, "command"}.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from quanta.spec import load_spec, parse_spec  # noqa: E402


def targets_from(best: list[float], ranks: tuple[int, int, int], maximize: bool) -> dict[str, float]:
    """Targets from the configurations' best values: the value of the k-th best configuration for
    each of `ranks` (easy, medium, hard), rounded towards reaching it to two decimals, or to more (up
    to four) where two decimals would make two targets equal (close values, e.g. 0.972 and 0.976, both
    0.97), so that the three targets stay three."""
    ordered = sorted(best, reverse=maximize)
    if len(ordered) < max(ranks):
        raise ValueError(f"{len(ordered)} configurations reported; need at least {max(ranks)}")
    values = [ordered[k - 1] for k in ranks]
    for decimals in (2, 3, 4):
        scale = 10**decimals
        rounded = [math.floor(v * scale) / scale if maximize else math.ceil(v * scale) / scale for v in values]
        if len(set(rounded)) == len(set(values)):
            break
    return dict(zip(("easy", "medium", "hard"), rounded, strict=True))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", type=Path, default=None, help="the workload's spec (not with --suite)")
    ap.add_argument(
        "--configs", type=int, default=None, help="random configurations (default 40; --suite: each workload's)"
    )
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--ranks", default="6,4,2", help="k-th best configuration for easy,medium,hard")
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None, help="where the targets go (not with --suite)")
    ap.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="cap each configuration's steps below the spec's budget: a quick check that a sweep runs, "
        "whose targets are NOT the workload's (those need every configuration run to its full budget)",
    )
    ap.add_argument("--suite", action="store_true", help="every workload of bench/live_suite.py (or --workloads)")
    ap.add_argument("--workloads", default=None, help="--suite: a comma-separated subset (default: all)")
    ap.add_argument(
        "--out-dir", type=Path, default=ROOT / "bench" / "results", help="--suite: where targets_<workload>.json go"
    )
    args = ap.parse_args(argv)
    parts = [int(x) for x in args.ranks.split(",")]
    if len(parts) != 3:
        raise SystemExit("--ranks: three integers, e.g. 6,4,2")
    ranks = (parts[0], parts[1], parts[2])
    command = "python bench/choose_targets.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if not args.suite:
        if args.spec is None or args.json is None:
            raise SystemExit("--spec and --json are required (or --suite)")
        sweep(args.spec, args.configs or 40, args.seed, ranks, args.devices, args.json, args.max_steps, command)
        return
    if args.spec is not None or args.json is not None:
        raise SystemExit("--spec/--json: not with --suite (each workload's spec; OUT_DIR/targets_<workload>.json)")
    from bench.live_suite import select

    try:
        workloads = select(args.workloads)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    for w in workloads:
        if w.missing():
            raise SystemExit(f"workload {w.name} needs {', '.join(w.missing())} (pip install -e '.[integrations]')")
    for w in workloads:
        w.ready()
        print(f"== {w.name}: {w.spec}")
        out = w.targets_path(args.out_dir)
        configs = args.configs or w.sweep_configs
        sweep(w.spec_path, configs, args.seed, ranks, args.devices, out, args.max_steps, command)


def sweep(
    spec_path: Path,
    configs: int,
    seed: int,
    ranks: tuple[int, int, int],
    devices: int,
    json_path: Path,
    max_steps: int | None = None,
    command: str = "",
) -> dict[str, float]:
    """Run the random sweep of `spec_path` (`configs` configurations, fifo on `devices` CPU devices, each
    to its full budget or `max_steps`), write `json_path` and return the targets. Nothing is written
    when too few configurations reported (ValueError from `targets_from`, as a SystemExit)."""
    base = load_spec(spec_path).model_dump(mode="json")
    base["seed"] = seed
    budget = {"max_trials": configs, "max_seconds": 30 * 86400.0, "stop_on_target": False}
    if max_steps:
        budget["max_steps"] = max_steps
    base["budget"] = {**base["budget"], **budget}
    base["metric"] = {**base["metric"], "target": None}
    base["scheduler"] = {"policy": "fifo"}
    base["search"] = {"algorithm": "random"}
    base["parallelism"] = devices
    spec = parse_spec(base)

    from quanta.db.store import Store

    with tempfile.TemporaryDirectory(prefix="qtargets-") as work:
        spec_file = Path(work) / "spec.json"
        spec_file.write_text(spec.model_dump_json())
        db = f"sqlite:///{work}/q.db"
        cmd = [sys.executable, "-m", "quanta.cli", "run", str(spec_file), "--devices", f"cpu:{devices}"]
        subprocess.run([*cmd, "--db", db, "--workdir", f"{work}/.quanta"], cwd=ROOT, check=False)
        store = Store(db)
        maximize = spec.metric.goal == "maximize"
        best: list[float] = []
        for s in store.searches():
            assert s.id is not None
            per_trial: dict[int, float] = {}
            for r in store.search_reports(s.id):
                if r.objective is None or not math.isfinite(r.objective):
                    continue
                old = per_trial.get(r.trial_id)
                if old is None or (r.objective > old if maximize else r.objective < old):
                    per_trial[r.trial_id] = r.objective
            best.extend(per_trial.values())
    best.sort(reverse=maximize)
    try:
        targets = targets_from(best, ranks, maximize)
    except ValueError as exc:
        raise SystemExit(f"{spec_path}: {exc}") from None
    for i, v in enumerate(best, 1):
        print(f"{i:3d}  {v:.4f}")
    print("targets:", targets)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    spec_name = str(spec_path.relative_to(ROOT)) if spec_path.resolve().is_relative_to(ROOT) else str(spec_path)
    out = {
        "spec": spec_name,
        "configs": configs,
        "seed": seed,
        "ranks": list(ranks),
        "max_steps": max_steps or load_spec(spec_path).budget.max_steps,
        "best": best,
        "targets": targets,
        "command": command,
    }
    json_path.write_text(json.dumps(out, indent=2))
    return targets


if __name__ == "__main__":
    main()
