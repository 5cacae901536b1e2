"""LCBench with two objectives, in simulated time: seconds to 95 % of the reference front's hypervolume,
Quanta against Syne Tune's multi-objective methods and multi-objective random search.

Objectives: validation accuracy (max) and `train_time_s`, the training time to the last epoch as a trial
measures it after epoch e (its cumulative seconds / e x 52; at the last epoch, its whole training time).
Every method searches the same LCBench task of YAHPO Gym's surrogate with the same workers and simulated
budget, on the exact clock (decisions free):
- `quanta_default`: Quanta's default policy and searcher with the spec's `metrics: [{name: val_accuracy,
  goal: maximize}, {name: train_time_s, goal: minimize}]` (the real controller on `SimRuntime`:
  `quanta.sim.search_bench`); `quanta_fifo_random`: FIFO with the random searcher, i.e. multi-objective
  random search (it ignores the metrics), four trials at a time run to their last epoch;
  `quanta_acq_tpe`: the default with `search.acquisition: tpe` (TPE on Pareto ranks, the default's model
  asks before ParEGO's on the GP; what the runs published as `quanta_default` before 2026-12-03 made).
- `syne_moasha`, `syne_morea`, `syne_random`, `syne_ehvi`: Syne Tune 0.16's multi-objective methods
  (`bench/syne_lcbench_mo.py`, which says how each is set up and which 0.16 does not ship); `syne_ehvi`
  needs BoTorch and is left out of `all` without it.
- `syne_rsbo`: Syne Tune 0.14.2's random scalarisation (`MORandomScalarizationBayesOpt`, gone from 0.16),
  run in the peer environment (`bench/peer_env.py`, `make peers-old`); left out of `all` without it.
  0.14.2's NSGA-II refuses more than one worker (`bench/syne_lcbench_mo.py`), so it is not run.

The reference front of a task (`reference_front`): 1,000 random configurations (seed 0, the draw
`bench/lcbench_targets.py` makes) at their last epoch. Its reference point is the worst accuracy and the
longest training time among them (a point as bad as either adds no volume), and its hypervolume the
volume their front dominates up to it; both are written down per task in
`bench/results/lcbench_mo_reference.json` (computed for a task not in it). A run's progress at simulated
time t is the hypervolume of the front of every (val_accuracy, train_time_s) it has reported up to t; its
figure is the simulated seconds until that reaches 95 % of the reference's (None: not within the budget,
counted as the whole budget and marked). A run ends at that point (nothing after it is measured).

Runs are interleaved per seed (seed 0: every task and method, then seed 1, ...).

    python bench/lcbench_mo.py --tasks suite --seeds 0,1,2 --hours 8 --jobs 2 \
        --runs bench/results/lcbench_mo_runs.jsonl --json bench/results/lcbench_mo.json

`--runs` appends each run to a JSON-lines file as it ends, and skips the units already there: a stopped
run goes on where it was with the same command.

`--include JSON` tabulates the runs an earlier invocation's `--json` recorded, of this invocation's tasks and
seeds, beside this one's (a unit both have is taken from this one), so that methods run at different times
join one table. `--max-wall-s S` ends a Syne Tune run still short of its goal after S seconds of wall time
(the GP-based ones can take hours of CPU on a hard task); its figure is then the simulated seconds it got
to, a lower bound on its time to the goal, marked "cut".

Prints one table (per task: median seconds to 95 % per method) and the summary, and writes JSON shaped
{"tasks": {"<id>": {"reference": {"accuracy", "train_time_s", "hypervolume", "front"}, "methods":
{"<name>": {"runs_s", "missed", "median_s", "misses", "median_censored", "seeds", "final_fraction",
"wall_s", "started"}}}}, "summary": {"tasks", "median_ratio_best_syne", "tasks_sooner_vs_best_syne",
"median_ratio_random", "tasks_sooner_vs_random", "median_ratio_vs": {...}, "goals": {...}}, "workers",
"hours", "seeds", "methods", "goal_fraction", "wall_s", "command"}. A ratio is the other method's median
seconds / quanta_default's (above 1: Quanta sooner), median over the tasks; "best_syne" takes the
soonest Syne Tune method per task; "random" is quanta_fifo_random.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lcbench import target_stats, task_list  # noqa: E402
from bench.reach import hypervolume, hypervolume_curve  # noqa: E402

REFERENCE = "quanta_default"
RANDOM = "quanta_fifo_random"
GOAL_FRACTION = 0.95  # of the reference front's hypervolume
N_CONFIGS = 1000
SEED = 0  # the reference configurations' draw (bench/lcbench_targets.py's)
DEFAULT_REFERENCE_JSON = ROOT / "bench" / "results" / "lcbench_mo_reference.json"

# Quanta methods: (policy, algorithm); "default" / None = what a spec naming neither gets.
QUANTA: dict[str, tuple[str, str | None]] = {
    "quanta_default": ("default", None),
    "quanta_fifo_random": ("fifo", "random"),
    "quanta_acq_tpe": ("default", None),
}
# The search block a Quanta method pins over the default's (`--knobs` merge over it for quanta_default).
QUANTA_SEARCH: dict[str, dict[str, Any]] = {"quanta_acq_tpe": {"acquisition": "tpe"}}
SYNE = ("syne_moasha", "syne_morea", "syne_random", "syne_ehvi", "syne_rsbo")
METHODS = (*QUANTA, *SYNE)
EXTRA = ("syne_moasha_asis",)  # named in --methods only: MO-ASHA with Syne Tune 0.16's priority as shipped

# Issue 52's goals for quanta_default (median over the tasks).
GOAL_RATIO_BEST_SYNE = 1.5
GOAL_SOONER_FRACTION = 2 / 3
GOAL_RATIO_RANDOM = 5.0


@dataclass
class MORunResult:
    """One search: `time_s` to the hypervolume goal (None: not within the budget); `curve` [(seconds,
    hypervolume / reference hypervolume)] where it rose; the fraction it ended at; trials started; wall
    and simulated seconds; `cut`: ended at `--max-wall-s` short of the goal after `sim_s` simulated
    seconds (its time to the goal is more than that: tabulated as `sim_s`, a lower bound)."""

    method: str
    task: str
    seed: int
    time_s: float | None
    final_fraction: float
    curve: list[tuple[float, float]] = field(default_factory=list)
    started: int = 0
    wall_s: float = 0.0
    sim_s: float = 0.0
    cut: bool = False


# ---- the reference front (pure but for the surrogate) ---------------------------------------------


def reference_front(bench: Any, n: int = N_CONFIGS, seed: int = SEED) -> dict[str, Any]:
    """The reference of a task from `bench` (an `LCBench`, or anything with `sample(n, seed)` and
    batched `curves`): `n` random configurations at their last epoch; the reference point (their worst
    accuracy, their longest training time), the hypervolume of their front up to it, its size."""
    curves = bench.curves(bench.sample(n, seed))
    points = [(c.val_accuracy[-1], c.time[-1]) for c in curves]
    ref = (min(a for a, _ in points), max(s for _, s in points))
    hv = hypervolume(points, ref)
    if not hv > 0:
        raise ValueError(f"reference: {n} configurations dominate no volume (all equal?)")
    from quanta.search.pareto import front

    on_front = front([(-a, s) for a, s in points], [0.0] * len(points))
    return {"accuracy": ref[0], "train_time_s": ref[1], "hypervolume": hv, "front": len(on_front), "points": points}


def load_references(path: Path) -> dict[str, dict[str, Any]]:
    """The references written down per task in `path` (none when it does not exist)."""
    if not path.is_file():
        return {}
    doc = json.loads(path.read_text())
    return {str(k): v for k, v in doc.get("tasks", {}).items()}


def references_for(tasks: Sequence[str], path: Path, data: Path | None) -> dict[str, dict[str, Any]]:
    """Each task's reference, read from `path` or computed (and then written there beside the others)."""
    have = load_references(path)
    missing = [t for t in tasks if t not in have]
    if missing:
        from quanta.sim.search_bench import lcbench

        for task in missing:
            ref = reference_front(lcbench(task, None if data is None else str(data)))
            ref.pop("points")
            have[task] = ref
            print(f"task {task}: reference front computed ({ref['front']} points)", file=sys.stderr)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"n_configs": N_CONFIGS, "seed": SEED, "tasks": dict(sorted(have.items()))}
        path.write_text(json.dumps(doc, indent=1) + "\n")
    return {t: have[t] for t in tasks}


def _point(ref: dict[str, Any]) -> tuple[float, float]:
    return (float(ref["accuracy"]), float(ref["train_time_s"]))


# ---- runs -----------------------------------------------------------------------------------------


def _result(
    method: str, task: str, seed: int, reports: list[tuple[float, float, float]], ref: dict[str, Any], **kw: Any
) -> MORunResult:
    total = float(ref["hypervolume"])
    curve = [(t, hv / total) for t, hv in hypervolume_curve(reports, _point(ref))]
    reached = next((t for t, f in curve if f >= GOAL_FRACTION), None)
    return MORunResult(method, task, seed, reached, curve[-1][1] if curve else 0.0, curve, **kw)


def run_quanta(
    method: str,
    task: str,
    seed: int,
    workers: int,
    hours: float,
    ref: dict[str, Any],
    data: Any,
    knobs: dict[str, Any] | None = None,
) -> MORunResult:
    """One Quanta search; `knobs` (`--knobs`: {"scheduler": {...}, "search": {...}}) are merged over
    quanta_default's spec blocks, for a variant of it."""
    from bench.reach import FrontTracker
    from quanta.sim.search_bench import METRIC, MO_OBJECTIVES, TRAIN_TIME, simulate_search

    policy, algorithm = QUANTA[method]
    budget = hours * 3600.0
    goal = GOAL_FRACTION * float(ref["hypervolume"])
    tracker = FrontTracker(_point(ref))
    reports: list[tuple[float, float, float]] = []

    def stop_when(at: float, metrics: Any) -> bool:
        acc, secs = metrics.get(METRIC), metrics.get(TRAIN_TIME)
        if acc is None or secs is None or at > budget:
            return False
        reports.append((at, float(acc), float(secs)))
        return tracker.add(float(acc), float(secs)) >= goal

    res = simulate_search(
        task, policy, algorithm, workers, hours, seed, {},
        data_path=None if data is None else str(data), objectives=MO_OBJECTIVES, stop_when=stop_when,
        scheduler=(knobs or {}).get("scheduler"), search=(knobs or {}).get("search") or QUANTA_SEARCH.get(method),
    )  # fmt: skip
    return _result(
        method, task, seed, reports, ref, started=res.started, wall_s=res.wall_seconds, sim_s=res.sim_seconds
    )


def run_syne(
    method: str,
    task: str,
    seed: int,
    workers: int,
    hours: float,
    ref: dict[str, Any],
    data: Any,
    max_wall_s: float | None = None,
) -> MORunResult:
    from bench.peer_env import PEER_MO_METHODS, run_peer_mo
    from bench.syne_lcbench_mo import run_syne_mo

    goal = GOAL_FRACTION * float(ref["hypervolume"])
    if method in PEER_MO_METHODS:
        run = run_peer_mo(method, task, seed, workers, hours, _point(ref), goal, data, max_wall_s=max_wall_s)
    else:
        run = run_syne_mo(
            method.removeprefix("syne_"), task, workers=workers, hours=hours, seed=seed, reference=_point(ref),
            goal=goal, data_path=data, max_wall_s=max_wall_s,
        )  # fmt: skip
    out = _result(
        method, task, seed, run.reports, ref, started=run.started, wall_s=run.wall_seconds, sim_s=run.sim_seconds
    )
    out.cut = run.cut and out.time_s is None
    return out


def run_one(
    method: str,
    task: str,
    seed: int,
    workers: int,
    hours: float,
    ref: dict[str, Any],
    data: Any,
    knobs: dict[str, Any] | None = None,
    max_wall_s: float | None = None,
) -> MORunResult:
    """One run; `knobs` apply to `REFERENCE` (quanta_default) alone, `max_wall_s` to Syne Tune's methods."""
    if method in QUANTA:
        return run_quanta(method, task, seed, workers, hours, ref, data, knobs if method == REFERENCE else None)
    return run_syne(method, task, seed, workers, hours, ref, data, max_wall_s)


def run_all(
    tasks: Sequence[str],
    seeds: Sequence[int],
    methods: Sequence[str],
    workers: int,
    hours: float,
    refs: dict[str, dict[str, Any]],
    data: Path | None,
    on_run: Callable[[MORunResult], None] = lambda r: None,
    jobs: int = 1,
    done_before: Sequence[MORunResult] = (),
    knobs: dict[str, Any] | None = None,
    max_wall_s: float | None = None,
) -> list[MORunResult]:
    """Every (method, task, seed), interleaved per seed, in that order in the result. With `jobs` > 1
    the runs go to that many processes (simulated time: a run's figures do not depend on its neighbours).
    `done_before`: runs already made (`--runs`): their units are not run again."""
    units = [(m, t, s) for s in seeds for t in tasks for m in methods]
    have = {(r.method, r.task, r.seed): r for r in done_before}
    args = [(m, t, s, workers, hours, refs[t], data, knobs, max_wall_s) for m, t, s in units if (m, t, s) not in have]
    order = {u: i for i, u in enumerate(units)}
    kept = [have[u] for u in units if u in have]
    if jobs <= 1:
        out = list(kept)
        for a in args:
            out.append(run_one(*a))
            on_run(out[-1])
        return sorted(out, key=lambda r: order[(r.method, r.task, r.seed)])
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    done: list[MORunResult] = list(kept)
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        for fut in as_completed([pool.submit(run_one, *a) for a in args]):
            done.append(fut.result())
            on_run(done[-1])
    return sorted(done, key=lambda r: order[(r.method, r.task, r.seed)])


def load_runs(path: Path) -> list[MORunResult]:
    """The runs saved in `path` (`--runs`: one JSON object per line, as `save_run` writes them); none when
    it does not exist. A last line cut short (the process stopped while writing it) is ignored."""
    if not path.is_file():
        return []
    out: list[MORunResult] = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        row["curve"] = [tuple(p) for p in row.get("curve", [])]
        out.append(MORunResult(**row))
    return out


def runs_from_result(path: Path) -> list[MORunResult]:
    """The runs an earlier invocation's `--json` recorded (per task and method, each seed's seconds, a
    miss as None, the fraction it ended at, trials and wall seconds; no curves): `--include` tabulates them
    beside this invocation's. Raises ValueError naming `path` when it is not such a file."""
    try:
        doc = json.loads(path.read_text())
        out = []
        for task, block in doc["tasks"].items():
            for method, e in block["methods"].items():
                cuts = e.get("cut") or [False] * len(e["seeds"])  # results written before runs were cut
                for i, seed in enumerate(e["seeds"]):
                    t = None if e["missed"][i] else float(e["runs_s"][i])
                    cut = bool(cuts[i])
                    kw = {"started": int(e["started"][i]), "wall_s": float(e["wall_s"][i]), "cut": cut}
                    kw["sim_s"] = float(e["runs_s"][i]) if cut else 0.0
                    out.append(MORunResult(method, str(task), int(seed), t, float(e["final_fraction"][i]), [], **kw))
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ValueError(f"--include {path}: not a result of bench/lcbench_mo.py ({exc!r})") from exc
    return out


def save_run(path: Path, r: MORunResult) -> None:
    """Append run `r` to `path` (one line, flushed: a stopped benchmark resumes with it done)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    row = {**asdict(r), "curve": [[round(t, 2), round(f, 5)] for t, f in r.curve]}
    with path.open("a") as fh:
        fh.write(json.dumps(row) + "\n")
        fh.flush()


# ---- accounting (pure) ----------------------------------------------------------------------------


def tabulate(runs: Sequence[MORunResult], refs: dict[str, dict[str, Any]], budget_s: float) -> dict[str, Any]:
    """The JSON's "tasks" block: per task its reference and, per method, the seconds to the goal over its
    seeds (a miss counts `budget_s`, marked; a run cut at its wall-time cap counts the simulated seconds
    it got to, a lower bound, marked in "cut"), the fraction each run ended at, wall seconds, trials."""
    by: dict[str, dict[str, list[MORunResult]]] = {}
    for r in runs:
        by.setdefault(r.task, {}).setdefault(r.method, []).append(r)
    out: dict[str, Any] = {}
    for task, methods in by.items():
        block: dict[str, Any] = {"reference": refs[task], "methods": {}}
        for method, rs in methods.items():
            rs = sorted(rs, key=lambda r: r.seed)
            entry = target_stats([r.sim_s if r.cut else r.time_s for r in rs], budget_s)
            entry["cut"] = [r.cut for r in rs]
            entry["seeds"] = [r.seed for r in rs]
            entry["final_fraction"] = [round(r.final_fraction, 4) for r in rs]
            entry["wall_s"] = [round(r.wall_s, 2) for r in rs]
            entry["started"] = [r.started for r in rs]
            block["methods"][method] = entry
        out[task] = block
    return out


def _ratio(other_s: float, ref_s: float) -> float:
    return other_s / ref_s if ref_s > 0 else float("inf")


def summarize(tasks: dict[str, Any], reference: str = REFERENCE) -> dict[str, Any]:
    """Median over tasks of each method's median seconds / the reference's, how many tasks the reference
    is strictly sooner on, the same against the soonest Syne Tune method per task, and the goals."""
    ratios: dict[str, list[float]] = {}
    sooner: dict[str, int] = {}
    best_syne: list[float] = []
    best_syne_sooner = 0
    n = 0
    for block in tasks.values():
        methods = block["methods"]
        if reference not in methods:
            continue
        n += 1
        ref = methods[reference]["median_s"]
        for name, entry in methods.items():
            if name != reference:
                ratios.setdefault(name, []).append(_ratio(entry["median_s"], ref))
                sooner[name] = sooner.get(name, 0) + (ref < entry["median_s"])
        syne = [e["median_s"] for name, e in methods.items() if name.startswith("syne_")]
        if syne:
            best_syne.append(_ratio(min(syne), ref))
            best_syne_sooner += ref < min(syne)
    best = statistics.median(best_syne) if best_syne else None
    rnd = statistics.median(ratios[RANDOM]) if RANDOM in ratios else None
    out: dict[str, Any] = {
        "tasks": n,
        "median_ratio_best_syne": best,
        "tasks_sooner_vs_best_syne": best_syne_sooner if best_syne else None,
        "median_ratio_random": rnd,
        "tasks_sooner_vs_random": sooner.get(RANDOM),
        "median_ratio_vs": {k: statistics.median(v) for k, v in sorted(ratios.items())},
        "sooner_vs": dict(sorted(sooner.items())),
    }
    out["goals"] = {
        "ratio_best_syne": {"goal": GOAL_RATIO_BEST_SYNE, "value": best, "met": best is not None and best >= 1.5},
        "tasks_sooner_vs_best_syne": {
            "goal": f">= {GOAL_SOONER_FRACTION:.3f} of {n}",
            "value": out["tasks_sooner_vs_best_syne"],
            "met": bool(best_syne) and best_syne_sooner >= GOAL_SOONER_FRACTION * n,
        },
        "ratio_random": {"goal": GOAL_RATIO_RANDOM, "value": rnd, "met": rnd is not None and rnd >= GOAL_RATIO_RANDOM},
    }
    return out


# ---- output ---------------------------------------------------------------------------------------


def _fmt(stats: dict[str, Any]) -> str:
    s = f"{stats['median_s']:,.0f}"
    if stats["median_censored"]:
        s = ">=" + s
    if stats["misses"]:
        s += f" ({stats['misses']} miss)"
    if cut := sum(stats.get("cut", ())):
        s += f" ({cut} cut)"
    return s


def print_table(tasks: dict[str, Any], summary: dict[str, Any], budget_s: float, methods: Sequence[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 160))
    t = Table(
        title=f"simulated seconds to {GOAL_FRACTION:.0%} of the reference front's hypervolume, median over seeds "
        f"(miss = {budget_s:,.0f} s)"
    )
    t.add_column("task (ref. front)")
    for m in methods:
        t.add_column(m, justify="right")
    t.add_column(f"best Syne Tune\n/ {REFERENCE}", justify="right")
    for task, block in tasks.items():
        ms = block["methods"]
        syne = [e["median_s"] for n, e in ms.items() if n.startswith("syne_")]
        ratio = _ratio(min(syne), ms[REFERENCE]["median_s"]) if syne and REFERENCE in ms else None
        t.add_row(
            f"{task} ({block['reference']['front']})",
            *[_fmt(ms[m]) if m in ms else "-" for m in methods],
            "-" if ratio is None else f"{ratio:.2f}",
        )
    console.print(t)

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    s = summary
    console.print(
        f"best Syne Tune / {REFERENCE}: median ratio {f(s['median_ratio_best_syne'])}, {REFERENCE} sooner on "
        f"{s['tasks_sooner_vs_best_syne']}/{s['tasks']} tasks; {RANDOM} / {REFERENCE}: {f(s['median_ratio_random'])} "
        f"(sooner on {s['tasks_sooner_vs_random']}/{s['tasks']}); per method: "
        + ", ".join(f"{k} {v:.2f}" for k, v in s["median_ratio_vs"].items())
    )
    for name, g in s["goals"].items():
        console.print(f"goal {name}: {g['value']} (goal {g['goal']}) {'met' if g['met'] else 'NOT met'}")


def _csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def _tasks(spec: str) -> list[str]:
    """`--tasks`: `task_list`'s names, and `suite-even` / `suite-odd`."""
    halves = {"suite-even": 0, "suite-odd": 1}
    if spec in halves:
        return sorted(task_list("suite"))[halves[spec] :: 2]  # ids sorted as text
    return task_list(spec)


def unavailable(method: str) -> str | None:
    """Why `method` cannot run here (a dependency it needs is missing), or None."""
    from bench.peer_env import PEER_MO_METHODS, missing_reason
    from bench.syne_lcbench_mo import ehvi_missing

    if method == "syne_ehvi":
        return ehvi_missing()
    if method in PEER_MO_METHODS:
        return missing_reason()
    return None


def available_methods() -> list[str]:
    """`all`: every method whose dependencies are installed (syne_ehvi needs BoTorch, syne_rsbo the peer
    environment)."""
    return [m for m in METHODS if unavailable(m) is None]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--tasks",
        default="3945,34539",
        help="task ids, or `suite` (the 24) / `heldout` (the other ten) / `suite-even`, `suite-odd` (the 24, "
        "ids sorted as text, those at even or odd places: a half to tune a variant on, the other to confirm it)",
    )
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--hours", type=float, default=8.0)
    ap.add_argument(
        "--knobs",
        type=json.loads,
        default=None,
        help='JSON {"scheduler": {...}, "search": {...}} merged over quanta_default\'s spec: a variant of it',
    )
    ap.add_argument("--methods", default="all", help=f"comma-separated of {', '.join(METHODS)}, or 'all'")
    ap.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE_JSON, help="the reference fronts' JSON")
    ap.add_argument("--data", type=Path, default=None, help="YAHPO data folder (default ../shared/data/yahpo)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (simulated time: results do not change)")
    ap.add_argument("--curves", action="store_true", help="also write every run's hypervolume curve into the JSON")
    ap.add_argument(
        "--runs",
        type=Path,
        default=None,
        help="a JSON-lines file each run is appended to as it ends; units already there are not run again",
    )
    ap.add_argument(
        "--max-wall-s",
        type=float,
        default=None,
        help="a Syne Tune run's wall-time cap: one still short of the goal then ends, its time counted as the "
        "simulated seconds it got to (a lower bound), marked cut",
    )
    ap.add_argument(
        "--include",
        type=Path,
        action="append",
        default=[],
        help="an earlier invocation's --json: its runs of this invocation's tasks and seeds are tabulated with "
        "this one's (a unit both have is taken from this one); repeatable",
    )
    args = ap.parse_args(argv)

    tasks = _tasks(args.tasks)
    if args.knobs is not None and (not isinstance(args.knobs, dict) or set(args.knobs) - {"scheduler", "search"}):
        ap.error('--knobs: a JSON object with "scheduler" and/or "search" blocks')
    seeds = [int(s) for s in _csv(args.seeds)]
    methods = available_methods() if args.methods == "all" else _csv(args.methods)
    unknown = [m for m in methods if m not in (*METHODS, *EXTRA)]
    if unknown:
        ap.error(f"--methods: unknown {', '.join(unknown)} (known: {', '.join((*METHODS, *EXTRA))})")
    for m in methods:
        if (why := unavailable(m)) is not None:
            ap.error(f"--methods: {m}: {why}")
    if args.workers < 1 or args.hours <= 0 or args.jobs < 1 or not tasks or not seeds:
        ap.error("--workers and --jobs must be >= 1, --hours > 0, and --tasks / --seeds name at least one")
    refs = references_for(tasks, args.reference, args.data)
    budget_s = args.hours * 3600.0

    def progress(r: MORunResult) -> None:
        if args.runs is not None:
            save_run(args.runs, r)
        got = f"cut at {r.sim_s:,.0f}s" if r.cut else "miss" if r.time_s is None else f"{r.time_s:,.0f}s"
        print(
            f"seed {r.seed} task {r.task} {r.method}: {got} (ended at {r.final_fraction:.3f} of the reference, "
            f"{r.started} trials, {r.wall_s:.1f} s wall)",
            file=sys.stderr,
            flush=True,
        )

    t0 = time.perf_counter()
    before = load_runs(args.runs) if args.runs is not None else []
    runs = run_all(
        tasks, seeds, methods, args.workers, args.hours, refs, args.data, progress, args.jobs, before, args.knobs,
        args.max_wall_s,
    )  # fmt: skip
    here = {(r.method, r.task, r.seed) for r in runs}
    included: list[MORunResult] = []
    for path in args.include:
        for r in runs_from_result(path):
            if r.task in refs and r.seed in seeds and (r.method, r.task, r.seed) not in here:
                here.add((r.method, r.task, r.seed))
                included.append(r)
    runs = runs + included
    table = tabulate(runs, refs, budget_s)
    summary = summarize(table)
    shown = list(dict.fromkeys([*methods, *(r.method for r in included)]))
    print_table(table, summary, budget_s, shown)
    out: dict[str, Any] = {
        "tasks": table,
        "workers": args.workers,
        "hours": args.hours,
        "seeds": seeds,
        "methods": shown,
        "included": [str(p) for p in args.include],
        "goal_fraction": GOAL_FRACTION,
        "knobs": args.knobs,
        "summary": summary,
        "wall_s": round(time.perf_counter() - t0, 1),
        "command": "python bench/lcbench_mo.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    if args.curves:
        out["curves"] = [{**asdict(r), "curve": [[round(t, 2), round(f, 5)] for t, f in r.curve]} for r in runs]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.json}")
    return out


if __name__ == "__main__":
    main()
