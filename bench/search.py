"""Time to target, side by side in one run: Quanta's policies against Optuna and Ray Tune.

Every system runs the same trainable code (examples/mnist1d.py by default) on the same number of
CPU devices with the same trial budget. Systems are interleaved per seed (seed 0: every system, then
seed 1, ...), so a machine that gets noisy hurts all of them alike. A search ends when the hard target
is reached or its budget (trials or --max-seconds) is spent; the wall time to the first report reaching
each target is read from a per-run log of every report. A run that never reached a target is marked a
miss and counts as the time cap (--max-seconds, or its wall time if longer), also when it ended sooner
for want of trials: a user who wants the target would have had to go on, so a search that gives up
early is not faster than one that gets there. Start-up (process pools, Ray's cluster) counts: users
wait for it.

Systems:
- Quanta: `fifo`, `timeslice`, `gandiva` (TPE), `asha` (pause-don't-kill ASHA + multi-fidelity TPE),
  `hyperband` (3 brackets of pause ASHA + multi-fidelity TPE), `default` (what a spec that names no
  policy and no algorithm gets), and variants of the default with knobs pinned (`QUANTA`), kept by name
  for the runs logged with them.
- `optuna`: TPESampler + SuccessiveHalvingPruner; `optuna_hb`: TPESampler + HyperbandPruner; both
  with one *process* per device on a shared JournalStorage (Optuna's documented parallel setup).
- `ray`: Ray Tune HyperOptSearch + ASHAScheduler, one CPU per trial, `reuse_actors`.
- `ray_bohb`: Ray Tune's BOHB, TuneBOHB + HyperBandForBOHB (needs `hpbandster` and `ConfigSpace`), trials
  checkpointed at each report so that a trial paused at a rung resumes where it stopped.
Optuna's TPE is multivariate with the constant liar, grouped on a conditional space (`peers.tpe_sampler`).
Peers run the trainable through `bench.peers.AdapterTrial`, the SDK's own `Trial` without a controller,
so trainables written against Lightning or the Hugging Face Trainer (`quanta.integrations`) run too.

    python bench/search.py --systems default,fifo,optuna,optuna_hb,ray --seeds 14,15,16,17,18,19,20 \
        --targets 0.85,0.92,0.95 --max-seconds 300 --json bench/results/search_mnist1d.json

A benchmark longer than one sitting (the long workload: 7 seeds of 600 s searches) keeps a log of every
run with `--runs PATH.jsonl` and, run again with the same arguments, reads those runs back and goes on
with the rest, still in the same per-seed order:

    python bench/search.py --spec examples/mnist1d_long.yaml --systems default,ray --seeds 0,1,2,3,4,5,6 \
        --targets 0.966,0.972,0.976 --max-seconds 600 --runs bench/results/search_mnist1d_long_runs.jsonl \
        --json bench/results/search_mnist1d_long.json

`--suite` races every workload of `bench/live_suite.py` (or `--workloads a,b`) in turn, each with its
spec, trial budget, time cap and targets (`bench/results/targets_<workload>.json`, from
`bench/choose_targets.py --suite`), systems interleaved per seed within a workload; it writes
`OUT_DIR/search_<workload>.json` for each and `OUT_DIR/suite.json` (default bench/results/suite/), and
prints the summary: per workload and target the default's median seconds and device-seconds, the best
peer's, and the ratio best peer / default; overall the geometric mean of the ratios and how many
workloads meet 1.3x at medium and hard (and 1x at easy). With `--runs` a suite resumes where it stopped:

    python bench/search.py --suite --systems default,optuna,optuna_hb,ray,ray_bohb --seeds 0,1,2,3,4,5,6,7,8,9 \
        --runs bench/results/suite/runs.jsonl

Prints a table per target (median, quartiles, hits, device-seconds, and each Quanta system's speed-up
over each peer) and writes JSON shaped {"workload", "targets", "systems": {name: {target: {"median_s",
"q1_s", "q3_s", "runs_s", "reached", "device_s_median"}, "wall_s": [per run], "reports": [per run]}},
"ratios": ...}: `wall_s` and `reports` are what each whole run cost (its wall time, to the hard target,
the end of its trials or the cap; the reports its trials made). Device-seconds are the
devices a system holds times the seconds to the target: every system holds all devices for its whole
search. Quanta systems run as `quanta run` processes, timed from their launch, and also get
`systems.<name>.start_to_first_step_s`: the median wall time from that launch to the end of the first
trial's first mini-batch (see `run_quanta`). Every system gets `systems.<name>.start_to_first_report_s`:
the median wall time from its launch to its first report of the metric, the one start measured alike
for Quanta and the peers; Quanta systems also `systems.<name>.controller_cpu_share`, the median CPU of
the `quanta run` process itself (not its trials) from the first report to its end, in cores.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from quanta.spec import SearchSpec, load_spec, parse_spec  # noqa: E402


def _first_rung(steps: int, rule: str | None = "promotion") -> dict[str, Any]:
    """Pause ASHA + bohb with the first rung (policy and searcher levels alike) at `steps`, under `rule`
    (Li et al.'s promotion, the default when the first of these runs were logged, before `rent`; None:
    the default rule)."""
    scheduler: dict[str, Any] = {"policy": "asha", "min_steps": steps}
    if rule is not None:
        scheduler["rule"] = rule
    return {"scheduler": scheduler, "search": {"algorithm": "bohb", "min_steps": steps}}


# Spec overrides per Quanta system (merged over the workload's spec; `default` changes nothing but the
# policy and algorithm, which it leaves to the spec's defaults).
QUANTA: dict[str, dict[str, Any]] = {
    "fifo": {"scheduler": {"policy": "fifo"}, "search": {"algorithm": "tpe"}},
    "timeslice": {"scheduler": {"policy": "timeslice"}, "search": {"algorithm": "tpe"}},
    "gandiva": {"scheduler": {"policy": "gandiva"}, "search": {"algorithm": "tpe"}},
    "asha": {"scheduler": {"policy": "asha"}, "search": {"algorithm": "bohb"}},
    "asha_kill": {"scheduler": {"policy": "asha", "mode": "kill"}, "search": {"algorithm": "bohb"}},
    # A thin rung's best goes on once it has waited as long as its next rung costs (AshaKnobs.rule): the
    # default since 2026-11-25; kept by name for the logged runs. `asha_promotion`: the default before
    # (Li et al.'s promotion alone: the first trial at a rung waits for eta - 1 more).
    # Both without BOHB's random asks, as they were logged (random_fraction 0 until 2026-11-25).
    "asha_rent": {
        "scheduler": {"policy": "asha", "rule": "rent"},
        "search": {"algorithm": "bohb", "random_fraction": 0},
    },
    "asha_promotion": {
        "scheduler": {"policy": "asha", "rule": "promotion"},
        "search": {"algorithm": "bohb", "random_fraction": 0},
    },
    # BOHB's third of random asks after the start-up (SearchAlgoSpec.random_fraction; the default since
    # 2026-11-25), and the default before it (none):
    "bohb_rf33": {"scheduler": {"policy": "asha"}, "search": {"algorithm": "bohb", "random_fraction": 1 / 3}},
    "bohb_rf0": {"scheduler": {"policy": "asha"}, "search": {"algorithm": "bohb", "random_fraction": 0}},
    "hyperband": {"scheduler": {"policy": "hyperband", "brackets": 3}, "search": {"algorithm": "bohb"}},
    "default": {"scheduler": {}, "search": {}},
    # Once the search makes no more trials, its held trials go on lowest rung first (AshaKnobs.tail_order;
    # the default since 2026-12-02), and the default before it (highest rung first):
    "tail_lowest": {"scheduler": {"tail_order": "lowest"}, "search": {}},
    "tail_highest": {"scheduler": {"tail_order": "highest"}, "search": {}},
    # BOHB's model asks by TPE's density ratio or by a GP's expected improvement (SearchAlgoSpec.acquisition):
    "acq_tpe": {"scheduler": {}, "search": {"acquisition": "tpe"}},
    "acq_gp": {"scheduler": {}, "search": {"acquisition": "gp"}},
    # The default with rung_check on each rung's own report (AshaKnobs.rung_check_on; off by default): a rung
    # whose ranking of 10 trials correlates below 0.5 with the next rung's is passed over. LCBench's
    # `quanta_rung_check_rep50_p10`.
    "rung_check_rep50_p10": {
        "scheduler": {"rung_check": 0.5, "rung_check_on": "report", "rung_check_pairs": 10},
        "search": {},
    },
    "level_rf0": {"scheduler": {}, "search": {"random_fraction": 0}},  # the control: BOHB's level, no random third
    # The default before just-in-time trials (all of --parallelism alive; docs/benchmarks.md):
    "asha_p8": {"scheduler": {"policy": "asha", "lookahead": None}, "search": {"algorithm": "bohb"}},
    # The first rung at mnist1d's first evaluation (50 steps) rather than max_steps / eta**3 (74, judged at 100):
    "asha_r50": _first_rung(50),
    # The first rung later on the long workload (1,000 of 10,000 steps, near max_steps / eta**2, rather than 370):
    "asha_r1000": _first_rung(1000),
    # The default with the first rung at max_steps / eta**3 (one factor of eta later) on mnist1d (2,000 steps:
    # 74, judged at 100) and on the longer workload (10,000: 370, judged at 500); LCBench's `quanta_r2`:
    "first74": _first_rung(74, rule=None),
    "first370": _first_rung(370, rule=None),
    # One rung more on MNIST-1D (first at max_steps / eta**4 = 25 steps, judged at the first evaluation, 50;
    # the later ones judged at the eta**3 rungs' reports): LCBench's `quanta_asha_r1`. The default since
    # 2026-11-24 (`quanta.search.fidelity.default_first_rung`); kept by name for the logged runs.
    "asha_r25": _first_rung(25),
    # The same on the long workload (max_steps / eta**4 = 123 of 10,000 steps, judged at the first evaluation,
    # 250; the later rungs, 369, 1,107 and 3,321, are judged at the same reports as eta**3's): the default now.
    "asha_r123": _first_rung(123),
    # The default before that (textbook ASHA's max_steps / eta**3): 74 of MNIST-1D's steps, 370 of the long's.
    "asha_r74": _first_rung(74),
    "asha_r370": _first_rung(370),
    # The first rung at the long workload's first evaluation (250 steps, judged there, not at 500):
    "asha_r250": _first_rung(250),
    # The default of the fourth 7-seed run (2026-11-24 afternoon, before the first rung moved to eta**4,
    # `rent`, BOHB's random third and rung_check), pinned on the long workload: promotion, first rung 370.
    "default_nov24_long": {
        "scheduler": {"policy": "asha", "rule": "promotion", "min_steps": 370},
        "search": {"algorithm": "bohb", "min_steps": 370, "random_fraction": 0},
    },
}
# Every ASHA/Hyperband system above but `default` and `rung_check_rep50_p10` was logged while rung_check
# was off by default (until 2026-11-25): they keep it off, so a name means what its runs ran.
# Every system that uses BOHB's searcher ranks by BOHB's level with a random third of asks unless it says
# otherwise (the defaults when they were logged; pinned so that a change of default keeps their meaning).
for _name, _override in QUANTA.items():
    _asha = _override["scheduler"].get("policy") in ("asha", "hyperband")
    if _asha and _name not in ("default", "rung_check_rep50_p10"):
        _override["scheduler"].setdefault("rung_check", None)
    if _name != "default" and _override["search"].get("algorithm", "bohb") == "bohb":
        _override["search"].setdefault("rank", "level")
        _override["search"].setdefault("random_fraction", 1 / 3)
PEERS = ("optuna", "optuna_hb", "ray", "ray_bohb")


def workload_spec(
    path: Path,
    system: str,
    seed: int,
    trials: int,
    max_steps: int | None,
    hard: float,
    max_seconds: float,
    parallelism: int,
) -> SearchSpec:
    base = load_spec(path).model_dump(mode="json", exclude_defaults=False)
    base["seed"] = seed
    base["budget"] = {**base["budget"], "max_trials": trials, "max_seconds": max_seconds, "stop_on_target": True}
    if max_steps:
        base["budget"]["max_steps"] = max_steps
    base["metric"] = {**base["metric"], "target": hard}
    raw = load_spec(path).model_dump(mode="json")
    keep = {k: raw["scheduler"][k] for k in ("quantum_s",) if k in raw["scheduler"]}
    override = QUANTA.get(system, QUANTA["fifo"])  # peers read only the space, metric and budget
    base["scheduler"] = {**keep, **override["scheduler"]}
    base["search"] = {"n_startup": raw["search"]["n_startup"], **override["search"]}
    base["parallelism"] = parallelism
    return parse_spec(base)


def _own_cpu_s(proc: Any) -> float | None:
    """CPU seconds the `psutil.Process` itself has used (user + system, its children not counted); None
    once it is gone."""
    import psutil

    try:
        times = proc.cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


def run_quanta(
    spec: SearchSpec,
    devices: int,
    log_path: str,
    workdir: str,
    timeout_s: float,
    measures: dict[str, float] | None = None,
) -> tuple[float | None, int]:
    """Run the search as a user does, `quanta run SPEC` in a new process (from the repository root, as
    the examples expect), and append its reports to `log_path`. Returns the start to first step: wall
    seconds from launching that process to the end of the first trial's first mini-batch, read from the
    first report at step 0 (mnist1d reports step 0; its evaluation afterwards makes the figure a little
    pessimistic), or None if no trial reported step 0; and the exit code. With `measures`, adds to it
    `controller_cpu_share`: the CPU the `quanta run` process itself (the controller, not its trials)
    used from its first report to its end, per wall second, sampled every 0.1 s (psutil)."""
    import psutil

    from quanta.db.store import Store

    spec_path = Path(workdir) / "spec.json"
    spec_path.write_text(spec.model_dump_json())
    db = f"sqlite:///{workdir}/q.db"
    cmd = [sys.executable, "-m", "quanta.cli", "run", str(spec_path), "--devices", f"cpu:{devices}", "--db", db]
    t0 = time.time()
    samples: list[tuple[float, float]] = []  # (wall time, the process's CPU seconds)
    with open(Path(workdir) / "quanta.out", "w") as out:
        proc = subprocess.Popen([*cmd, "--workdir", f"{workdir}/.quanta"], cwd=ROOT, stdout=out, stderr=out)
        watched = psutil.Process(proc.pid)
        while proc.poll() is None and time.time() - t0 < timeout_s:
            cpu = _own_cpu_s(watched)
            if cpu is not None:
                samples.append((time.time(), cpu))
            time.sleep(0.1)
        if proc.poll() is None:
            proc.kill()  # its template sees the closed connection and stops the trials
        proc.wait()
    store = Store(db)
    reports = [r for s in store.searches() if s.id is not None for r in store.search_reports(s.id)]
    with open(log_path, "a") as fh:
        for r in reports:
            if r.objective is not None:
                fh.write(f"{r.at:.6f} {r.objective!r}\n")
    first = min((r.at for r in reports if r.step == 0), default=None)
    first_report = min((r.at for r in reports), default=None)
    after = [(t, c) for t, c in samples if first_report is not None and t >= first_report]
    if measures is not None and len(after) > 1 and after[-1][0] > after[0][0]:
        measures["controller_cpu_share"] = (after[-1][1] - after[0][1]) / (after[-1][0] - after[0][0])
    return (None if first is None else first - t0), proc.returncode


def _child(system: str, spec_json: str, devices: int, log_path: str, workdir: str, hard: float, max_s: float) -> None:
    spec = parse_spec(json.loads(spec_json))
    if system in ("optuna", "optuna_hb"):
        from bench.peers import run_optuna

        run_optuna(spec, spec.seed, devices, log_path, hard, max_s, "hyperband" if system == "optuna_hb" else "sha")
    elif system == "ray":
        from bench.peers import run_ray

        run_ray(spec, spec.seed, devices, log_path, hard, max_s)
    elif system == "ray_bohb":
        from bench.peers import run_ray_bohb

        run_ray_bohb(spec, spec.seed, devices, log_path, hard, max_s)
    else:
        raise SystemExit(f"unknown system {system}")


def one_run(system: str, spec: SearchSpec, devices: int, targets: dict[str, float], max_s: float) -> dict[str, Any]:
    """Run one search in a fresh process; return seconds to each target (None = not reached) and wall."""
    work = Path(tempfile.mkdtemp(prefix=f"qbench-{system}-"))
    log_path = work / "reports.log"
    log_path.touch()
    first_step: float | None = None
    measures: dict[str, float] = {}
    code: int | None
    t0 = time.time()
    if system in QUANTA:  # `quanta run`, timed as a user sees it
        first_step, code = run_quanta(spec, devices, str(log_path), str(work), max_s + 120, measures)
    else:
        proc = mp.get_context("spawn").Process(
            target=_child,
            args=(system, spec.model_dump_json(), devices, str(log_path), str(work), targets["hard"], max_s),
        )
        proc.start()
        proc.join(max_s + 120)
        if proc.is_alive():
            proc.kill()
            proc.join()
        code = proc.exitcode
    wall = time.time() - t0
    points = sorted(
        (float(t), float(v)) for t, v in (line.split() for line in log_path.read_text().splitlines() if line.strip())
    )
    sign = 1 if spec.metric.goal == "maximize" else -1
    reached: dict[str, float | None] = {}
    for name, target in targets.items():
        hit = next((t for t, v in points if sign * v >= sign * target), None)
        reached[name] = None if hit is None else max(0.0, hit - t0)
    out: dict[str, Any] = {"wall_s": wall, "reached": reached, "exit_code": code, "reports": len(points)}
    out.update({k: round(v, 3) for k, v in measures.items()})
    if points:  # every system's start, measured alike: launch to its first report of the metric
        out["first_report_s"] = round(max(0.0, points[0][0] - t0), 3)
    if first_step is not None:
        out["first_step_s"] = round(first_step, 3)
    return out


def write(
    args: argparse.Namespace,
    targets: dict[str, float],
    results: dict[str, Any],
    seeds_done: list[int],
    speedups: dict[str, Any],
) -> None:
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
        "ratios": speedups,
        "command": "python " + " ".join(sys.argv),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "mnist1d.yaml")
    ap.add_argument("--systems", default="fifo,gandiva,asha,default,optuna,optuna_hb,ray")
    ap.add_argument("--seeds", default="0,1,2,3,4,5,6")
    ap.add_argument("--targets", default=None, help="easy,medium,hard (default 0.85,0.90,0.93; --suite: each file's)")
    ap.add_argument("--trials", type=int, default=None, help="default 100 (--suite: each workload's)")
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--parallelism", type=int, default=8, help="Quanta trials alive at once (timeslice/gandiva)")
    ap.add_argument("--max-seconds", type=float, default=None, help="default 600 (--suite: each workload's)")
    ap.add_argument("--json", type=Path, default=None, help="--suite: the summary's JSON (default OUT_DIR/suite.json)")
    ap.add_argument(
        "--runs",
        type=Path,
        default=None,
        help="JSON-lines log of every run (appended as each ends); runs already in it for this workload "
        "(same spec, targets, devices, budget) are read back and not run again, so a benchmark longer "
        "than one sitting continues where it stopped",
    )
    ap.add_argument("--suite", action="store_true", help="race every workload of bench/live_suite.py")
    ap.add_argument("--workloads", default=None, help="--suite: a comma-separated subset (default: all)")
    ap.add_argument(
        "--out-dir",
        type=Path,
        default=ROOT / "bench" / "results" / "suite",
        help="--suite: where search_<workload>.json and the summary go",
    )
    ap.add_argument(
        "--targets-dir",
        type=Path,
        default=ROOT / "bench" / "results",
        help="--suite: where targets_<workload>.json are read",
    )
    args = ap.parse_args(argv)
    missing = missing_peers([s for s in args.systems.split(",") if s])
    if missing:
        raise SystemExit(f"--systems: {missing}; install the peers with `pip install -e '.[bench]'`")
    console = Console()
    if args.suite:
        run_suite(args, console)
        return
    args.targets = args.targets or "0.85,0.90,0.93"
    args.trials = args.trials or 100
    args.max_seconds = args.max_seconds or 600.0
    easy, medium, hard = (float(x) for x in args.targets.split(","))
    race(args, {"easy": easy, "medium": medium, "hard": hard}, console)


PEER_MODULES = {
    "optuna": ("optuna",),
    "optuna_hb": ("optuna",),
    "ray": ("ray", "hyperopt"),
    "ray_bohb": ("ray", "hpbandster", "ConfigSpace"),
}


def missing_peers(systems: list[str]) -> str:
    """What keeps `systems` from racing, as one message ("" when nothing): a name that is neither a Quanta
    system nor a peer, or a peer whose modules are not installed (a run would only record misses)."""
    import importlib.util

    problems = []
    for system in systems:
        if system in QUANTA:
            continue
        if system not in PEER_MODULES:
            problems.append(f"unknown system {system!r}")
            continue
        absent = [m for m in PEER_MODULES[system] if importlib.util.find_spec(m) is None]
        if absent:
            problems.append(f"{system} needs {', '.join(absent)}, not installed")
    return "; ".join(problems)


def miss_or_hit(reached_s: float | None, wall_s: float, cap_s: float) -> float:
    """The seconds a run counts for at one target: when it reached it, else the cap (its wall time when
    that is longer)."""
    return reached_s if reached_s is not None else max(wall_s, cap_s)


def race(args: argparse.Namespace, targets: dict[str, float], console: Console) -> dict[str, Any]:
    """Race `args.systems` on `args.spec` over `args.seeds`, systems interleaved per seed; print a table
    per target and write `args.json` (after every run, so partial results survive); return the
    per-system results."""
    hard = targets["hard"]
    systems = [s for s in args.systems.split(",") if s]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    results: dict[str, dict[str, Any]] = {}
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    key = run_key(args, targets)
    done_before = read_runs(args.runs, key) if args.runs else {}

    def summarise() -> None:
        for system in systems:
            done = runs[system]
            if not done:
                continue
            results[system] = {}
            for name in targets:
                secs = [miss_or_hit(r["reached"][name], r["wall_s"], args.max_seconds) for r in done]
                q1, q3 = quartiles(secs)
                results[system][name] = {
                    "median_s": statistics.median(secs),
                    "q1_s": q1,
                    "q3_s": q3,
                    "runs_s": [round(x, 2) for x in secs],
                    "reached": [r["reached"][name] is not None for r in done],
                    "device_s_median": statistics.median(secs) * args.devices,
                }
            # What each whole run cost: its wall time (to the hard target, the end of its trials or the cap)
            # and the reports its trials made (its training, in evaluations).
            results[system]["wall_s"] = [round(r["wall_s"], 1) for r in done]
            results[system]["reports"] = [r["reports"] for r in done]
            firsts = [r["first_step_s"] for r in done if r.get("first_step_s") is not None]
            if firsts:
                results[system]["start_to_first_step_s"] = statistics.median(firsts)
            reports = [r["first_report_s"] for r in done if r.get("first_report_s") is not None]
            if reports:
                results[system]["start_to_first_report_s"] = statistics.median(reports)
            shares = [r["controller_cpu_share"] for r in done if r.get("controller_cpu_share") is not None]
            if shares:
                results[system]["controller_cpu_share"] = statistics.median(shares)

    for i, seed in enumerate(seeds):
        for system in systems:
            par = args.devices if system == "fifo" else args.parallelism
            spec = workload_spec(args.spec, system, seed, args.trials, args.max_steps, hard, args.max_seconds, par)
            console.print(f"seed {seed} {system} ...", end=" ")
            r = done_before.get((system, seed))
            if r is None:
                r = one_run(system, spec, args.devices, targets, args.max_seconds)
                if args.runs:
                    log_run(args.runs, {**key, "system": system, "seed": seed, "run": r})
            else:
                console.print("(from --runs)", end=" ")
            runs[system].append(r)
            first = f", first mini-batch at {r['first_step_s']:.2f} s" if "first_step_s" in r else ""
            first += f", first report at {r['first_report_s']:.2f} s" if "first_report_s" in r else ""
            console.print(
                {k: (None if v is None else round(v, 1)) for k, v in r["reached"].items()},
                f"wall {r['wall_s']:.0f} s{first}",
            )
            summarise()
            if args.json:  # partial results survive an interrupted benchmark
                write(args, targets, results, seeds[: i + 1], ratios(results, systems, targets))
    peers = [s for s in systems if s in PEERS]
    for name, target in targets.items():
        table = Table(title=f"time to {name} target ({spec.metric.name} {target}), {len(seeds)} seeds")
        for col in ("system", "median s", "q1-q3 s", "hits", "device-s"):
            table.add_column(col, justify="left" if col == "system" else "right")
        for peer in peers:
            table.add_column(f"vs {peer}", justify="right")
        for system in systems:
            r = results[system][name]
            row = [
                system,
                f"{r['median_s']:.1f}",
                f"{r['q1_s']:.1f}-{r['q3_s']:.1f}",
                f"{sum(r['reached'])}/{len(r['reached'])}",
                f"{r['device_s_median']:.0f}",
            ]
            for peer in peers:
                row.append(f"{results[peer][name]['median_s'] / r['median_s']:.2f}x" if system not in PEERS else "")
            table.add_row(*row)
        console.print(table)
    for system in systems:
        first_s = results.get(system, {}).get("start_to_first_step_s")
        if first_s is not None:
            console.print(f"{system}: start to first mini-batch, median {first_s:.2f} s")
        report_s = results.get(system, {}).get("start_to_first_report_s")
        if report_s is not None:
            console.print(f"{system}: launch to first report of the metric, median {report_s:.2f} s")
        share = results.get(system, {}).get("controller_cpu_share")
        if share is not None:
            console.print(f"{system}: the controller's CPU after the first report, median {share:.2f} of a core")
    if args.json:
        write(args, targets, results, seeds, ratios(results, systems, targets))
        console.print(f"wrote {args.json}")
    return results


def run_suite(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Race every workload of `bench.live_suite` (or `--workloads`) in turn, each as `race` runs one
    (its spec, trials, time cap and targets file; --trials/--max-seconds/--max-steps override them all),
    writing OUT_DIR/search_<workload>.json, then print and write the summary (`suite_summary`)."""
    from bench.live_suite import select

    try:
        workloads = select(args.workloads)
        targets_of = {w.name: w.targets(args.targets_dir) for w in workloads}
    except (ValueError, FileNotFoundError) as exc:
        raise SystemExit(str(exc)) from None
    missing = {w.name: w.missing() for w in workloads if w.missing()}
    if missing:
        raise SystemExit(
            "not installed: "
            + "; ".join(f"{n} needs {', '.join(m)}" for n, m in missing.items())
            + " (pip install -e '.[integrations]')"
        )
    if args.targets:
        raise SystemExit("--targets: not with --suite (each workload's come from its targets file, --targets-dir)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    per_workload: dict[str, Any] = {}
    for w in workloads:
        w.ready()
        wargs = argparse.Namespace(**vars(args))
        wargs.spec = w.spec_path
        wargs.trials = args.trials or w.trials
        wargs.max_seconds = args.max_seconds or w.max_seconds
        wargs.json = args.out_dir / f"search_{w.name}.json"
        console.rule(f"{w.name}{' (held out)' if w.held_out else ''}: {w.spec}, targets {targets_of[w.name]}")
        per_workload[w.name] = race(wargs, targets_of[w.name], console)
    systems = [s for s in args.systems.split(",") if s]
    summary = suite_summary(per_workload, targets_of, systems, args.devices)
    print_summary(summary, console)
    out = args.json or args.out_dir / "suite.json"
    out.write_text(json.dumps({**summary, "command": "python " + " ".join(sys.argv)}, indent=2))
    console.print(f"wrote {out}")
    return summary


GOAL = 1.3  # the default's speed-up over the best peer a workload must show at medium and hard


def suite_summary(
    per_workload: dict[str, dict[str, Any]],
    targets_of: dict[str, dict[str, float]],
    systems: list[str],
    devices: int,
) -> dict[str, Any]:
    """Per workload and target: the Quanta system's (`default` when raced, else the first Quanta system
    named) median seconds and device-seconds, the best peer (the lowest median) and its median, and the
    ratio best peer / Quanta (above 1: Quanta is sooner). Overall: the geometric mean of the ratios per
    target and over all, and which workloads meet the goal (ratio >= GOAL at medium and hard, >= 1 at
    easy). Without a peer or a Quanta system raced there are no ratios."""
    quanta = "default" if "default" in systems else next((s for s in systems if s not in PEERS), None)
    peers = [s for s in systems if s in PEERS]
    rows: dict[str, Any] = {}
    by_target: dict[str, list[float]] = {"easy": [], "medium": [], "hard": []}
    meets: list[str] = []
    for name, results in per_workload.items():
        rows[name] = {}
        for target, value in targets_of[name].items():
            row: dict[str, Any] = {"target": value}
            if quanta in results:
                q = results[quanta][target]["median_s"]
                row.update({"system": quanta, "median_s": q, "device_s": q * devices})
                raced = [p for p in peers if p in results]
                if raced:
                    best = min(raced, key=lambda p: results[p][target]["median_s"])
                    b = results[best][target]["median_s"]
                    row.update({"best_peer": best, "best_peer_median_s": b, "best_peer_device_s": b * devices})
                    if q > 0:
                        row["ratio"] = b / q
                        by_target[target].append(b / q)
            rows[name][target] = row
        ratios_w = {t: rows[name][t].get("ratio") for t in ("easy", "medium", "hard")}
        if all(r is not None for r in ratios_w.values()) and (
            ratios_w["easy"] >= 1.0 and ratios_w["medium"] >= GOAL and ratios_w["hard"] >= GOAL
        ):
            meets.append(name)
    every = [r for rs in by_target.values() for r in rs]
    return {
        "system": quanta,
        "peers": peers,
        "devices": devices,
        "workloads": rows,
        "geomean": {t: geomean(rs) for t, rs in by_target.items()} | {"all": geomean(every)},
        "goal": GOAL,
        "meet_goal": meets,
        "meet_goal_count": f"{len(meets)}/{len(per_workload)}",
    }


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def print_summary(summary: dict[str, Any], console: Console) -> None:
    table = Table(title=f"live suite: {summary['system']} against the best of {', '.join(summary['peers'])}")
    for col in ("workload", "target", "value", "median s", "device-s", "best peer", "its median s", "ratio"):
        table.add_column(col, justify="left" if col in ("workload", "target", "best peer") else "right")
    for name, rows in summary["workloads"].items():
        for target, row in rows.items():
            table.add_row(
                name,
                target,
                f"{row['target']:g}",
                f"{row['median_s']:.1f}" if "median_s" in row else "",
                f"{row['device_s']:.0f}" if "device_s" in row else "",
                row.get("best_peer", ""),
                f"{row['best_peer_median_s']:.1f}" if "best_peer_median_s" in row else "",
                f"{row['ratio']:.2f}x" if "ratio" in row else "",
            )
    console.print(table)
    means = ", ".join(f"{t} {v:.2f}x" for t, v in summary["geomean"].items() if v is not None)
    console.print(f"geometric mean of the ratios: {means or 'none'}")
    console.print(
        f"workloads meeting {summary['goal']}x at medium and hard (and >= 1x at easy): "
        f"{summary['meet_goal_count']} {summary['meet_goal']}"
    )


def run_key(args: argparse.Namespace, targets: dict[str, float]) -> dict[str, Any]:
    """What makes two runs of one system and seed the same experiment (for --runs)."""
    spec = args.spec.resolve()
    return {
        "spec": str(spec.relative_to(ROOT)) if spec.is_relative_to(ROOT) else str(spec),
        "targets": targets,
        "trials": args.trials,
        "max_steps": args.max_steps,
        "devices": args.devices,
        "parallelism": args.parallelism,
        "max_seconds": args.max_seconds,
    }


def log_run(path: Path, record: dict[str, Any]) -> None:
    """Append one run to the --runs log, on a line of its own even after a line cut short by a kill."""
    cut = False
    if path.exists() and path.stat().st_size > 0:
        with path.open("rb") as fh:  # only the last byte: the log grows with every run
            fh.seek(-1, 2)
            cut = fh.read(1) != b"\n"
    with path.open("a") as fh:
        fh.write(("\n" if cut else "") + json.dumps(record) + "\n")


def read_runs(path: Path, key: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """Runs logged in `path` for the experiment `key`, by (system, seed); other experiments' lines are
    ignored, and a line cut short by an interrupted write is skipped (that run is run again)."""
    if not path.exists():
        return {}
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if all(rec.get(k) == v for k, v in key.items()):
            out[(rec["system"], int(rec["seed"]))] = rec["run"]
    return out


def quartiles(xs: list[float]) -> tuple[float, float]:
    if len(xs) < 2:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def ratios(results: dict[str, Any], systems: list[str], targets: dict[str, float]) -> dict[str, Any]:
    """Speed-up of each Quanta system over each peer and over fifo: peer median / system median."""
    out: dict[str, Any] = {}
    others = [s for s in systems if s in PEERS or s == "fifo"]
    for system in systems:
        if system in PEERS or system not in results:
            continue
        out[system] = {
            other: {
                name: results[other][name]["median_s"] / results[system][name]["median_s"]
                for name in targets
                if other in results and results[system][name]["median_s"] > 0
            }
            for other in others
            if other != system
        }
    return out


if __name__ == "__main__":
    main()
