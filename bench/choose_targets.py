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

from app.spec import load_spec, parse_spec  # noqa: E402


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
    ap.add_argument("--spec", type=Path, required=True)
    ap.add_argument("--configs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--ranks", default="6,4,2", help="k-th best configuration for easy,medium,hard")
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    ranks = tuple(int(x) for x in args.ranks.split(","))
    if len(ranks) != 3:
        raise SystemExit("--ranks: three integers, e.g. 6,4,2")

    base = load_spec(args.spec).model_dump(mode="json")
    base["seed"] = args.seed
    budget = {"max_trials": args.configs, "max_seconds": 30 * 86400.0, "stop_on_target": False}
    base["budget"] = {**base["budget"], **budget}
    base["metric"] = {**base["metric"], "target": None}
    base["scheduler"] = {"policy": "fifo"}
    base["search"] = {"algorithm": "random"}
    base["parallelism"] = args.devices
    spec = parse_spec(base)

    from app.db.store import Store

    with tempfile.TemporaryDirectory(prefix="qtargets-") as work:
        spec_path = Path(work) / "spec.json"
        spec_path.write_text(spec.model_dump_json())
        db = f"sqlite:///{work}/q.db"
        cmd = [sys.executable, "-m", "app.cli", "run", str(spec_path), "--devices", f"cpu:{args.devices}"]
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
    targets = targets_from(best, ranks, maximize)  # type: ignore[arg-type]
    for i, v in enumerate(best, 1):
        print(f"{i:3d}  {v:.4f}")
    print("targets:", targets)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    out = {
        "spec": str(args.spec),
        "configs": args.configs,
        "seed": args.seed,
        "ranks": list(ranks),
        "best": best,
        "targets": targets,
        "command": "python bench/choose_targets.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
