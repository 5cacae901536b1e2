"""Many users on one simulated cluster: per-user mean JCT, finish-time fairness (rho) and Jain's index
for fifo, tiresias and gandiva without the share layer, and gandiva with equal shares.

    python bench/sim_users.py --trace 6c71a0 --max-jobs 300 --gpus 100 --users 8 --quantum 600
    python bench/sim_users.py --trace 6c71a0 --max-jobs 300 --gpus 200 --users 8 --kind v100=100,p100=100 \
        --placement both --out bench/results/sim_users_kinds_v100_p100.json

The trace's jobs are dealt to users as `quanta simulate --users N` does (`quanta.sim.users`: the trace's own
users, else N users with Zipf-skewed demand); rho of a user = mean JCT on the shared cluster / mean JCT
of the same jobs alone on its fair share (same policy); Jain's index is over min(1, 1/rho). Goals:
max rho within 1.3 of the ideal (1), Jain's index >= 0.9 with shares on, and overall mean JCT within
10 % of gandiva without shares. Prints a table and writes bench/results/sim_users.json.

`--kind` takes a mix (`v100=100,k80=100`); `--placement aware|blind|both` runs kind-aware placement
(Gavel: each job where its rate relative to the other kinds is highest; the default), kind-blind
placement (never on a kind where a job's rate is 0, otherwise without regard to kind), or both, each
run labelled with ` [blind]` when blind. Goal: on a mix, >= 1.5x lower mean JCT aware than
blind.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from quanta.executor.policy.knobs import ShareKnobs  # noqa: E402
from quanta.sim.driver import simulate  # noqa: E402
from quanta.sim.traces import load_trace  # noqa: E402
from quanta.sim.users import assign_users, user_summary  # noqa: E402

# (label, policy, shares on, favour_worst_rho, rho_bound on)
RUNS = (
    ("fifo", "fifo", False, False, False),
    ("tiresias", "tiresias", False, False, False),
    ("gandiva", "gandiva", False, False, False),
    ("gandiva+shares", "gandiva", True, False, False),
    ("gandiva+shares+rho", "gandiva", True, True, False),
    ("gandiva+shares+bound", "gandiva", True, False, True),
)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default="6c71a0")
    ap.add_argument("--max-jobs", type=int, default=300)
    ap.add_argument("--gpus", type=int, default=100)
    ap.add_argument("--gpus-per-server", type=int, default=4)
    ap.add_argument("--quantum", type=float, default=60.0)
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--kind", default="v100", help="one kind or a mix: v100=100,p100=100")
    ap.add_argument("--placement", choices=("aware", "blind", "both"), default="aware")
    ap.add_argument("--rho-bound", type=float, default=1.5, help="rho_bound of the +bound run (ShareKnobs)")
    ap.add_argument("--only", default="", help="comma-separated labels of RUNS (default: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sim_users.json")
    args = ap.parse_args(argv)

    jobs = assign_users(load_trace(args.trace, args.max_jobs), args.users)
    wanted = {x.strip() for x in args.only.split(",") if x.strip()}
    cache: dict[tuple[Any, ...], list[float]] = {}
    results: dict[str, Any] = {}
    modes = {"aware": (True,), "blind": (False,), "both": (True, False)}[args.placement]
    for (base_label, policy, shares, favour, bound), aware in ((r, a) for r in RUNS for a in modes):
        label = base_label if aware else f"{base_label} [blind]"
        if wanted and base_label not in wanted:
            continue
        t0 = time.perf_counter()
        res = simulate(
            jobs,
            policy,
            gpus=args.gpus,
            gpus_per_server=args.gpus_per_server,
            quantum_s=args.quantum,
            check=False,
            kind=args.kind,
            shares={} if shares else None,
            share_knobs=ShareKnobs(favour_worst_rho=favour, rho_bound=args.rho_bound if bound else None),
            kind_aware=aware,
        )
        s = res.summary
        s.update(
            user_summary(
                jobs,
                res.jobs,
                policy,
                gpus=args.gpus,
                gpus_per_server=args.gpus_per_server,
                quantum_s=args.quantum,
                kind=args.kind,
                weights={},
                cache=cache,
                kind_aware=aware,
            )
        )
        s["kind"] = args.kind
        s["kind_aware"] = aware
        s["shares"] = "equal" if shares else "none"
        s["favour_worst_rho"] = favour
        s["rho_bound"] = args.rho_bound if bound else None
        s["bench_wall_s"] = round(time.perf_counter() - t0, 1)
        results[label] = s
        print(f"{label}: mean JCT {s['mean_jct_s'] / 3600:.2f} h, max rho {s['max_rho']:.2f}, "
              f"Jain {s['jain_index']:.3f} ({s['bench_wall_s']} s)", file=sys.stderr)  # fmt: skip

    for label, s in results.items():
        blind = results.get(f"{label} [blind]")
        if s["kind_aware"] and blind and "=" in args.kind:
            s["blind_over_aware_mean_jct"] = blind["mean_jct_s"] / s["mean_jct_s"]
    for s in results.values():
        base = results.get("gandiva" if s["kind_aware"] else "gandiva [blind]", {}).get("mean_jct_s")
        if s["shares"] == "equal" and base:
            s["goals"] = {
                "max_rho_le_1.3": s["max_rho"] <= 1.3,
                "jain_ge_0.9": s["jain_index"] >= 0.9,
                "mean_jct_within_10pct_of_gandiva": s["mean_jct_s"] <= 1.1 * base,
            }
    print(table(results, args))
    out = {
        "trace": args.trace,
        "max_jobs": args.max_jobs,
        "gpus": args.gpus,
        "users": args.users,
        "kind": args.kind,
        "quantum": args.quantum,
        "runs": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out}", file=sys.stderr)


def table(results: dict[str, Any], args: argparse.Namespace) -> str:
    users = sorted({u for s in results.values() for u in s["users"]}, key=lambda u: (len(u), u))
    head = ["run", "mean JCT (h)", "makespan (h)", "max rho", "Jain", "blind/aware", *[f"rho {u}" for u in users]]
    lines = [
        f"{args.trace}, first {args.max_jobs} jobs, {args.gpus} GPUs ({args.kind}), {len(users)} users",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for label, s in results.items():
        cells = [
            label,
            f"{s['mean_jct_s'] / 3600:.2f}",
            f"{s['makespan_s'] / 3600:.1f}",
            f"{s['max_rho']:.2f}",
            f"{s['jain_index']:.3f}",
            f"{s['blind_over_aware_mean_jct']:.2f}x" if "blind_over_aware_mean_jct" in s else "",
            *[f"{s['users'][u]['rho']:.2f}" if u in s["users"] else "" for u in users],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
