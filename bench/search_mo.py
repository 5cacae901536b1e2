"""Time to a point target with two objectives and a constraint, live: Quanta against Optuna's
multi-objective TPE and Syne Tune's MO-ASHA, side by side in one run.

The workload is examples/mnist1d_mo.yaml: a 1-D CNN on MNIST-1D whose width and depth are searched,
objectives `accuracy` (max) and `params_k` (min), constraint `latency_ms` (max), a point target
(`target: {accuracy: A, params_k: P}`). Every system runs the same trainable code on the same number of
CPU devices (one torch thread each) with the same trial budget, systems interleaved per seed (seed 0:
every system, then seed 1, ...) so that a machine that gets noisy hurts all alike. Measured: wall
seconds from a search's launch until the first *feasible* report that reaches the target (every
objective at least as good as the target's, every constraint met), read from a log of every report
each system writes as it goes. A search that never gets there is marked a miss and counts as the time
cap (`--max-seconds`, or its wall time if longer), also when it ended sooner for want of trials: a user
who wants the target would have had to go on. Start-up counts (users wait for it). Searches end at the
target, at `--trials` trials (the spec's 100 by default, the same for every system) or at
`--max-seconds`.

Systems:
- `default`: Quanta as a user runs it, `quanta run` on the spec (the default policy and searcher, which
  read `metrics`, `constraints` and `target`), with the spec's `parallelism` trials alive at once.
- `optuna_motpe`: Optuna's TPESampler on a multi-objective study (`directions`), multivariate with the
  constant liar as `bench/peers.py` sets it up, the constraint given as the trial's constraint
  (`Trial.set_constraint`, which Optuna 5's TPE reads; the largest latency a trial reported, less the
  bound). No pruning: Optuna's pruners refuse multi-objective
  studies (`Trial.report` raises NotImplementedError there), so every trial runs its full budget; each
  trial is told its last report's objectives. One worker process per device on one JournalStorage
  (Optuna's documented parallel set-up).
- `syne_moasha`: Syne Tune's `MOASHA` scheduler (non-dominated sorting with the epsilon-net, read as
  documented: `bench/syne_lcbench_mo.py`'s `ranked_priority`, since 0.16 hands its rungs the sort order
  itself; stopping: what it stops ends), rungs from `eval_every` steps, reduction factor 3, its random
  suggestions. Nothing in bench/ ran Syne Tune live before, so its scheduler runs here through an
  ask/tell loop of our own with real training: the loop asks MOASHA for configurations, one forked
  worker process per device trains each (the trainable through `bench.peers.AdapterTrial`), every report
  goes to `on_trial_result` and the worker waits for the decision (continue or stop) before its next
  step, a finished trial goes to `on_trial_complete`. This is what Syne Tune's local backend does, less
  its per-trial `python` start-up (which would only slow it down). MO-ASHA has no constraints; a report
  outside the bound is told to it as the reference point (the worst outcome), the usual workaround.

The target, `{accuracy: 0.86, params_k: 12}` under `latency_ms <= 1.5`, is reachable but not trivial:
of 40 random configurations of the space run to 2,000 steps on one thread (`--sweep 40 --seeds 0`,
bench/results/search_mo_sweep.json; 5.6 s each on average), 4 reach it (32 channels, 2-4 convolutions,
a learning rate of 0.002-0.03: 0.88-0.93 at 6.5k-10.5k parameters); the next best feasible are 0.898 at
19k parameters and 0.857 at 10.5k, and the 64-channel networks with 3-4 convolutions are over the
latency bound (4 of the 40). `--sweep N` runs N random configurations the same way and counts how many
reach the target (`--target` to try another):

    python bench/search_mo.py --sweep 40 --seeds 0 --json bench/results/search_mo_sweep.json

The race, 7 seeds of every system (each search capped at 600 s: at most about 3.5 hours):

    python bench/search_mo.py --systems default,optuna_motpe,syne_moasha --seeds 0,1,2,3,4,5,6 \\
        --max-seconds 600 --json bench/results/search_mo.json

Prints a table (median, quartiles, hits, device-seconds, Quanta's speed-up over each peer) and writes
JSON shaped {"workload", "target", "constraints", "systems": {name: {"median_s", "q1_s", "q3_s",
"runs_s", "reached", "device_s_median", "runs": [{"seed", "wall_s", "reached_s", "trials", "reports",
"exit_code"}]}}, "ratios": {peer: peer median / Quanta median}, "command"}.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.search import miss_or_hit, quartiles, run_quanta  # noqa: E402
from quanta.search.pareto import reaches, violation  # noqa: E402
from quanta.spec import SearchSpec, load_spec, parse_spec  # noqa: E402

QUANTA_SYSTEMS = ("default",)
PEERS = ("optuna_motpe", "syne_moasha")
SPEC = ROOT / "examples" / "mnist1d_mo.yaml"


# ---- the workload and what counts as reached --------------------------------------------------------


def workload_spec(
    path: Path,
    seed: int,
    trials: int | None,
    max_seconds: float,
    max_steps: int | None = None,
    target: Mapping[str, float] | None = None,
) -> SearchSpec:
    """The spec of one search: `path`'s, with the seed, the trial and time budgets, the step budget and
    the point target (None: the spec's) set; it stops at the target."""
    base = load_spec(path).model_dump(mode="json", exclude_defaults=True)
    base.pop("metric", None)  # `metrics` fills it in
    base["seed"] = seed
    budget = {**base.get("budget", {}), "max_seconds": max_seconds, "stop_on_target": True}
    if trials:
        budget["max_trials"] = trials
    if max_steps:
        budget["max_steps"] = max_steps
    base["budget"] = budget
    if target is not None:
        base["target"] = dict(target)
        ref = base.get("reference") or {}
        goals = {o["name"]: o.get("goal", "maximize") for o in base["metrics"]}
        if any((ref[n] >= target[n]) if goals[n] == "maximize" else (ref[n] <= target[n]) for n in ref if n in target):
            base.pop("reference")  # the spec's reference is not worse than the given target: none (the default)
    return parse_spec(base)


def reached_at(spec: SearchSpec, reports: list[tuple[float, dict[str, float | None]]]) -> float | None:
    """The wall time of the first report (`(at, metrics)`, any order) that is feasible and reaches the
    spec's point target in every objective, or None."""
    target = spec.point_target()
    if target is None:
        raise ValueError("target: the benchmark needs a point target (one value per objective)")
    for at, metrics in sorted(reports, key=lambda r: r[0]):
        losses = []
        for o in spec.objectives:
            v = metrics.get(o.name)
            losses.append(math.inf if v is None or not math.isfinite(v) else o.loss(v))
        if reaches(tuple(losses), target) and violation(metrics, spec.bounds) == 0.0:
            return at
    return None


def append_report(path: str, trial: int, metrics: Mapping[str, float]) -> None:
    """One line `{"at", "trial", "metrics"}` appended to the report log (O_APPEND writes of one short
    line are atomic across processes)."""
    line = json.dumps({"at": time.time(), "trial": trial, "metrics": {k: float(v) for k, v in metrics.items()}})
    line += "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_reports(path: Path) -> list[tuple[float, int, dict[str, float | None]]]:
    """The log's reports as `(at, trial, metrics)`."""
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            out.append((float(rec["at"]), int(rec["trial"]), dict(rec["metrics"])))
    return out


def reached(spec: SearchSpec, metrics: Mapping[str, float | None]) -> bool:
    """Whether one report is feasible and reaches the spec's point target."""
    return reached_at(spec, [(0.0, dict(metrics))]) is not None


def _searched(spec: SearchSpec) -> list[str]:
    return list(dict.fromkeys([o.name for o in spec.objectives] + [b.name for b in spec.bounds]))


def _prepare(spec: SearchSpec) -> Callable[..., None]:
    """Import the trainable and build its data once (forked workers share both, as Quanta's template)."""
    import importlib

    from bench.peers import load

    fn = load(spec.trainable)
    prepare = getattr(importlib.import_module(spec.trainable.partition(":")[0]), "prepare", None)
    if callable(prepare):
        prepare()
    return fn


# ---- Optuna: multi-objective TPE --------------------------------------------------------------------


def run_optuna_motpe(spec: SearchSpec, n_jobs: int, log_path: str, max_seconds: float) -> None:
    """Optuna's multi-objective TPE (see the module docstring): `n_jobs` forked worker processes on one
    JournalStorage study; each stops when a report in the log reaches the target, at the trial budget
    or at `max_seconds`."""
    import optuna

    journal = str(Path(log_path).parent / "optuna-journal.log")
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal))
    optuna.create_study(study_name="bench", storage=storage, directions=[o.goal for o in spec.objectives])
    _prepare(spec)
    ctx = mp.get_context("fork")
    procs = [
        ctx.Process(target=_optuna_worker, args=(spec, spec.seed + 1000 * i, journal, log_path, max_seconds))
        for i in range(n_jobs)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()


def _constraint_values(spec: SearchSpec, metrics: Mapping[str, float]) -> dict[str, float]:
    """Optuna's constraint values of a report (feasible when all are <= 0): value - max, min - value."""
    out = {}
    for b in spec.bounds:
        v = metrics.get(b.name)
        bad = v is None or not math.isfinite(v)
        if b.high is not None:
            out[f"{b.name}_max"] = 1e9 if bad else float(v) - b.high  # type: ignore[arg-type]
        if b.low is not None:
            out[f"{b.name}_min"] = 1e9 if bad else b.low - float(v)  # type: ignore[arg-type]
    return out


def _optuna_worker(spec: SearchSpec, seed: int, journal: str, log_path: str, max_seconds: float) -> None:
    import warnings

    import optuna
    import torch
    from optuna.study import MaxTrialsCallback

    from bench.peers import AdapterTrial, conditional, load, optuna_params

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    torch.set_num_threads(1)
    fn = load(spec.trainable)
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal))
    with warnings.catch_warnings():  # multivariate/group are marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=seed,
            n_startup_trials=spec.search.n_startup,
            multivariate=True,
            group=conditional(spec.space),
            constant_liar=True,
        )
    study = optuna.load_study(study_name="bench", storage=storage, sampler=sampler)

    def objective(ot: Any) -> tuple[float, ...]:
        params = optuna_params(ot, spec.space)
        config = {"seed": spec.seed, **spec.config, **params}
        last: dict[str, float] = {}
        worst: dict[str, float] = {}

        def on_report(step: int, metrics: dict[str, float]) -> None:
            append_report(log_path, ot.number, metrics)
            last.update(metrics)
            for key, value in _constraint_values(spec, metrics).items():
                if value > worst.get(key, -math.inf):
                    worst[key] = value
                    ot.set_constraint(key, value)  # Optuna 5's TPE reads a trial's constraints from here

        fn(config, AdapterTrial(config, spec.budget.max_steps, on_report))
        return tuple(float(last.get(o.name, math.nan)) for o in spec.objectives)

    def stop_at_target(study: Any, _trial: Any) -> None:
        if any(reached(spec, m) for _, _, m in read_reports(Path(log_path))):
            study.stop()

    study.optimize(
        objective,
        n_trials=spec.budget.max_trials,
        timeout=max_seconds,
        callbacks=[stop_at_target, MaxTrialsCallback(spec.budget.max_trials, states=None)],
        catch=(RuntimeError, ValueError),
    )


# ---- Syne Tune: MO-ASHA through an ask/tell loop --------------------------------------------------


def syne_config_space(space: Mapping[str, Any]) -> dict[str, Any]:
    """A flat spec space as Syne Tune's config space (uniform, loguniform, randint with Quanta's exclusive
    upper bound, choice); anything else is a ValueError naming the parameter."""
    from syne_tune import config_space as cs

    out: dict[str, Any] = {}
    for name, node in space.items():
        if not (isinstance(node, Mapping) and len(node) == 1):
            out[name] = node
            continue
        kind, args = next(iter(node.items()))
        if kind == "uniform":
            out[name] = cs.uniform(float(args[0]), float(args[1]))
        elif kind == "loguniform":
            out[name] = cs.loguniform(float(args[0]), float(args[1]))
        elif kind == "randint":
            out[name] = cs.randint(int(args[0]), int(args[1]) - 1)  # Syne Tune's upper bound is inclusive
        elif kind == "choice" and not any(isinstance(o, Mapping) for o in args):
            out[name] = cs.choice(list(args))
        else:
            raise ValueError(f"space.{name}: {kind} is not translated for Syne Tune (flat spaces only)")
    return out


class _StopTrial(Exception):
    """Raised in a worker when the scheduler stops its trial."""


def _syne_worker(spec: SearchSpec, conn: Any, log_path: str) -> None:
    """Train the trials the loop sends (`("run", id, config)`) one at a time; send every report
    (`("report", id, step, metrics)`) and wait for `"continue"` or `"stop"`; `("done", id, metrics)` at
    the end of a trial (its last report's metrics, or None when stopped or failed)."""
    import torch

    from bench.peers import AdapterTrial, load

    torch.set_num_threads(1)
    fn = load(spec.trainable)
    while True:
        msg = conn.recv()
        if msg is None:
            return
        _, tid, config = msg
        last: dict[str, float] = {}

        def on_report(step: int, metrics: dict[str, float], tid: int = tid, last: dict = last) -> None:
            append_report(log_path, tid, metrics)
            last.clear()
            last.update(metrics)
            conn.send(("report", tid, step, metrics))
            if conn.recv() == "stop":
                raise _StopTrial

        full = {"seed": spec.seed, **spec.config, **config}
        try:
            fn(full, AdapterTrial(full, spec.budget.max_steps, on_report))
            conn.send(("done", tid, dict(last)))
        except _StopTrial:
            conn.send(("done", tid, None))
        except (RuntimeError, ValueError):
            conn.send(("done", tid, None))


def run_syne_moasha(spec: SearchSpec, n_workers: int, log_path: str, max_seconds: float) -> None:
    """Syne Tune's MOASHA (see the module docstring) over `n_workers` forked worker processes, until a
    report reaches the target, `max_trials` trials have ended or `max_seconds` have passed."""
    from multiprocessing.connection import wait

    import numpy as np
    from syne_tune.backend.trial_status import Trial as SyneTrial
    from syne_tune.optimizer.scheduler import SchedulerDecision
    from syne_tune.optimizer.schedulers.multiobjective.moasha import MOASHA

    from bench.syne_lcbench_mo import ranked_priority

    np.random.seed(spec.seed)  # MOASHA samples configurations and brackets from numpy's global generator
    names = [o.name for o in spec.objectives]
    reference = spec.reference_losses() or tuple(1e9 for _ in names)
    every = int(spec.config.get("eval_every", 50))
    scheduler = MOASHA(
        config_space=syne_config_space(spec.space),
        metrics=names,
        do_minimize=True,  # told losses: a maximised objective negated
        time_attr="steps",
        max_t=spec.budget.max_steps,
        grace_period=min(every, spec.budget.max_steps),
        reduction_factor=3,
        random_seed=spec.seed,
        # its sort read as documented (bench/syne_lcbench_mo.py, `ranked_priority`): as 0.16 ships it, a
        # newcomer that dominates its whole rung can be stopped
        multiobjective_priority=ranked_priority(),
    )
    _prepare(spec)
    ctx = mp.get_context("fork")
    pipes, procs = [], []
    for _ in range(n_workers):
        here, there = ctx.Pipe()
        p = ctx.Process(target=_syne_worker, args=(spec, there, log_path), daemon=True)
        p.start()
        pipes.append(here)
        procs.append(p)
    trials: dict[int, SyneTrial] = {}
    busy: dict[Any, int] = {}
    started = 0
    hit = False
    t0 = time.time()

    def result(step: int, metrics: Mapping[str, float]) -> dict[str, Any]:
        feasible = violation(metrics, spec.bounds) == 0.0
        losses = [
            o.loss(float(metrics[o.name])) if feasible and o.name in metrics else ref
            for o, ref in zip(spec.objectives, reference, strict=True)
        ]
        return {"steps": step + 1, **dict(zip(names, losses, strict=True))}

    def start(conn: Any) -> None:
        nonlocal started
        suggestion = scheduler.suggest()
        trial = SyneTrial(trial_id=started, config=dict(suggestion.config), creation_time=None)
        scheduler.on_trial_add(trial)
        trials[started] = trial
        busy[conn] = started
        conn.send(("run", started, dict(suggestion.config)))
        started += 1

    try:
        for conn in pipes:
            if started < spec.budget.max_trials:
                start(conn)
        while busy and time.time() - t0 < max_seconds:
            for conn in wait(list(busy), timeout=1.0):
                msg = conn.recv()
                if msg[0] == "report":
                    _, tid, step, metrics = msg
                    hit = hit or reached(spec, metrics)
                    decision = scheduler.on_trial_result(trials[tid], result(step, metrics))
                    conn.send("stop" if decision == SchedulerDecision.STOP else "continue")
                    continue
                _, tid, final = msg
                if final is not None and tid in scheduler.trial_info:
                    scheduler.on_trial_complete(trials[tid], result(spec.budget.max_steps - 1, final))
                del busy[conn]
                if not hit and started < spec.budget.max_trials:
                    start(conn)
            if hit:
                return
    finally:
        for p in procs:
            p.kill()
            p.join()


# ---- one run, the race --------------------------------------------------------------------------------


def _child(system: str, spec_json: str, devices: int, log_path: str, max_s: float) -> None:
    spec = parse_spec(json.loads(spec_json))
    if system == "optuna_motpe":
        run_optuna_motpe(spec, devices, log_path, max_s)
    elif system == "syne_moasha":
        run_syne_moasha(spec, devices, log_path, max_s)
    else:
        raise SystemExit(f"unknown system {system}")


def one_run(system: str, spec: SearchSpec, devices: int, max_s: float) -> dict[str, Any]:
    """Run one search in a fresh process; return its wall time, the seconds to the target (None: not
    reached), the trials it started and the reports it made."""
    work = Path(tempfile.mkdtemp(prefix=f"qbench-mo-{system}-"))
    log_path = work / "reports.jsonl"
    log_path.touch()
    t0 = time.time()
    if system in QUANTA_SYSTEMS:  # `quanta run`, timed as a user sees it; its reports come from its store
        from quanta.db.store import Store

        _, code = run_quanta(spec, devices, str(work / "objective.log"), str(work), max_s + 120)
        store = Store(f"sqlite:///{work}/q.db")
        rows = [r for s in store.searches() if s.id is not None for r in store.search_reports(s.id)]
        reports = [(r.at, r.trial_id, dict(r.metrics)) for r in rows]
    else:
        proc = mp.get_context("spawn").Process(
            target=_child, args=(system, spec.model_dump_json(), devices, str(log_path), max_s)
        )
        proc.start()
        proc.join(max_s + 120)
        if proc.is_alive():
            proc.kill()
            proc.join()
        code = proc.exitcode
        reports = read_reports(log_path)
    wall = time.time() - t0
    hit = reached_at(spec, [(at, m) for at, _, m in reports])
    return {
        "wall_s": round(wall, 2),
        "reached_s": None if hit is None else round(max(0.0, hit - t0), 2),
        "trials": len({t for _, t, _ in reports}),  # that reported at least once
        "reports": len(reports),
        "exit_code": code,
    }


def sweep(spec: SearchSpec, n: int, seed: int, console: Console) -> dict[str, Any]:
    """Run `n` random configurations of the space to the full step budget, one at a time in this process
    on one torch thread, and print each one's best feasible report and whether any report reaches the
    target: how reachable a target is (the module docstring). Returns {"configs", "reached", "runs"}."""
    import numpy as np
    import torch

    from bench.peers import AdapterTrial

    torch.set_num_threads(1)
    fn = _prepare(spec)
    space = syne_config_space(spec.space)
    rng = np.random.RandomState(seed)
    runs = []
    for i in range(n):
        params = {k: v.sample(random_state=rng) if hasattr(v, "sample") else v for k, v in space.items()}
        params = {k: v.item() if hasattr(v, "item") else v for k, v in params.items()}
        config = {"seed": spec.seed, **spec.config, **params}
        got: list[dict[str, float]] = []
        t0 = time.time()
        fn(config, AdapterTrial(config, spec.budget.max_steps, lambda step, m, got=got: got.append(dict(m))))
        feasible = [m for m in got if violation(m, spec.bounds) == 0.0]
        first = spec.objectives[0]
        best = max(feasible, key=lambda m: -first.loss(m.get(first.name, math.nan)), default=None)
        hit = any(reached(spec, m) for m in got)
        runs.append({"params": params, "seconds": round(time.time() - t0, 1), "best": best, "reached": hit})
        shown = {k: round(v, 3) for k, v in (best or {}).items() if k in _searched(spec)}
        console.print(f"{i + 1}/{n} {params} {runs[-1]['seconds']} s best feasible {shown} {'REACHED' if hit else ''}")
    hits = sum(r["reached"] for r in runs)
    console.print(f"{hits}/{n} random configurations reach the target {spec.target}")
    return {"configs": n, "reached": hits, "runs": runs}


def parse_target(text: str | None) -> dict[str, float] | None:
    """`accuracy=0.85,params_k=5` as a mapping (None: the spec's)."""
    if not text:
        return None
    out = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep:
            raise SystemExit(f"--target: expected name=value pairs, got {part!r}")
        out[name.strip()] = float(value)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", type=Path, default=SPEC)
    ap.add_argument("--systems", default="default,optuna_motpe,syne_moasha")
    ap.add_argument("--seeds", default="0,1,2,3,4,5,6")
    ap.add_argument(
        "--target", default=None, help="a point target, e.g. accuracy=0.85,params_k=5 (default: the spec's)"
    )
    ap.add_argument("--trials", type=int, default=None, help="trial budget (default: the spec's)")
    ap.add_argument("--max-steps", type=int, default=None, help="step budget of a trial (default: the spec's)")
    ap.add_argument("--max-seconds", type=float, default=600.0, help="each search's wall-time cap")
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--sweep", type=int, default=0, help="instead of racing: run N random configurations to the full budget"
    )
    args = ap.parse_args(argv)
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in QUANTA_SYSTEMS + PEERS]
    if unknown:
        raise SystemExit(f"--systems: unknown {', '.join(unknown)}; known: {', '.join(QUANTA_SYSTEMS + PEERS)}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    target = parse_target(args.target)
    console = Console()
    os.chdir(ROOT)  # the examples' data cache and `quanta run` work from the repository root
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    spec = workload_spec(args.spec, 0, args.trials, args.max_seconds, args.max_steps, target)
    if args.sweep:
        out = {"target": spec.target, "constraints": [c.model_dump(mode="json") for c in spec.constraints]}
        out |= sweep(spec, args.sweep, seeds[0], console)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(out, indent=2))
        return out
    for seed in seeds:
        for system in systems:
            spec = workload_spec(args.spec, seed, args.trials, args.max_seconds, args.max_steps, target)
            console.print(f"seed {seed} {system} ...", end=" ")
            r = {"seed": seed, **one_run(system, spec, args.devices, args.max_seconds)}
            runs[system].append(r)
            console.print(f"target at {r['reached_s']} s, wall {r['wall_s']:.0f} s, {r['reports']} reports")
            out = summarise(args, spec, systems, runs)
            if args.json:  # partial results survive an interrupted benchmark
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(out, indent=2))
    out = summarise(args, spec, systems, runs)
    print_table(out, console)
    if args.json:
        console.print(f"wrote {args.json}")
    return out


def summarise(
    args: argparse.Namespace, spec: SearchSpec, systems: list[str], runs: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for system in systems:
        done = runs[system]
        if not done:
            continue
        secs = [miss_or_hit(r["reached_s"], r["wall_s"], args.max_seconds) for r in done]
        q1, q3 = quartiles(secs)
        results[system] = {
            "median_s": statistics.median(secs),
            "q1_s": q1,
            "q3_s": q3,
            "runs_s": secs,
            "reached": [r["reached_s"] is not None for r in done],
            "device_s_median": statistics.median(secs) * args.devices,
            "runs": done,
        }
    quanta = next((s for s in systems if s in QUANTA_SYSTEMS and s in results), None)
    ratios = {}
    if quanta is not None and results[quanta]["median_s"] > 0:
        ratios = {
            p: results[p]["median_s"] / results[quanta]["median_s"] for p in systems if p in PEERS and p in results
        }
    spec_path = args.spec.resolve()
    return {
        "workload": {
            "spec": str(spec_path.relative_to(ROOT)) if spec_path.is_relative_to(ROOT) else str(spec_path),
            "trials": spec.budget.max_trials,
            "max_steps": spec.budget.max_steps,
            "max_seconds": args.max_seconds,
            "devices": args.devices,
            "seeds": sorted({r["seed"] for rs in runs.values() for r in rs}),
        },
        "target": spec.target,
        "constraints": [c.model_dump(mode="json") for c in spec.constraints],
        "systems": results,
        "ratios": ratios,
        "command": "python " + " ".join(sys.argv),
    }


def print_table(out: dict[str, Any], console: Console) -> None:
    target = ", ".join(f"{k} {v:g}" for k, v in (out["target"] or {}).items())
    bounds = ", ".join(
        f"{c['name']} {'<= ' + format(c['max'], 'g') if c.get('max') is not None else ''}"
        f"{' >= ' + format(c['min'], 'g') if c.get('min') is not None else ''}"
        for c in out["constraints"]
    )
    n = len(out["workload"]["seeds"])
    table = Table(title=f"time to the point target ({target}; {bounds or 'no constraint'}), {n} seeds")
    for col in ("system", "median s", "q1-q3 s", "hits", "device-s", "peer / this"):
        table.add_column(col, justify="left" if col == "system" else "right")
    for system, r in out["systems"].items():
        ratio = out["ratios"].get(system)
        table.add_row(
            system,
            f"{r['median_s']:.1f}",
            f"{r['q1_s']:.1f}-{r['q3_s']:.1f}",
            f"{sum(r['reached'])}/{len(r['reached'])}",
            f"{r['device_s_median']:.0f}",
            "" if ratio is None else f"{ratio:.2f}x",
        )
    console.print(table)


if __name__ == "__main__":
    main()
