"""Time to target: Quanta (fifo, timeslice, gandiva) versus Optuna and Ray Tune on one workload.

Every system runs the same trainable code (examples/mnist1d.py by default) on the same number of
CPU devices with the same trial budget, once per seed. A search ends when the hard target is reached
or its budget (trials or --max-seconds) is spent; the wall time to the first report reaching each
target is read from a per-run log of every report (a run that never reached a target counts as its
full wall time and is marked). Start-up (process pools, Ray's cluster) counts: users wait for it.

    python bench/search.py --systems fifo,timeslice,gandiva,optuna,ray --seeds 0,1,2,3,4 \
        --json bench/results/search.json

Prints a table per target (median and spread of seconds, ratios to gandiva) and writes the JSON
shaped {"workload", "targets", "systems": {name: {target: {"median_s", "runs_s", "reached"}}}}.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from app.spec import SearchSpec, load_spec, parse_spec  # noqa: E402

QUANTA = ("fifo", "timeslice", "gandiva")


def workload_spec(
    path: Path,
    policy: str,
    seed: int,
    trials: int,
    max_steps: int | None,
    hard: float,
    max_seconds: float,
    parallelism: int,
) -> SearchSpec:
    base = load_spec(path).model_dump(mode="json")
    base["seed"] = seed
    base["budget"] = {**base["budget"], "max_trials": trials, "max_seconds": max_seconds, "stop_on_target": True}
    if max_steps:
        base["budget"]["max_steps"] = max_steps
    base["metric"] = {**base["metric"], "target": hard}
    base["scheduler"] = {**base["scheduler"], "policy": policy if policy in QUANTA else "fifo"}
    base["parallelism"] = parallelism
    return parse_spec(base)


def run_quanta(spec: SearchSpec, devices: int, log_path: str, workdir: str) -> None:
    from app.controller import Controller
    from app.db.store import Store
    from app.devices import parse_devices
    from app.executor.runtime.local import LocalRuntime

    store = Store(f"sqlite:///{workdir}/q.db")
    ctl: Controller | None = None
    rt = LocalRuntime(parse_devices(f"cpu:{devices}"), lambda t: ctl.launch(t), warm_modules=[spec.module])
    ctl = Controller(store, rt, workdir=workdir)
    try:
        sid = ctl.submit(spec)
        ctl.run(sid)
    finally:
        ctl.close()
    with open(log_path, "a") as fh:
        for r in store.search_reports(sid):
            if r.objective is not None:
                fh.write(f"{r.at:.6f} {r.objective!r}\n")


def _child(system: str, spec_json: str, devices: int, log_path: str, workdir: str, hard: float, max_s: float) -> None:
    spec = parse_spec(json.loads(spec_json))
    if system in QUANTA:
        run_quanta(spec, devices, log_path, workdir)
    elif system == "optuna":
        from bench.peers import run_optuna

        run_optuna(spec, spec.seed, devices, log_path, hard, max_s)
    elif system == "ray":
        from bench.peers import run_ray

        run_ray(spec, spec.seed, devices, log_path, hard, max_s)
    else:
        raise SystemExit(f"unknown system {system}")


def one_run(system: str, spec: SearchSpec, devices: int, targets: dict[str, float], max_s: float) -> dict[str, Any]:
    """Run one search in a fresh process; return seconds to each target (None = not reached) and wall."""
    work = Path(tempfile.mkdtemp(prefix=f"qbench-{system}-"))
    log_path = work / "reports.log"
    log_path.touch()
    ctx = mp.get_context("spawn")
    t0 = time.time()
    proc = ctx.Process(
        target=_child, args=(system, spec.model_dump_json(), devices, str(log_path), str(work), targets["hard"], max_s)
    )
    proc.start()
    proc.join(max_s + 120)
    if proc.is_alive():
        proc.kill()
        proc.join()
    wall = time.time() - t0
    points = sorted(
        (float(t), float(v)) for t, v in (line.split() for line in log_path.read_text().splitlines() if line.strip())
    )
    sign = 1 if spec.metric.goal == "maximize" else -1
    reached: dict[str, float | None] = {}
    for name, target in targets.items():
        hit = next((t for t, v in points if sign * v >= sign * target), None)
        reached[name] = None if hit is None else max(0.0, hit - t0)
    return {"wall_s": wall, "reached": reached, "exit_code": proc.exitcode, "reports": len(points)}


def write(args: argparse.Namespace, targets: dict[str, float], results: dict[str, Any], seeds_done: list[int]) -> None:
    out = {
        "workload": {
            "spec": str(args.spec.relative_to(ROOT)) if args.spec.is_relative_to(ROOT) else str(args.spec),
            "trials": args.trials,
            "devices": args.devices,
            "seeds": seeds_done,
            "max_seconds": args.max_seconds,
            "max_steps": args.max_steps or load_spec(args.spec).budget.max_steps,
            "parallelism": args.parallelism,
        },
        "targets": targets,
        "systems": results,
        "command": "python " + " ".join(sys.argv),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "mnist1d.yaml")
    ap.add_argument("--systems", default="fifo,timeslice,gandiva,optuna,ray")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--targets", default="0.85,0.90,0.93", help="easy,medium,hard")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--parallelism", type=int, default=8, help="Quanta trials alive at once (timeslice/gandiva)")
    ap.add_argument("--max-seconds", type=float, default=600)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    easy, medium, hard = (float(x) for x in args.targets.split(","))
    targets = {"easy": easy, "medium": medium, "hard": hard}
    systems = [s for s in args.systems.split(",") if s]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    console = Console()
    results: dict[str, dict[str, Any]] = {}
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}

    def summarise() -> None:
        for system in systems:
            done = runs[system]
            if not done:
                continue
            results[system] = {}
            for name in targets:
                secs = [r["reached"][name] if r["reached"][name] is not None else r["wall_s"] for r in done]
                results[system][name] = {
                    "median_s": statistics.median(secs),
                    "runs_s": [round(s, 2) for s in secs],
                    "reached": [r["reached"][name] is not None for r in done],
                }

    for i, seed in enumerate(seeds):
        for system in systems:
            par = args.devices if system == "fifo" else args.parallelism
            spec = workload_spec(args.spec, system, seed, args.trials, args.max_steps, hard, args.max_seconds, par)
            console.print(f"seed {seed} {system} ...", end=" ")
            r = one_run(system, spec, args.devices, targets, args.max_seconds)
            runs[system].append(r)
            console.print(
                {k: (None if v is None else round(v, 1)) for k, v in r["reached"].items()}, f"wall {r['wall_s']:.0f} s"
            )
            summarise()
            if args.json:  # partial results survive an interrupted benchmark
                write(args, targets, results, seeds[: i + 1])
    for name, target in targets.items():
        table = Table(title=f"time to {name} target ({spec.metric.name} {target})")
        table.add_column("system")
        table.add_column("median s", justify="right")
        table.add_column("min-max s", justify="right")
        table.add_column("reached", justify="right")
        table.add_column("gandiva speed-up", justify="right")
        ref = results.get("gandiva", {}).get(name, {}).get("median_s")
        for system in systems:
            r = results[system][name]
            speed = f"{r['median_s'] / ref:.2f}x" if ref else "-"
            table.add_row(
                system,
                f"{r['median_s']:.1f}",
                f"{min(r['runs_s']):.0f}-{max(r['runs_s']):.0f}",
                f"{sum(r['reached'])}/{len(r['reached'])}",
                speed,
            )
        console.print(table)
    if args.json:
        write(args, targets, results, seeds)
        console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
