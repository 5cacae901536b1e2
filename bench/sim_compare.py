"""Proof that the simulator's behaviour did not change: re-simulate every published run in
bench/results/sim_*.json with the current code and compare every field that does not time the host.

    python bench/sim_compare.py                      # every published run (the *_full ones take minutes)
    python bench/sim_compare.py --only sim_6c71a0_100 --json /tmp/compare.json

What each published file is, and how it is checked:

- ``sim_<trace>_<gpus>[_full|_mixed].json`` ({policy: summary}): re-run with the documented command
  (`quanta simulate ...`, docs/simulation.md) in a subprocess; every summary field is compared.
- ``sim_speed.json`` (bench/sim_speed.py): re-run with that script; the simulated fields (jobs, ticks,
  makespan, mean JCT) are compared, not the host's timings nor ``met`` (a wall-clock verdict).
- ``sim_validate_fifo.json``, ``sim_validate_gandiva.json``, ``sim_validate_timeslice.json``
  (bench/sim_validate.py): the real half ran real processes and is not repeatable; only the simulated
  half is re-simulated (the synthetic trace, the same policy, knobs and the mechanism costs the file
  recorded) and compared: each job's steps, arrival and simulated JCT, suspends, migrations.
- ``sim_users*.json`` (bench/sim_users.py): not re-simulated here (see ``ELSEWHERE``).

Fields never compared: those that time the host (wall_s, jobs_per_s, load_s, met, python, machine), and
``ticks``, how often the controller planned, which the quiet rounds a policy promises change
(`Plan.quiet_until`); ``rounds`` (the ticks that changed the placement) is compared. Floats agree
when within 1e-9 relative: summing the same time in other slices moves their last digits.

Quick mode for developers (about a minute instead of tens of minutes), compared against a baseline
written from a reference tree, since the published files hold whole runs only: each distinct published
`quanta simulate` cluster (trace, GPUs, kind) cut to its first ``--quick-jobs`` (30) jobs at a
``--quick-quantum`` of 600 s (the cost of a time-slicing run is its ticks, and the first jobs of a Philly
trace span weeks), the Tiresias toy trace `60_job` on 8 GPUs at the published 60 s quantum (dense:
gandiva packs, undoes packs and migrates there), sim_speed's command on the first jobs; the
sim_validate checks are cheap and run whole against the published files. Write the
baseline with the code before your change, e.g. from a worktree of main, then compare with your change:

    git worktree add /tmp/base main
    (cd /tmp/base && python bench/sim_compare.py --quick --write-baseline /tmp/sim-base)
    python bench/sim_compare.py --quick --baseline /tmp/sim-base

Every subprocess runs with PYTHONPATH set to the tree this script lives in, so each tree simulates with
its own code. Prints a table (run, policy, field, published, now) of the differences (all rows with
``--all-rows``) and exits 1 on any difference, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))

# Fields that measure the host, not the simulation.
WALL_CLOCK = frozenset({"wall_s", "jobs_per_s", "load_s", "met", "python", "machine"})
# How often the controller planned: the same decisions come from fewer ticks when quiet rounds are skipped.
NOT_COMPARED = WALL_CLOCK | {"ticks"}
FLOAT_REL = 1e-9
# Published by another script, which is what reproduces them (this check would have to re-run its
# per-user "alone" simulations: tens of minutes a trace).
ELSEWHERE = {
    "sim_users": "bench/sim_users.py (6c71a0, 8 users, shares); re-run it to compare",
    "sim_users_b436b2": "bench/sim_users.py (b436b2, 8 users, shares); re-run it to compare",
    **{
        f"sim_users_kinds_{mix}": f"bench/sim_users.py (b436b2, 300 jobs, 8 users, --kind {kind}, kind-aware "
        "against kind-blind placement); re-run it to compare"
        for mix, kind in (("v100_p100", "v100=100,p100=100"), ("v100_k80", "v100=100,k80=100"))
    },
}
QUICK_JOBS = 30
QUICK_QUANTUM_S = 600.0


@dataclass(frozen=True)
class SimRun:
    """One `quanta simulate` command as published (docs/simulation.md)."""

    trace: str
    gpus: int
    gpus_per_server: int = 4
    max_jobs: int | None = None
    kind: str = "v100"
    policies: tuple[str, ...] = ("gandiva", "fifo", "tiresias")

    def argv(self, out: Path, max_jobs: int | None = None, quantum_s: float | None = None) -> list[str]:
        policy, *rest = self.policies
        cmd = [sys.executable, "-m", "quanta.cli", "simulate", "--trace", self.trace, "--gpus", str(self.gpus)]
        cmd += ["--gpus-per-server", str(self.gpus_per_server), "--policy", policy]
        if rest:
            cmd += ["--compare", ",".join(rest)]
        if max_jobs := max_jobs or self.max_jobs:
            cmd += ["--max-jobs", str(max_jobs)]
        if quantum_s is not None:
            cmd += ["--quantum", f"{quantum_s:g}"]
        if self.kind != "v100":
            cmd += ["--kind", self.kind]
        return cmd + ["--json", str(out)]


SIM_RUNS: dict[str, SimRun] = {
    "sim_ee9e8c_200_full": SimRun("ee9e8c", 200),
    "sim_6c71a0_100_full": SimRun("6c71a0", 100),
    "sim_b436b2_100_full": SimRun("b436b2", 100),
    "sim_ee9e8c_200": SimRun("ee9e8c", 200, max_jobs=800),
    "sim_6c71a0_100": SimRun("6c71a0", 100, max_jobs=300),
    "sim_b436b2_100": SimRun("b436b2", 100, max_jobs=300),
    "sim_ee9e8c_200_mixed": SimRun("ee9e8c", 200, max_jobs=800, kind="v100=100,p100=100"),
}
# Quick mode only: a dense toy run (packs kept and undone, migrations) in a few seconds.
QUICK_TOY = ("quick_60_job_8", SimRun("60_job", 8))
VALIDATE_RUNS = ("sim_validate_fifo", "sim_validate_gandiva", "sim_validate_timeslice")
SPEED_RUN = "sim_speed"


@dataclass
class Row:
    run: str
    policy: str
    field: str
    published: Any
    now: Any

    @property
    def same(self) -> bool:
        a, b = self.published, self.now
        if isinstance(a, float) and isinstance(b, float):
            return math.isclose(a, b, rel_tol=FLOAT_REL, abs_tol=1e-12)
        return bool(a == b)


@dataclass
class Outcome:
    run: str
    how: str  # what was done, e.g. "re-simulated", "skipped: <why>"
    rows: list[Row] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def differences(self) -> list[Row]:
        return [r for r in self.rows if not r.same]


def compare_fields(run: str, policy: str, published: Any, now: Any, prefix: str = "") -> Iterator[Row]:
    """One row per leaf field of `published` and `now` (the union of keys and list positions, so a field
    that appeared or vanished is a difference too), skipping the wall-clock fields."""
    if isinstance(published, dict) and isinstance(now, dict):
        for key in sorted(set(published) | set(now), key=str):
            if key in NOT_COMPARED:
                continue
            yield from compare_fields(run, policy, published.get(key), now.get(key), f"{prefix}{key}.")
        return
    if isinstance(published, list) and isinstance(now, list):
        for i in range(max(len(published), len(now))):
            a = published[i] if i < len(published) else None
            b = now[i] if i < len(now) else None
            yield from compare_fields(run, policy, a, b, f"{prefix.rstrip('.')}[{i}].")
        return
    yield Row(run, policy, prefix.rstrip("."), published, now)


def _subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _run(cmd: list[str]) -> None:
    """Run one command from this tree; its progress chatter is dropped unless it fails."""
    proc = subprocess.run(cmd, cwd=ROOT, env=_subprocess_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stderr[-3000:]}")


def simulate_run(run: SimRun, max_jobs: int | None = None, quantum_s: float | None = None) -> dict[str, Any]:
    """{policy: summary} from the published command (cut to `max_jobs`, at `quantum_s`, when given)."""
    with tempfile.TemporaryDirectory(prefix="sim-compare-") as tmp:
        out = Path(tmp) / "out.json"
        _run(run.argv(out, max_jobs, quantum_s))
        return json.loads(out.read_text())


def speed_run(entry: dict[str, Any], max_jobs: int | None) -> dict[str, Any]:
    """One sim_speed.json entry re-measured with bench/sim_speed.py (its `--max-jobs` = the entry's jobs,
    which is the whole trace for the published run)."""
    with tempfile.TemporaryDirectory(prefix="sim-compare-") as tmp:
        out = Path(tmp) / "speed.json"
        cmd = [sys.executable, str(ROOT / "bench" / "sim_speed.py"), "--trace", entry["trace"]]
        cmd += ["--gpus", str(entry["gpus"]), "--gpus-per-server", str(entry["gpus_per_server"])]
        cmd += ["--policy", entry["policy"], "--quantum", str(entry["quantum_s"])]
        cmd += ["--max-jobs", str(max_jobs or entry["jobs"]), "--out", str(out)]
        _run(cmd)
        (row,) = json.loads(out.read_text()).values()
        return row


def validate_sim(published: dict[str, Any]) -> dict[str, Any]:
    """The simulated half of a bench/sim_validate.py run, rebuilt from what the file recorded (defaults
    of sim_validate.py for settings an older file does not record)."""
    from quanta.sim.driver import simulate
    from quanta.sim.runtime import SimCosts
    from quanta.sim.traces import synthetic

    jobs_pub = published["jobs"]
    steps = sorted(j["steps"] for j in jobs_pub)
    # sim_validate.py: --median-steps 100 by default, 300 for the calibrated runs (their docstring).
    median_steps = 300 if published.get("calibrated") else 100
    jobs = synthetic(
        len(jobs_pub),
        seed=published.get("seed", 0),
        mean_interarrival_s=published.get("mean_interarrival_s", 3.0),
        median_steps=median_steps,
        sigma=0.5,
        rate=20.0,
        mix=(("sleep", 1, 1.0),),
    )
    if sorted(j.steps for j in jobs) != steps:
        raise RuntimeError("the synthetic trace does not match the published jobs (median steps?)")
    free = {"start_s": 0.0, "suspend_s": 0.0, "resume_s": 0.0, "migrate_s": 0.0}  # uncalibrated: free mechanism
    costs = SimCosts(**published.get("sim_costs_s", free))
    devices = published["devices"]
    sim = simulate(
        jobs,
        published["policy"],
        policy_knobs=published.get("knobs") or {},
        gpus=devices,
        gpus_per_server=devices,
        quantum_s=published.get("quantum_s", 2.0),
        costs=costs,
        check=True,
    )
    sim_jct = {r["id"]: r["jct_s"] for r in sim.jobs}
    now = {
        "jobs": [
            {"id": j.id, "steps": j.steps, "arrival_s": j.arrival, "sim_jct_s": round(sim_jct[j.id], 3)} for j in jobs
        ],
        "mean_sim_jct_s": sum(sim_jct.values()) / len(jobs),
    }
    for key in ("sim_suspends", "sim_migrations"):
        if key in published:  # the first file (fifo) predates these fields
            now[key] = sim.summary[key.removeprefix("sim_")]
    return now


def validate_published(published: dict[str, Any]) -> dict[str, Any]:
    """The fields of a sim_validate file that the simulated half determines."""
    keep = ("id", "steps", "arrival_s", "sim_jct_s")
    out: dict[str, Any] = {"jobs": [{k: j[k] for k in keep} for j in published["jobs"]]}
    out["mean_sim_jct_s"] = published["mean_sim_jct_s"]
    for key in ("sim_suspends", "sim_migrations"):
        if key in published:  # the first file (fifo) predates these fields
            out[key] = published[key]
    return out


@dataclass(frozen=True)
class Task:
    """One comparison. `kind`: sim | speed | validate (a published file, re-simulated), quick_sim |
    quick_speed (a short run against a baseline), skip (with `why`)."""

    name: str
    kind: str
    run: SimRun | None = None
    why: str = ""


def plan(names: list[str], quick: bool, explicit: bool) -> list[Task]:
    """The tasks for the published files `names`; in quick mode each distinct simulate command once, cut
    short, plus the toy run (unless files were picked with --only)."""
    tasks: list[Task] = []
    seen: set[str] = set()
    for name in names:
        if name in ELSEWHERE:
            tasks.append(Task(name, "skip", why=ELSEWHERE[name]))
        elif name in SIM_RUNS and quick:
            run = SIM_RUNS[name]
            qname = f"quick_{run.trace}_{run.gpus}" + ("" if run.kind == "v100" else "_mixed")
            if qname not in seen:
                seen.add(qname)
                tasks.append(Task(qname, "quick_sim", run))
        elif name in SIM_RUNS:
            tasks.append(Task(name, "sim", SIM_RUNS[name]))
        elif name == SPEED_RUN:
            tasks.append(Task(name, "quick_speed" if quick else "speed"))
        elif name in VALIDATE_RUNS:
            tasks.append(Task(name, "validate"))
        else:
            tasks.append(Task(name, "skip", why="unknown kind of file: teach bench/sim_compare.py about it"))
    if quick and not explicit:
        tasks.insert(0, Task(QUICK_TOY[0], "quick_sim", QUICK_TOY[1]))
    return tasks


def _compare_keyed(name: str, published: dict[str, Any] | None, now: dict[str, Any], label) -> list[Row]:
    """Rows for {key: summary} files, one label (policy) per key."""
    if published is None:
        return []
    rows: list[Row] = []
    for key in sorted(set(published) | set(now)):
        rows += compare_fields(name, label(key), published.get(key), now.get(key))
    return rows


def check(task: Task, quick_jobs: int, quick_quantum: float, baseline: Any) -> tuple[Outcome, Any]:
    """Run one task and compare: published files against what the code gives now; quick runs against
    `baseline` (None: only compute, for --write-baseline). Returns the outcome and what was computed."""
    t0 = time.perf_counter()
    out = Outcome(task.name, "re-simulated")
    now: Any = None
    if task.kind == "skip":
        out.how = f"skipped: {task.why}"
        return out, None
    published = json.loads((RESULTS / f"{task.name}.json").read_text()) if not task.name.startswith("quick_") else None
    if task.kind == "sim":
        assert task.run is not None
        now = simulate_run(task.run)
        out.rows = _compare_keyed(task.name, published, now, str)
    elif task.kind == "quick_sim":
        assert task.run is not None
        if task.name == QUICK_TOY[0]:
            now = simulate_run(task.run)
            out.how = "quick: toy trace, vs baseline"
        else:
            now = simulate_run(task.run, quick_jobs, quick_quantum)
            out.how = f"quick: first {quick_jobs} jobs at quantum {quick_quantum:g} s, vs baseline"
        out.rows = _compare_keyed(task.name, baseline, now, str)
    elif task.kind in ("speed", "quick_speed"):
        assert published is not None
        cut = quick_jobs if task.kind == "quick_speed" else None
        now = {key: speed_run(entry, cut) for key, entry in published.items()}
        if task.kind == "quick_speed":
            out.how = f"quick: first {quick_jobs} jobs, vs baseline"
            published = baseline
        out.rows = _compare_keyed(task.name, published, now, lambda key: key.split("/")[4])
    elif task.kind == "validate":
        assert published is not None
        out.how = "simulated half re-simulated (the real half ran real processes)"
        now = validate_sim(published)
        out.rows = list(compare_fields(task.name, published["policy"], validate_published(published), now))
    out.seconds = time.perf_counter() - t0
    return out, now


def published_names() -> list[str]:
    return sorted(p.stem for p in RESULTS.glob("sim_*.json"))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)
    return "-" if v is None else json.dumps(v) if isinstance(v, (dict, list)) else str(v)


def print_table(outcomes: list[Outcome], all_rows: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 200))  # never cut a number
    t = Table(title="published vs now", show_header=True)
    for col in ("run", "policy", "field", "published", "now", ""):
        t.add_column(col, justify="right" if col in ("published", "now") else "left")
    for o in outcomes:
        for r in o.rows:
            if all_rows or not r.same:
                t.add_row(r.run, r.policy, r.field, _fmt(r.published), _fmt(r.now), "" if r.same else "DIFFERS")
    if t.row_count:
        console.print(t)
    for o in outcomes:
        print(f"{o.run}: {len(o.rows)} fields, {len(o.differences)} differ, {o.seconds:.1f} s; {o.how}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", metavar="NAME", help="a published file (sim_6c71a0_100); repeatable")
    ap.add_argument("--quick", action="store_true", help="short runs against a baseline (--baseline/--write-baseline)")
    ap.add_argument("--quick-jobs", type=int, default=QUICK_JOBS, help=f"jobs per trace in quick mode ({QUICK_JOBS})")
    ap.add_argument(
        "--quick-quantum", type=float, default=QUICK_QUANTUM_S, help=f"quantum in quick mode ({QUICK_QUANTUM_S:g} s)"
    )
    ap.add_argument("--baseline", type=Path, metavar="DIR", help="quick mode: compare with the baseline in DIR")
    ap.add_argument("--write-baseline", type=Path, metavar="DIR", help="quick mode: write the baseline to DIR")
    ap.add_argument("--json", type=Path, metavar="PATH", help="write every compared row and each run's outcome here")
    ap.add_argument("--all-rows", action="store_true", help="print equal rows too")
    args = ap.parse_args(argv)
    if args.quick and (args.baseline is None) == (args.write_baseline is None):
        ap.error("--quick needs exactly one of --baseline DIR or --write-baseline DIR")
    if not args.quick and (args.baseline or args.write_baseline):
        ap.error("--baseline / --write-baseline go with --quick")
    names = published_names()
    if args.only:
        picked = [n.removesuffix(".json") for n in args.only]
        unknown = [n for n in picked if n not in names]
        if unknown:
            ap.error(f"not a published file: {unknown} (known: {', '.join(names)})")
        names = picked
    settings = {"quick_jobs": args.quick_jobs, "quick_quantum_s": args.quick_quantum}

    outcomes = []
    for task in plan(names, args.quick, bool(args.only)):
        baseline = None
        quick_task = task.kind.startswith("quick_")
        if quick_task and args.baseline is not None:
            base_file = args.baseline / f"{task.name}.json"
            if not base_file.exists():
                ap.error(f"no baseline {base_file} (write it with --write-baseline from the reference tree)")
            stored = json.loads(base_file.read_text())
            if stored["settings"] != settings:
                ap.error(f"{base_file} was written with {stored['settings']}, not {settings}")
            baseline = stored["results"]
        print(f"{task.name}: ...", file=sys.stderr, flush=True)
        outcome, now = check(task, args.quick_jobs, args.quick_quantum, baseline)
        if quick_task and args.write_baseline is not None:
            args.write_baseline.mkdir(parents=True, exist_ok=True)
            blob = {"settings": settings, "code": str(ROOT), "results": now}
            (args.write_baseline / f"{task.name}.json").write_text(json.dumps(blob, indent=2) + "\n")
            outcome.how += f"; baseline written to {args.write_baseline}"
        print(f"{task.name}: done in {outcome.seconds:.1f} s", file=sys.stderr, flush=True)
        outcomes.append(outcome)

    print_table(outcomes, args.all_rows)
    diffs = sum(len(o.differences) for o in outcomes)
    compared = sum(len(o.rows) for o in outcomes)
    if args.json is not None:
        report = {
            "quick": args.quick,
            "settings": settings if args.quick else None,
            "fields": compared,
            "differences": diffs,
            "runs": [
                {
                    "run": o.run,
                    "how": o.how,
                    "seconds": round(o.seconds, 1),
                    "rows": [{**r.__dict__, "same": r.same} for r in o.rows],
                }
                for o in outcomes
            ],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{compared} fields compared, {diffs} differ", file=sys.stderr)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
