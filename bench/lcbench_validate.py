"""Does the LCBench search simulator agree with a live run of the same search?

The same search (task, policy, searcher, workers, seed, targets) runs twice:
- live: `quanta`'s real controller and `LocalRuntime` on CPU devices; each trial is
  `quanta.sim.lcbench_trial:train`, which sleeps through every LCBench epoch for the surrogate's epoch
  time times `--scale` and then reports the surrogate's val_accuracy (the quantum and the budget are
  scaled the same way);
- simulated: `quanta.sim.search_bench.run_search` on `SimRuntime`, in unscaled simulated seconds, with
  the costs the live run measured (means, divided by the scale: a run's delays add up, so the mean
  is what keeps the two clocks together; medians left the simulator ~3 % ahead), as `bench/sim_validate.py
  --calibrate` does for traces: start, park, resume and migration latencies; the controller's round
  (`react`: from a freed device, or a due tick, to the command; the simulator's rounds take no time),
  added to every start, resume and move; a started trial's first epoch beyond its surrogate time
  (`first`), added to the start; and each later epoch's overhead beyond it (`step`: the report's
  trip), added to every simulated epoch.

The live template loads the task's surrogate once (`QUANTA_LCBENCH_PRELOAD`, see
`quanta.sim.lcbench_trial`): loaded in each trial instead, it cost ~1.8 s per start, 90 simulated seconds
at `--scale 0.02`, which is what made the simulator look twice as fast as the live runs before.

Reported per run: simulated seconds to each target both ways (live seconds / scale), and per system
the mean over seeds and its relative difference (goal: mean time to target within 10 %). With
`fifo` + `random` the two runs propose the same configurations in the same order whatever the timing,
so they differ only by the mechanism; with a searcher that learns from reports (the default), the
order reports arrive in can change what is asked next, so single runs may part ways and only the mean
over seeds is compared.

    python bench/lcbench_validate.py --task 3945 --systems fifo_random,default --seeds 0,1,2 \\
        --workers 2 --hours 2 --scale 0.02 --json bench/results/lcbench_validate.json

Trials sleep, so the live runs need little CPU (the template still imports torch once per run).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
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

SYSTEMS: dict[str, tuple[str, str | None]] = {  # name -> (policy, algorithm); as bench/lcbench.py
    "fifo_random": ("fifo", "random"),
    "fifo_tpe": ("fifo", "tpe"),
    "default": ("default", None),
    "gandiva": ("gandiva", "tpe"),
}
TARGETS = ("medium", "hard")
LATENCY_KINDS = ("start", "park", "resume", "migrate", "react")


def live_run(
    task: str,
    policy: str,
    algorithm: str | None,
    workers: int,
    hours: float,
    seed: int,
    targets: dict[str, float],
    scale: float,
) -> tuple[dict[str, float | None], dict[str, float], int]:
    """Run the search for real. Returns simulated-equivalent seconds (live / scale) to each target, the
    mean mechanism latencies it measured (live seconds, by kind), and how many trials started."""
    from quanta.controller import Controller, ControllerOptions
    from quanta.db.store import Store
    from quanta.devices import cpu_devices
    from quanta.executor.runtime.local import LocalRuntime
    from quanta.sim.lcbench_trial import PRELOAD_ENV
    from quanta.sim.search_bench import QUANTUM_S, lcbench, search_spec
    from quanta.spec import parse_spec
    from quanta.status import SearchStatus

    bench = lcbench(task)
    spec = search_spec(
        bench,
        policy=policy,
        algorithm=algorithm,
        workers=workers,
        hours=hours * scale,
        seed=seed,
        stop_at=targets["hard"],
        quantum_s=QUANTUM_S * scale,
    )
    raw = spec.model_dump(mode="json")
    raw["config"] = {**raw["config"], "time_scale": scale}
    spec = parse_spec(raw)
    work = Path(tempfile.mkdtemp(prefix="quanta-lcv-"))
    os.environ[PRELOAD_ENV] = task  # the template loads the surrogate once, not every trial at its start
    rt = LocalRuntime(cpu_devices(workers), warm_modules=["quanta.sim.lcbench_trial"])
    ctl = Controller(Store(f"sqlite:///{work / 'v.db'}"), rt, ControllerOptions(workdir=work))
    try:
        # The template imports torch before its first fork: pay that before the search's clock starts,
        # with a warm-up search of one trial of one epoch (a trial outside a search would have no policy).
        warm_raw = search_spec(bench, policy="fifo", algorithm="random", workers=workers, hours=1.0).model_dump(
            mode="json"
        )
        warm_raw["budget"] = {"max_trials": 1, "max_steps": 1, "max_seconds": 600}
        warm_raw["config"] = {**warm_raw["config"], "time_scale": scale}
        warm_id = ctl.submit(parse_spec(warm_raw))
        while (w := ctl.search(warm_id)) is not None and w.status == SearchStatus.RUNNING:
            ctl.step()
        search_id = ctl.submit(spec)
        s = ctl.search(search_id)
        assert s is not None
        while s.status == SearchStatus.RUNNING:
            ctl.step()
            s = ctl.search(search_id)
            assert s is not None
    finally:
        ctl.close()
    t0 = s.started_at
    reports = sorted(ctl.store.search_reports(search_id), key=lambda r: (r.trial_id, r.step))
    reached: dict[str, float | None] = {k: None for k in TARGETS}
    for r in sorted(reports, key=lambda r: r.at):
        for k in TARGETS:
            if reached[k] is None and r.objective is not None and r.objective >= targets[k]:
                reached[k] = (r.at - t0) / scale
    costs: dict[str, float] = {}
    trials = ctl.trials_of(search_id)
    trial_ids = {t.id for t in trials}
    rows = {kind: [x for x in ctl.store.latencies(kind) if x.trial_id in trial_ids] for kind in LATENCY_KINDS}
    for kind, xs in rows.items():
        if xs:
            costs[kind] = statistics.fmean(x.ms for x in xs) / 1000.0
    parks: dict[int, list[float]] = {}
    for x in sorted(rows["park"], key=lambda x: x.at):
        parks.setdefault(x.trial_id, []).append(x.at)
    curves = bench.curves([{**t.params, **spec.config} for t in trials])  # one surrogate call
    times = {t.id: c.time for t, c in zip(trials, curves, strict=True)}
    if (extra := step_overhead_s(reports, times, parks, scale)) is not None:
        costs["step"] = extra
    # A started trial's first epoch beyond its surrogate time (the trainable's own set-up): part of its start.
    began = {x.trial_id: x.at for x in rows["start"]}
    first = [
        r.at - began[r.trial_id] - times[r.trial_id][0] * scale for r in reports if r.step == 0 and r.trial_id in began
    ]
    if first:
        costs["first"] = statistics.fmean(first)
    started = sum(1 for t in trials if t.started_at is not None)
    return reached, costs, started


def step_overhead_s(
    reports: list[Any], times: dict[int, Any], parks: dict[int, list[float]], scale: float
) -> float | None:
    """Live seconds each epoch takes beyond its surrogate time x scale (the report's trip and the
    trial's bookkeeping): the mean over consecutive reports of one trial with no park between them.
    `reports` sorted by (trial, step); `times[trial]` the surrogate's cumulative epoch times."""
    extra = []
    for a, b in zip(reports, reports[1:], strict=False):
        if a.trial_id != b.trial_id or b.step != a.step + 1:
            continue
        ps = parks.get(a.trial_id, [])
        if bisect.bisect_right(ps, b.at) != bisect.bisect_right(ps, a.at):
            continue
        t = times[a.trial_id]
        extra.append((b.at - a.at) - (t[b.step] - t[a.step]) * scale)
    return statistics.fmean(extra) if extra else None


def sim_run(
    task: str,
    policy: str,
    algorithm: str | None,
    workers: int,
    hours: float,
    seed: int,
    targets: dict[str, float],
    live_costs: dict[str, float],
    scale: float,
) -> tuple[dict[str, float | None], int]:
    from quanta.sim.runtime import SimCosts
    from quanta.sim.search_bench import lcbench, run_search

    # A command waits for the controller's round (`react`: from the freed device or the due tick to the
    # command) before its own latency; the simulator's rounds take no time, so both are added here.
    react = live_costs.get("react", 0.0)
    costs = SimCosts(
        start_s=(react + live_costs.get("start", 0.0) + max(0.0, live_costs.get("first", 0.0))) / scale,
        suspend_s=live_costs.get("park", 0.0) / scale,
        resume_s=(react + live_costs.get("resume", 0.0)) / scale,
        migrate_s=(react + live_costs.get("migrate", live_costs.get("resume", 0.0))) / scale,
    )
    res = run_search(
        lcbench(task),
        policy=policy,
        algorithm=algorithm,
        workers=workers,
        hours=hours,
        seed=seed,
        targets={k: targets[k] for k in TARGETS},
        stop_at=targets["hard"],
        costs=costs,
        step_overhead_s=max(0.0, live_costs.get("step", 0.0)) / scale,
    )
    return {k: res.time_to_target.get(k) for k in TARGETS}, res.started


def _mean(xs: list[float | None], budget_s: float) -> float:
    return statistics.fmean(budget_s if x is None else x for x in xs)


def main(argv: list[str] | None = None) -> None:
    from bench.lcbench_targets import DEFAULT_JSON, load_targets

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="3945")
    ap.add_argument("--systems", default="fifo_random,default")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--hours", type=float, default=2.0, help="simulated hours of budget (live: hours x scale)")
    ap.add_argument("--scale", type=float, default=0.02, help="live seconds per simulated second")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        ap.error(f"--systems: unknown {', '.join(unknown)} (known: {', '.join(SYSTEMS)})")
    if not 0 < args.scale <= 1 or args.workers < 1 or args.hours <= 0:
        ap.error("--scale must be in (0, 1], --workers >= 1, --hours > 0")
    targets = load_targets(DEFAULT_JSON)[args.task]
    seeds = [int(s) for s in args.seeds.split(",")]
    budget_s = args.hours * 3600.0
    runs: list[dict[str, Any]] = []
    for seed in seeds:  # interleaved per seed
        for name in systems:
            policy, algorithm = SYSTEMS[name]
            t = time.perf_counter()
            live, costs, live_started = live_run(
                args.task, policy, algorithm, args.workers, args.hours, seed, targets, args.scale
            )
            wall = time.perf_counter() - t
            sim, sim_started = sim_run(
                args.task, policy, algorithm, args.workers, args.hours, seed, targets, costs, args.scale
            )
            run = {
                "system": name,
                "seed": seed,
                "live_s": live,
                "sim_s": sim,
                "live_costs_s": costs,
                "trials_started": {"live": live_started, "sim": sim_started},
                "live_wall_s": round(wall, 1),
            }
            runs.append(run)
            print(f"seed {seed} {name}: live {live} sim {sim} costs {costs} ({wall:.0f} s)", file=sys.stderr)
    summary: dict[str, Any] = {}
    table = Table(title=f"LCBench task {args.task}: simulated seconds to target, live (scaled) vs simulator")
    for col in ("system", "target", "live mean", "sim mean", "difference", "live runs", "sim runs"):
        table.add_column(col)
    for name in systems:
        summary[name] = {}
        mine = [r for r in runs if r["system"] == name]
        for k in TARGETS:
            live_runs = [r["live_s"][k] for r in mine]
            sim_runs = [r["sim_s"][k] for r in mine]
            lm, sm = _mean(live_runs, budget_s), _mean(sim_runs, budget_s)
            diff = (sm - lm) / lm if lm else 0.0
            summary[name][k] = {
                "live_mean_s": round(lm, 1),
                "sim_mean_s": round(sm, 1),
                "rel_diff": round(diff, 4),
                "within_10pct": abs(diff) <= 0.10,
            }
            table.add_row(
                name,
                k,
                f"{lm:,.0f}",
                f"{sm:,.0f}",
                f"{diff:+.1%}",
                str([None if x is None else round(x) for x in live_runs]),
                str([None if x is None else round(x) for x in sim_runs]),
            )
    Console(width=160).print(table)
    out = {
        "task": args.task,
        "workers": args.workers,
        "hours": args.hours,
        "scale": args.scale,
        "targets": targets,
        "runs": runs,
        "summary": summary,
        "command": "python bench/lcbench_validate.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
