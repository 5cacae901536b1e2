"""Time to target on YAHPO Gym's LCBench surrogate, in simulated time: Quanta against Syne Tune.

Every system searches the same LCBench task (7 hyperparameters, 52 epochs; each epoch reports
val_accuracy at the surrogate's cumulative training time) with the same number of workers and the same
simulated budget, and stops when it reaches the task's hard target:
- Quanta: the real controller, searchers and policies on `SimRuntime` (`quanta.sim`'s `simulate_search`).
  `quanta_default` (the default policy and searcher), `quanta_fifo_random`, `quanta_fifo_tpe`,
  `quanta_gandiva`, `quanta_timeslice`, `quanta_asha`, `quanta_hyperband`; and, named in `--systems` only,
  variants of the default with knobs changed (`VARIANTS`), kept by name for the runs logged with them.
- Syne Tune: its simulator backend over a Blackbox wrapping the same surrogate (`bench/syne_lcbench.py`),
  `syne_random`, `syne_tpe`, `syne_asha`, `syne_hyperband`, `syne_bohb`, ... (see `syne_lcbench.METHODS`),
  on Syne Tune's own documented clock (the tuner's real decision time charged, results looked for every
  5 s); named in `--systems` only, `syne_<method>_exact` runs it on Quanta's clock (decisions free,
  looked for every 0.1 s: `syne_lcbench.CLOCKS`).
- Peers in an environment of their own (`bench/peer_env.py`, built by `make peers-old`), named in
  `--systems` only, on the exact clock: `syne_mobster_exact`, `syne_hypertune_exact`,
  `syne_dyhpo_exact` (Syne Tune 0.14.2) and `dehb_exact` (DEHB 0.1.2, `bench/dehb_lcbench.py`); each
  run is a subprocess of that environment's Python.

Targets per task come from `bench/results/lcbench_targets.json` (`bench/lcbench_targets.py`). Runs are
interleaved per seed (seed 0: every task and system, then seed 1, ...). A run's time to a target is the
simulated seconds to its first report at or above it; a run that never gets there counts the whole
budget and is marked as a miss.

    python bench/lcbench.py --tasks 3945,34539 --seeds 0,1,2 --workers 4 --hours 8 --json out.json --plots DIR

Prints a table per target and writes JSON shaped {"tasks": {"<id>": {"targets": {"medium", "hard"},
"systems": {"<name>": {"medium": {"runs_s", "missed", "median_s", "misses", "median_censored"},
"hard": {...}, "wall_s": [...], "cpu_s": [...]}}, "curves" (with --curves): {"<name>": [[[t, best], ...] per seed]}}},
"workers", "hours", "seeds", "summary": {"hard"/"medium": {"median_ratio_best_syne", "tasks_won_vs_best_syne", "tasks",
"median_ratio_best_peer", "tasks_won_vs_best_peer", "median_ratio_fifo_random", "median_ratio_vs": {system: ..},
"wins_vs": {system: ..}, "tasks_won_by": {system: ..}}, "goals": {...}}}. A ratio is peer's median time /
quanta_default's (above 1: Quanta is faster); "best_syne" takes the best Syne Tune system per task, "best_peer"
the best system that is not Quanta's (DEHB too). `--plots DIR` writes `lcbench_best_so_far.png` (median
best-so-far over the seeds, a few tasks) and `lcbench_ratios.png` (per-task ratio of the best Syne Tune method
to Quanta).
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

from bench.peer_env import PEER_SYSTEMS  # noqa: E402
from bench.reach import improvements  # noqa: E402

TARGETS = ("medium", "hard")
REFERENCE = "quanta_default"
EXACT_SUFFIX = "_exact"  # syne_<method>_exact: Syne Tune on the exact clock (bench/syne_lcbench.py, CLOCKS)
FIFO_RANDOM = "quanta_fifo_random"

# Quanta systems: (policy, algorithm); "default" / None = what a spec that names neither gets.
QUANTA: dict[str, tuple[str, str | None]] = {
    "quanta_default": ("default", None),
    "quanta_fifo_random": ("fifo", "random"),
    "quanta_fifo_tpe": ("fifo", "tpe"),
    "quanta_gandiva": ("gandiva", "tpe"),
    "quanta_timeslice": ("timeslice", "tpe"),
    "quanta_asha": ("asha", "bohb"),
    "quanta_hyperband": ("hyperband", "bohb"),
}

# BOHB's random asks (SearchAlgoSpec.random_fraction) were 0 until 2026-11-25: the variants logged before
# then that are still compared by name keep that.
_RF0: dict[str, Any] = {"random_fraction": 0.0}

# Variants of the default measured against it (named with --systems; not in 'all'): name -> (policy,
# algorithm, scheduler knobs, search knobs), the knobs merged over the spec's blocks. The screen in
# bench/results/lcbench_screen*.json ran them over the default of its day (first rung 2 epochs).
# Every entry of this table passes through _as_logged below, which turns rung_check off unless the entry
# names it: a new variant of today's default is added after that mapping (as quanta_level_rf33 is).
VARIANTS: dict[str, tuple[str, str | None, dict[str, Any], dict[str, Any]]] = {
    "quanta_asha_kill": ("default", None, {"mode": "kill"}, {}),
    "quanta_asha_random": ("default", "random", {}, {}),
    "quanta_asha_eta4": ("default", None, {"eta": 4.0}, {"eta": 4.0}),
    # The first rung at 1 (52 / 3**4, the default's since 2026-11-24) and 2 epochs, under the promotion rule:
    "quanta_asha_r1": ("default", None, {"min_steps": 1, "rule": "promotion"}, {"min_steps": 1, **_RF0}),
    "quanta_asha_r2": ("default", None, {"min_steps": 2, "rule": "promotion"}, {"min_steps": 2, **_RF0}),
    "quanta_bohb_n10": ("default", None, {}, {"n_startup": 10}),
    "quanta_bohb_mp4": ("default", None, {}, {"min_points": 4}),
    "quanta_asha_rent": ("default", None, {"rule": "rent"}, _RF0),  # the default of 2026-11-25 before the random third
    "quanta_asha_promotion": ("default", None, {"rule": "promotion"}, _RF0),  # the default before (Li et al.'s rule)
    "quanta_bohb_rf33": ("default", None, {}, {"random_fraction": 1 / 3}),  # BOHB's third of random asks (the default)
    "quanta_bohb_rf0": ("default", None, {}, _RF0),  # no random asks (the default before 2026-11-25)
    "quanta_promotion_rf33": ("default", None, {"rule": "promotion"}, {}),  # Li et al.'s rule, BOHB's random third
    # Hyperband's hedge against slow bloomers (brackets whose first rung is later), 3 and 4 brackets:
    "quanta_hb3": ("hyperband", None, {"brackets": 3}, {}),
    "quanta_hb4": ("hyperband", None, {"brackets": 4}, {}),
    # The first rung later (2 or 3 epochs instead of 52 / 3**4 = 1), over the default's other knobs:
    "quanta_r2": ("default", None, {"min_steps": 2}, {"min_steps": 2}),
    "quanta_r3": ("default", None, {"min_steps": 3}, {"min_steps": 3}),
    # ... on each trial's report at each rung rather than the best-so-far records
    "quanta_rung_check_rep50": ("default", None, {"rung_check": 0.5, "rung_check_on": "report"}, {}),
    "quanta_rung_check_rep50_p10": (
        "default",
        None,
        {"rung_check": 0.5, "rung_check_on": "report", "rung_check_pairs": 10},
        {},
    ),  # fmt: skip
    "quanta_rung_check_rep30_p10": (
        "default",
        None,
        {"rung_check": 0.3, "rung_check_on": "report", "rung_check_pairs": 10},
        {},
    ),  # fmt: skip
    # TPE's gamma (SearchAlgoSpec.gamma; HyperOpt's 0.25 the default): more trials in the "good" density.
    "quanta_bohb_g50": ("default", None, {}, {"gamma": 0.5}),
    "quanta_bohb_g100": ("default", None, {}, {"gamma": 1.0}),
    "quanta_bohb_g200": ("default", None, {}, {"gamma": 2.0}),
    # The default before rung_check on the reports became it (2026-11-25): every rung judges.
    "quanta_no_rung_check": ("default", None, {"rung_check": None}, {}),
}


def _as_logged(knobs: dict[str, Any]) -> dict[str, Any]:
    """The variants above were logged while rung_check was off by default, and a variant that set it
    took the records ("best") after 20 pairs: they keep exactly that now that the default checks the
    reports after 10 pairs (AshaKnobs), so a name means what its logged runs ran."""
    if "rung_check" not in knobs:
        return {"rung_check": None, **knobs}
    return {"rung_check_on": "best", "rung_check_pairs": 20, **knobs}


def _searched_as_logged(knobs: dict[str, Any]) -> dict[str, Any]:
    """...and with BOHB's level and random third (the searcher's defaults when they were logged) unless
    they set them, so that a change of default keeps their meaning."""
    return {"rank": "level", "random_fraction": 1 / 3, **knobs}


VARIANTS = {name: (p, a, _as_logged(sk), _searched_as_logged(k)) for name, (p, a, sk, k) in VARIANTS.items()}

# BOHB's level with its random third over today's default scheduler: today's default searcher, named with
# its knobs pinned so that its logged runs (the screen by workers) keep their meaning if the default moves.
VARIANTS["quanta_level_rf33"] = ("default", None, {}, {"rank": "level", "random_fraction": 1 / 3})
# The freeze-thaw policy (`scheduler.policy: freeze_thaw`, its knobs' defaults) with the default searcher:
# the candidate for the default, tuned on the suite's even-indexed tasks and to be confirmed on the others.
VARIANTS["quanta_freeze_thaw"] = ("freeze_thaw", None, {}, {})
# BOHB's model asks by a GP's expected improvement at the level (quanta.search.gp_proposal; the default since
# 2026-12-03), and by TPE's density ratio (the default before):
VARIANTS["quanta_gp"] = ("default", None, {}, {"acquisition": "gp"})
VARIANTS["quanta_acq_tpe"] = ("default", None, {}, {"acquisition": "tpe"})

# The goals quanta_default is held to at the hard target (docs/benchmarks.md, LCBench).
GOAL_RATIO_BEST_SYNE = 1.3
GOAL_WIN_FRACTION = 2 / 3
GOAL_RATIO_FIFO_RANDOM = 7.0


@dataclass
class Run:
    """One search: a system on a task with a seed. `time_to_target` maps target name to simulated
    seconds (None = never reached); `best_so_far` is [(simulated s, best val_accuracy so far)]; `cpu_s`
    the CPU seconds the run took (its process's and its subprocesses'; 0 = not measured), which a busy
    machine does not inflate as it does `wall_s`."""

    system: str
    task: str
    seed: int
    time_to_target: dict[str, float | None]
    best_so_far: list[tuple[float, float]] = field(default_factory=list)
    wall_s: float = 0.0
    sim_s: float = 0.0
    cpu_s: float = 0.0


# ---- accounting (pure) ----------------------------------------------------------------------------


def target_stats(times: Sequence[float | None], budget_s: float) -> dict[str, Any]:
    """Time-to-target over the seeds of one system: a miss (None) counts the whole budget and is marked.
    `median_censored` says the median is a lower bound (half or more of the runs missed)."""
    if not times:
        raise ValueError("times: no runs")
    runs = [budget_s if t is None else float(t) for t in times]
    missed = [t is None for t in times]
    misses = sum(missed)
    return {
        "runs_s": runs,
        "missed": missed,
        "median_s": float(statistics.median(runs)),
        "misses": misses,
        "median_censored": misses > 0 and 2 * misses >= len(runs),
    }


def tabulate(runs: Sequence[Run], targets: dict[str, dict[str, float]], budget_s: float) -> dict[str, Any]:
    """The JSON's "tasks" block from the runs (any order): per task its targets and, per system, the
    target stats over its seeds (in seed order), its wall seconds and its best-so-far curves."""
    by: dict[str, dict[str, list[Run]]] = {}
    for r in runs:
        by.setdefault(r.task, {}).setdefault(r.system, []).append(r)
    tasks: dict[str, Any] = {}
    for task, systems in by.items():
        block: dict[str, Any] = {"targets": {k: targets[task][k] for k in TARGETS}, "systems": {}, "curves": {}}
        for system, rs in systems.items():
            rs = sorted(rs, key=lambda r: r.seed)
            entry: dict[str, Any] = {k: target_stats([r.time_to_target.get(k) for r in rs], budget_s) for k in TARGETS}
            entry["seeds"] = [r.seed for r in rs]
            entry["wall_s"] = [round(r.wall_s, 3) for r in rs]
            entry["cpu_s"] = [round(r.cpu_s, 3) for r in rs]
            block["systems"][system] = entry
            block["curves"][system] = [[[round(t, 2), round(v, 6)] for t, v in r.best_so_far] for r in rs]
        tasks[task] = block
    return tasks


def _ratio(peer_s: float, ref_s: float) -> float:
    return peer_s / ref_s if ref_s > 0 else float("inf")


def summarize(tasks: dict[str, Any], reference: str = REFERENCE) -> dict[str, Any]:
    """Median over tasks of each system's median time / the reference's, the reference's wins (strictly
    faster medians) against each system and against the best Syne Tune method per task, and how many
    tasks each system wins outright (ties count for every tied system)."""
    out: dict[str, Any] = {}
    for target in TARGETS:
        ratios: dict[str, list[float]] = {}
        wins: dict[str, int] = {}
        best_syne: list[float] = []
        best_syne_wins = 0
        best_peer: list[float] = []
        best_peer_wins = 0
        won_by: dict[str, int] = {}
        n = 0
        for block in tasks.values():
            systems = block["systems"]
            if reference not in systems:
                continue
            n += 1
            ref = systems[reference][target]["median_s"]
            for name, entry in systems.items():
                if name == reference:
                    continue
                peer = entry[target]["median_s"]
                ratios.setdefault(name, []).append(_ratio(peer, ref))
                wins[name] = wins.get(name, 0) + (ref < peer)
            syne = [e[target]["median_s"] for name, e in systems.items() if name.startswith("syne_")]
            if syne:
                best_syne.append(_ratio(min(syne), ref))
                best_syne_wins += ref < min(syne)
            peers = [e[target]["median_s"] for name, e in systems.items() if not name.startswith("quanta")]
            if peers:
                best_peer.append(_ratio(min(peers), ref))
                best_peer_wins += ref < min(peers)
            fastest = min(e[target]["median_s"] for e in systems.values())
            for name, e in systems.items():
                if e[target]["median_s"] == fastest:
                    won_by[name] = won_by.get(name, 0) + 1
        out[target] = {
            "tasks": n,
            "median_ratio_best_syne": statistics.median(best_syne) if best_syne else None,
            "tasks_won_vs_best_syne": best_syne_wins if best_syne else None,
            "median_ratio_best_peer": statistics.median(best_peer) if best_peer else None,
            "tasks_won_vs_best_peer": best_peer_wins if best_peer else None,
            "median_ratio_fifo_random": statistics.median(ratios[FIFO_RANDOM]) if FIFO_RANDOM in ratios else None,
            "median_ratio_vs": {k: statistics.median(v) for k, v in sorted(ratios.items())},
            "wins_vs": dict(sorted(wins.items())),
            "tasks_won_by": dict(sorted(won_by.items())),
        }
    hard = out["hard"]
    out["goals"] = {
        "ratio_best_syne_hard": {
            "goal": GOAL_RATIO_BEST_SYNE,
            "value": hard["median_ratio_best_syne"],
            "met": hard["median_ratio_best_syne"] is not None
            and hard["median_ratio_best_syne"] >= GOAL_RATIO_BEST_SYNE,
        },
        "tasks_won_vs_best_syne_hard": {
            "goal": f">= {GOAL_WIN_FRACTION:.3f} of {hard['tasks']}",
            "value": hard["tasks_won_vs_best_syne"],
            "met": hard["tasks_won_vs_best_syne"] is not None
            and hard["tasks_won_vs_best_syne"] >= GOAL_WIN_FRACTION * hard["tasks"],
        },
        "ratio_fifo_random_hard": {
            "goal": GOAL_RATIO_FIFO_RANDOM,
            "value": hard["median_ratio_fifo_random"],
            "met": hard["median_ratio_fifo_random"] is not None
            and hard["median_ratio_fifo_random"] >= GOAL_RATIO_FIFO_RANDOM,
        },
    }
    return out


# ---- running --------------------------------------------------------------------------------------


def run_quanta(
    system: str, task: str, seed: int, workers: int, hours: float, targets: dict[str, float], data: Path | None
) -> Run:
    from quanta.sim.search_bench import simulate_search

    policy, algorithm, scheduler, search = quanta_system(system)
    t0 = time.perf_counter()
    res = simulate_search(
        task,
        policy,
        algorithm,
        workers,
        hours,
        seed,
        targets={k: targets[k] for k in TARGETS},
        stop_at=targets["hard"],
        data_path=None if data is None else str(data),
        scheduler=scheduler,
        search=search,
    )
    wall = time.perf_counter() - t0
    return Run(
        system,
        task,
        seed,
        {k: res.time_to_target.get(k) for k in TARGETS},
        improvements((float(t), float(v)) for t, v in res.best_so_far),
        wall,
        float(res.sim_seconds),
    )


def run_syne(
    system: str, task: str, seed: int, workers: int, hours: float, targets: dict[str, float], data: Path | None
) -> Run:
    from bench.syne_lcbench import run_syne_method

    method, clock = syne_method(system)
    t0 = time.perf_counter()
    res = run_syne_method(
        method,
        task,
        workers=workers,
        hours=hours,
        seed=seed,
        targets={k: targets[k] for k in TARGETS},
        stop_at=targets["hard"],
        data_path=data,
        clock=clock,
    )
    wall = time.perf_counter() - t0
    return Run(
        system, task, seed, {k: res.time_to_target.get(k) for k in TARGETS}, res.best_so_far, wall, res.sim_seconds
    )


def run_in_peer_env(
    system: str, task: str, seed: int, workers: int, hours: float, targets: dict[str, float], data: Path | None
) -> Run:
    """A `bench/peer_env.py` system: one run in the peer environment's Python; its wall seconds include
    that interpreter's start and imports (what the unit costs the table)."""
    from bench.peer_env import run_peer

    t0 = time.perf_counter()
    res = run_peer(system, task, seed, workers, hours, {k: targets[k] for k in TARGETS}, targets["hard"], data)
    wall = time.perf_counter() - t0
    return Run(
        system, task, seed, {k: res.time_to_target.get(k) for k in TARGETS}, res.best_so_far, wall, res.sim_seconds
    )


def quanta_system(name: str) -> tuple[str, str | None, dict[str, Any], dict[str, Any]]:
    """(policy, algorithm, scheduler knobs, search knobs) of a Quanta system or variant; KeyError if neither."""
    if name in VARIANTS:
        return VARIANTS[name]
    policy, algorithm = QUANTA[name]
    return policy, algorithm, {}, {}


def syne_method(system: str) -> tuple[str, str]:
    """(Syne Tune method, clock) of a `syne_<method>` (Syne Tune's clock) or `syne_<method>_exact` system."""
    method = system.removeprefix("syne_")
    if method.endswith(EXACT_SUFFIX):
        return method.removesuffix(EXACT_SUFFIX), "exact"
    return method, "syne"


def all_systems(exact_clock: bool = False) -> list[str]:
    """Every system `--systems all` runs (Syne Tune's on its own documented clock); with `exact_clock`,
    also Syne Tune's methods on the exact clock and the peer environment's systems (named in
    `--systems` only)."""
    from bench.syne_lcbench import METHODS

    suffixes = ("", EXACT_SUFFIX) if exact_clock else ("",)
    peers = list(PEER_SYSTEMS) if exact_clock else []
    return [*QUANTA, *(f"syne_{m}{x}" for x in suffixes for m in METHODS), *peers]


def run_all(
    tasks: Sequence[str],
    seeds: Sequence[int],
    systems: Sequence[str],
    workers: int,
    hours: float,
    targets: dict[str, dict[str, float]],
    data: Path | None,
    on_run: Callable[[Run], None] = lambda r: None,
    jobs: int = 1,
    done: Sequence[Run] = (),
    run_missing: bool = True,
) -> list[Run]:
    """Every (seed, task, system), interleaved per seed. With `jobs` > 1 the runs go to that many
    worker processes (the clock is simulated, so a run's result does not depend on what runs beside
    it; only Syne Tune adds its tuner's real processing time, milliseconds, to its clock): `on_run`
    sees them as they end, the result lists them in unit order. Units already in `done` (same system,
    task and seed) are not run again; with `run_missing` False nothing is run (only `done` comes back)."""
    have = {(r.system, r.task, r.seed): r for r in done}
    units = [(system, task, seed) for seed in seeds for task in tasks for system in systems]
    runs: list[Run] = [have[u] for u in units if u in have]
    todo = [u for u in units if u not in have]
    args = [(system, task, seed, workers, hours, targets[task], data) for system, task, seed in todo]
    if not args or not run_missing:
        return runs
    if jobs <= 1:
        for a in args:
            runs.append(_run_one(*a))
            on_run(runs[-1])
        return runs
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawn: each worker imports onnxruntime and torch-free code afresh (no forked thread pools).
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        # Each run is reported (and saved, with --runs) as soon as it ends, not behind a slower one.
        for fut in as_completed([pool.submit(_run_one, *a) for a in args]):
            r = fut.result()
            runs.append(r)
            on_run(r)
    order = {u: i for i, u in enumerate(units)}
    return sorted(runs, key=lambda r: order[(r.system, r.task, r.seed)])


def _run_one(
    system: str, task: str, seed: int, workers: int, hours: float, targets: dict[str, float], data: Path | None
) -> Run:
    if system in QUANTA.keys() | VARIANTS.keys():
        runner = run_quanta
    elif system in PEER_SYSTEMS:
        runner = run_in_peer_env
    else:
        runner = run_syne
    cpu0 = _cpu_seconds()
    run = runner(system, task, seed, workers, hours, targets, data)
    run.cpu_s = _cpu_seconds() - cpu0
    return run


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its ended subprocesses (a peer environment's run is one)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def save_run(path: Path, r: Run) -> None:
    """Append one run to a JSON-lines file (one object per line; a killed benchmark keeps what it ran)."""
    with path.open("a") as fh:
        fh.write(json.dumps(asdict(r)) + "\n")
        fh.flush()


def load_runs(path: Path) -> list[Run]:
    """The runs of a JSON-lines file written by `save_run` (a missing file: none; a torn last line is
    ignored, the run it was is run again)."""
    if not path.exists():
        return []
    out: list[Run] = []
    for line in path.read_text().splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        d["best_so_far"] = [tuple(p) for p in d.get("best_so_far", [])]
        out.append(Run(**d))
    return out


# ---- output ---------------------------------------------------------------------------------------


def _fmt_s(stats: dict[str, Any]) -> str:
    s = f"{stats['median_s']:,.0f}"
    if stats["median_censored"]:
        s = ">=" + s
    if stats["misses"]:
        s += f" ({stats['misses']} miss)"
    return s


def print_tables(tasks: dict[str, Any], summary: dict[str, Any], budget_s: float) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 160))
    for target in TARGETS:
        names = sorted({n for b in tasks.values() for n in b["systems"]}, key=lambda n: (not n.startswith("quanta"), n))
        t = Table(title=f"simulated seconds to the {target} target, median over seeds (miss = {budget_s:,.0f} s)")
        t.add_column("system")
        for task, block in tasks.items():
            t.add_column(f"{task}\n({block['targets'][target]:.4f})", justify="right")
        t.add_column(f"median ratio\nto {REFERENCE}", justify="right")
        t.add_column(f"{REFERENCE}\nfaster on", justify="right")
        s = summary[target]
        for name in names:
            cells = [_fmt_s(b["systems"][name][target]) if name in b["systems"] else "-" for b in tasks.values()]
            ratio = s["median_ratio_vs"].get(name)
            wins = s["wins_vs"].get(name)
            t.add_row(
                name, *cells, "-" if ratio is None else f"{ratio:.2f}", "-" if wins is None else f"{wins}/{s['tasks']}"
            )
        console.print(t)
        best = s["median_ratio_best_syne"]
        peer = s["median_ratio_best_peer"]
        fifo = s["median_ratio_fifo_random"]
        console.print(
            f"{target}: best Syne Tune / {REFERENCE} median ratio "
            f"{'-' if best is None else f'{best:.2f}'}, {REFERENCE} faster on "
            f"{s['tasks_won_vs_best_syne']}/{s['tasks']} "
            f"tasks; best peer (DEHB too) {'-' if peer is None else f'{peer:.2f}'}, faster on "
            f"{s['tasks_won_vs_best_peer']}/{s['tasks']}; {FIFO_RANDOM} / {REFERENCE} "
            f"{'-' if fifo is None else f'{fifo:.2f}'}; tasks won: {s['tasks_won_by']}"
        )
    for name, g in summary["goals"].items():
        console.print(f"goal {name}: {g['value']} (goal {g['goal']}) {'met' if g['met'] else 'NOT met'}")


def plot(tasks: dict[str, Any], budget_s: float, out_dir: Path, max_tasks: int = 4) -> list[Path]:
    """Two PNGs: median best-so-far over seeds for the first `max_tasks` tasks, and per-task ratios."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    out_dir.mkdir(parents=True, exist_ok=True)
    shown = list(tasks)[:max_tasks]
    fig, axes = plt.subplots(1, len(shown), figsize=(5.5 * len(shown), 4.5), squeeze=False)
    grid = np.geomspace(10.0, budget_s, 300)
    names = sorted({n for t in shown for n in tasks[t]["curves"]}, key=lambda n: (not n.startswith("quanta"), n))
    colors = plt.get_cmap("tab20")
    for ax, task in zip(axes[0], shown, strict=True):
        block = tasks[task]
        for i, name in enumerate(names):
            curves = block["curves"].get(name)
            if not curves:
                continue
            per_seed = []
            for c in curves:
                ts = np.array([p[0] for p in c] or [np.inf])
                vs = np.array([p[1] for p in c] or [np.nan])
                idx = np.searchsorted(ts, grid, side="right") - 1
                per_seed.append(np.where(idx >= 0, vs[np.clip(idx, 0, None)], np.nan))
            med = np.nanmedian(np.array(per_seed), axis=0) if per_seed else None
            if med is not None:
                style = "-" if name.startswith("quanta") else "--"
                lw = 2.5 if name == REFERENCE else 1.2
                ax.step(grid, med, where="post", label=name, color=colors(i % 20), linestyle=style, linewidth=lw)
        for target in TARGETS:
            ax.axhline(block["targets"][target], color="grey", linewidth=0.8, linestyle=":")
        lo = block["targets"]["medium"] - 3 * (block["targets"]["hard"] - block["targets"]["medium"]) - 0.01
        ax.set_ylim(lo, block["targets"]["hard"] + 0.02)
        ax.set_xscale("log")
        ax.set_xlabel("simulated seconds")
        ax.set_ylabel("best val_accuracy so far (median over seeds)")
        ax.set_title(f"LCBench task {task}")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    curves_png = out_dir / "lcbench_best_so_far.png"
    fig.savefig(curves_png, dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(tasks) + 2), 4.5))
    xs = np.arange(len(tasks))
    for j, target in enumerate(TARGETS):
        vals = []
        for block in tasks.values():
            systems = block["systems"]
            syne = [e[target]["median_s"] for n, e in systems.items() if n.startswith("syne_")]
            ref = systems.get(REFERENCE, {}).get(target, {}).get("median_s")
            vals.append(_ratio(min(syne), ref) if syne and ref else np.nan)
        ax.bar(xs + (j - 0.5) * 0.4, vals, width=0.4, label=f"{target} target")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(GOAL_RATIO_BEST_SYNE, color="red", linewidth=0.8, linestyle="--", label=f"goal {GOAL_RATIO_BEST_SYNE}")
    ax.set_yscale("log")
    ax.set_xticks(xs, list(tasks), rotation=60)
    ax.set_ylabel(f"best Syne Tune median time / {REFERENCE}'s")
    ax.set_title("LCBench: time-to-target ratio per task (above 1: Quanta faster)")
    ax.legend()
    fig.tight_layout()
    ratios_png = out_dir / "lcbench_ratios.png"
    fig.savefig(ratios_png, dpi=110)
    plt.close(fig)
    return [curves_png, ratios_png]


def _csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def task_list(s: str) -> list[str]:
    """`--tasks`: comma-separated task ids, where `suite` stands for the 24 tasks of the benchmark and
    `heldout` for LCBench's other ten (`quanta.sim.lcbench.SUITE`, `HELD_OUT`)."""
    from quanta.sim.lcbench import HELD_OUT, SUITE

    named = {"suite": SUITE, "heldout": HELD_OUT}
    return [task for item in _csv(s) for task in named.get(item, (item,))]


def main(argv: Sequence[str] | None = None) -> None:
    from bench.lcbench_targets import DEFAULT_JSON, load_targets, task_targets

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="3945,34539", help="task ids, or `suite` (the 24) / `heldout` (the other ten)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--hours", type=float, default=8.0)
    ap.add_argument("--systems", default="all", help="comma-separated names, or 'all'")
    ap.add_argument("--targets", type=Path, default=DEFAULT_JSON, help="targets JSON (bench/lcbench_targets.py)")
    ap.add_argument("--data", type=Path, default=None, help="YAHPO data folder (default ../shared/data/yahpo)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--runs",
        type=Path,
        default=None,
        help="JSON-lines file of finished runs: appended as runs end; runs already in it are not run again",
    )
    ap.add_argument(
        "--also",
        type=Path,
        action="append",
        default=[],
        help="another runs file, read only: its runs count as done (a unit in --runs wins); repeatable",
    )
    ap.add_argument(
        "--tabulate-only",
        action="store_true",
        help="run nothing: tabulate the runs in --runs; units not there are left out (JSON 'missing')",
    )
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (simulated time: results do not change)")
    ap.add_argument("--plots", type=Path, default=None, help="folder for the two PNGs")
    ap.add_argument(
        "--curves",
        action="store_true",
        help="also write every run's best-so-far curve into the JSON (ten times its size; --plots draws them)",
    )
    args = ap.parse_args(argv)

    tasks = task_list(args.tasks)
    seeds = [int(s) for s in _csv(args.seeds)]
    systems = all_systems() if args.systems == "all" else _csv(args.systems)
    known = [*all_systems(exact_clock=True), *VARIANTS]
    unknown = [s for s in systems if s not in known]
    if unknown:
        ap.error(f"--systems: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    if args.workers < 1 or args.hours <= 0 or args.jobs < 1:
        ap.error("--workers and --jobs must be >= 1 and --hours > 0")
    peer_systems = [s for s in systems if s in PEER_SYSTEMS]
    if peer_systems and not args.tabulate_only:
        from bench.peer_env import missing_reason

        reason = missing_reason()
        if reason is not None:
            ap.error(f"--systems: {', '.join(peer_systems)} need the peer environment: {reason}")
    committed = load_targets(args.targets)
    targets: dict[str, dict[str, float]] = {}
    for task in tasks:
        if task in committed:
            targets[task] = committed[task]
        else:  # e.g. a held-out task: computed the same way, said so
            print(f"task {task}: not in {args.targets}, computing its targets", file=sys.stderr)
            targets[task] = task_targets(task, data_path=args.data)
    budget_s = args.hours * 3600.0

    def progress(r: Run) -> None:
        hit = {k: ("miss" if v is None else f"{v:,.0f}s") for k, v in r.time_to_target.items()}
        cost = f"{r.wall_s:.1f} s wall, {r.cpu_s:.1f} s CPU"
        print(f"seed {r.seed} task {r.task} {r.system}: {hit} ({cost})", file=sys.stderr, flush=True)
        if args.runs is not None and (r.system, r.task, r.seed) not in resumed:
            save_run(args.runs, r)

    done = load_runs(args.runs) if args.runs is not None else []
    resumed = {(r.system, r.task, r.seed) for r in done}
    for extra in args.also:
        if not extra.is_file():
            ap.error(f"--also: no such file: {extra}")
        more = [r for r in load_runs(extra) if (r.system, r.task, r.seed) not in resumed]
        done += more
        resumed |= {(r.system, r.task, r.seed) for r in more}

    t0 = time.perf_counter()
    runs = run_all(
        tasks, seeds, systems, args.workers, args.hours, targets, args.data, progress, args.jobs, done,
        run_missing=not args.tabulate_only,
    )  # fmt: skip
    have = {(r.system, r.task, r.seed) for r in runs}
    missing = [[sy, t, sd] for sd in seeds for t in tasks for sy in systems if (sy, t, sd) not in have]
    if missing:  # only with --tabulate-only: medians over the seeds that ran, said so
        print(f"{len(missing)} units not in {args.runs}, left out: {missing}", file=sys.stderr)
    table = tabulate(runs, targets, budget_s)
    summary = summarize(table)
    print_tables(table, summary, budget_s)
    written = table if args.curves else {t: {k: v for k, v in b.items() if k != "curves"} for t, b in table.items()}
    out = {
        "tasks": written,
        "workers": args.workers,
        "hours": args.hours,
        "seeds": seeds,
        "systems": systems,
        "summary": summary,
        "missing": missing,
        "wall_s": round(time.perf_counter() - t0, 1),
        "command": "python bench/lcbench.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(out, indent=1) + "\n")
        tmp.replace(args.json)
        print(f"wrote {args.json}")
    if args.plots:
        for p in plot(table, budget_s, args.plots):
            print(f"wrote {p}")


if __name__ == "__main__":
    main()
