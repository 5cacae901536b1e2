"""Population-based training, live: Quanta's PBT against Ray Tune's and Syne Tune's, same population,
same devices, same perturbation interval and mutable space, seeds interleaved; and Quanta's default
search given the same device-seconds, for the best fixed configuration.

The workload (`WORKLOAD`): `examples/mnist1d.py`'s 1-D CNN (64 channels, batch 64, dropout 0.1) trained
with SGD (momentum 0.9) at a *constant* learning rate for 10,000 mini-batches, accuracy on the test split
every 250: the regime where a schedule matters (a rate that learns fast early is too high late). The one
mutable parameter is `lr`, loguniform on [0.001, 0.5]. Its target comes from a sweep of fixed rates run to
the full budget (`--sweep`, written to `bench/results/targets_pbt.json`): the best accuracy the best
fixed rate reached.

Systems, each on 2 CPU devices (one core, one torch thread per trial), population 4, interval 1,000
steps, quantile 0.25, perturbation factors 0.8 / 1.2, resample probability 0.25:

- `quanta_pbt`: `quanta run` on the spec with `scheduler: {policy: pbt, ...}` (its 4 members time-sliced
  on the 2 devices; an exploit copies the state in host memory or through the checkpoint).
- `ray_pbt`: Ray Tune's `PopulationBasedTraining` (asynchronous), 4 trials at one CPU each (it pauses
  trials that are ahead so that the ones behind catch up), the trainable reporting with a checkpoint at
  every evaluation (`tune.report(checkpoint=...)`) and restoring from `tune.get_checkpoint()`.
- `syne_pbt`: Syne Tune's `PopulationBasedTraining` scheduler (`syne_tune.optimizer.schedulers`, 0.16)
  driven by a loop of this module with real training in one forked worker process per device (what its
  local backend does, less its subprocess per trial and its disk-based result passing): a report goes to
  `on_trial_result`; a trial it stops to exploit ends and the freed worker starts the suggestion it then
  makes, a new trial restoring the cloned trial's checkpoint. The loop starts no new random configuration
  beyond the population (Syne Tune's PBT would: its population is refilled from the searcher), so every
  system trains 4 lineages to the step budget.
- `default`: Quanta's default search (`quanta run` with no policy or searcher named; `lr` not mutable,
  up to 100 trials) for as many device-seconds as that seed's `quanta_pbt` run took (its wall time on the
  same 2 devices): the best fixed configuration a user would find with the same compute.

Measured per run: the wall seconds from the system's launch (start-up counts) to its first report at or
above the target (a miss counts as its whole wall time and is marked), and the best *final* accuracy: the
best report at the last step of the budget (a member's accuracy after 10,000 steps). Every system runs its
population to the end (no stop at the target), so the final accuracy is measured too. Also the best
accuracy of any report (`best_any`): the default search's figure, whose trials seldom reach the last step
within the PBT's device-seconds (pause-ASHA trains many configurations part of the way), so its best
configuration is judged by its best report, which favours it.

    python bench/pbt.py --sweep                 # the target: 6 fixed rates x 10,000 steps, 2 at a time
    python bench/pbt.py --seeds 0,1,2,3,4,5,6 --json bench/results/pbt.json
    python bench/pbt.py --systems quanta_pbt,quanta_pbt@500,syne_pbt,syne_pbt@500 --seeds 0    # intervals

A system named `name@N` runs at a perturbation interval of N steps instead of `--interval`'s.

Prints a table (median seconds to the target with quartiles, hits, median and best final accuracy; the
ratio of each peer's median to Quanta's) and writes JSON shaped {"workload", "target", "systems": {name:
{"runs": [{"seed", "wall_s", "reached_s", "best_final", "best_any", "exit_code"}], "median_reached_s",
"reached", "median_best_final", "median_best_any"}}, "ratios": {peer: peer median / quanta_pbt median}}.
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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from quanta.spec import SearchSpec, parse_spec  # noqa: E402

TARGETS = ROOT / "bench" / "results" / "targets_pbt.json"
SYSTEMS = ("quanta_pbt", "ray_pbt", "syne_pbt", "default")
PEERS = ("ray_pbt", "syne_pbt")
LR = (0.001, 0.5)
SWEEP_LRS = (0.003, 0.01, 0.03, 0.1, 0.2, 0.4)
WORKLOAD: dict[str, Any] = {
    "trainable": "examples.mnist1d:train",
    "config": {
        "channels": 64,
        "batch_size": 64,
        "dropout": 0.1,
        "optimizer": {"name": "sgd", "momentum": 0.9},
        "eval_every": 250,
    },
    "max_steps": 10_000,
    "population": 4,
    "interval": 1_000,
    "quantile": 0.25,
    "perturb": (0.8, 1.2),
    "resample_p": 0.25,
}


def system_interval(name: str, interval: int) -> tuple[str, int]:
    """(system, perturbation interval) of a `--systems` entry: `quanta_pbt@500` is `quanta_pbt` at an
    interval of 500 steps, a name without `@` runs at `interval` (`--interval`)."""
    base, _, steps = name.partition("@")
    if not steps:
        return base, interval
    if not steps.isdigit() or int(steps) < 1:
        raise SystemExit(f"--systems: {name}: the interval after @ must be a positive number of steps")
    return base, int(steps)


def spec_for(system: str, seed: int, max_steps: int, interval: int, population: int, max_seconds: float) -> SearchSpec:
    """The search spec `system` runs (peers read its space, budget and PBT knobs; Quanta runs it)."""
    pbt = system != "default"
    space: dict[str, Any] = {"lr": {"loguniform": list(LR), **({"mutable": True} if pbt else {})}}
    raw: dict[str, Any] = {
        "name": f"pbt-{system}",
        "trainable": WORKLOAD["trainable"],
        "space": space,
        "metric": {"name": "accuracy", "goal": "maximize"},
        "budget": {
            "max_trials": population if pbt else 100,
            "max_steps": max_steps,
            "max_seconds": max_seconds,
        },
        "seed": seed,
        "config": {**WORKLOAD["config"], "seed": seed},
        "search": {"n_startup": 10} if not pbt else {"algorithm": "random"},
    }
    if pbt:
        raw["parallelism"] = population
        raw["scheduler"] = {
            "policy": "pbt",
            "population": population,
            "interval_steps": interval,
            "quantile": WORKLOAD["quantile"],
            "perturb": list(WORKLOAD["perturb"]),
            "resample_p": WORKLOAD["resample_p"],
            "seed": seed,
        }
    return parse_spec(raw)


def append_report(path: str, trial: Any, step: int, accuracy: float) -> None:
    """One report as a JSON line, appended atomically (O_APPEND, one short write) by any process."""
    line = json.dumps({"at": time.time(), "trial": str(trial), "step": step, "accuracy": accuracy}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_reports(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
    return out


def _adapter(
    config: dict[str, Any], max_steps: int, log: str, tid: Any, ckpt: str | None, resume: bool, **kw: Any
) -> Any:
    """`bench.peers.AdapterTrial` whose reports go to the log, with `lr` mutable: a restore under another
    rate brings the restored optimizer to it (as Quanta's restore of an exploit does)."""
    from bench.peers import AdapterTrial

    on_report = kw.pop("on_report", None)

    def report(step: int, metrics: dict[str, float]) -> None:
        acc = metrics.get("accuracy")
        if acc is not None and math.isfinite(acc):
            append_report(log, tid, step, acc)
        if on_report is not None:
            on_report(step, metrics)

    trial = AdapterTrial(config, max_steps, report, checkpoint_path=ckpt, resume=resume, **kw)
    trial.mutable = ("lr",)
    return trial


# ---- Ray Tune's PBT ------------------------------------------------------------------------------------


def _ray_trainable(config: dict, run: dict) -> None:
    """One Ray Tune trial: the trainable under an adapter that reports each evaluation to Tune with a
    checkpoint of the trial (written at the next mini-batch boundary), restoring from Tune's checkpoint
    when Tune starts it from one (a resume after a pause, or an exploit's clone)."""
    import shutil

    import torch
    from ray import tune

    from bench.peers import load

    torch.set_num_threads(1)
    fn = load(run["trainable"])
    params = {**run["fixed"], "lr": float(config["lr"])}
    work = Path(tempfile.mkdtemp(prefix="ray-pbt-"))
    local = work / "trial.pt"
    restored = tune.get_checkpoint()
    if restored is not None:
        with restored.as_directory() as folder:
            shutil.copy(Path(folder) / "trial.pt", local)
    tid = tune.get_context().get_trial_id()

    def on_checkpoint(path: str, step: int, metrics: dict[str, float]) -> None:
        folder = Path(tempfile.mkdtemp(dir=work))
        shutil.copy(path, folder / "trial.pt")
        result = {"accuracy": float(metrics.get("accuracy", 0.0)), "step": step + 1}
        tune.report(result, checkpoint=tune.Checkpoint.from_directory(str(folder)))
        shutil.rmtree(folder, ignore_errors=True)

    trial = _adapter(
        params, run["max_steps"], run["log"], tid, str(local), restored is not None, on_checkpoint=on_checkpoint
    )
    try:
        fn(params, trial)
        trial.flush()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_ray_pbt(spec: SearchSpec, log_path: str, devices: int, max_seconds: float) -> None:
    import random

    import ray
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    knobs = spec.scheduler
    random.seed(spec.seed)  # Ray Tune's PBT draws from the `random` module (it takes no seed)
    run = {
        "trainable": spec.trainable,
        "log": log_path,
        "max_steps": spec.budget.max_steps,
        "fixed": {"seed": spec.seed, **spec.config},
    }
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    ray.init(num_cpus=devices, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        pbt = PopulationBasedTraining(
            time_attr="step",
            perturbation_interval=knobs.interval_steps,  # type: ignore[union-attr]
            quantile_fraction=knobs.quantile,  # type: ignore[union-attr]
            resample_probability=knobs.resample_p,  # type: ignore[union-attr]
            perturbation_factors=(max(knobs.perturb), min(knobs.perturb)),  # type: ignore[union-attr]
            hyperparam_mutations={"lr": tune.loguniform(*LR)},
        )
        tuner = tune.Tuner(
            tune.with_resources(tune.with_parameters(_ray_trainable, run=run), {"cpu": 1}),
            param_space={"lr": tune.loguniform(*LR)},
            tune_config=tune.TuneConfig(
                metric="accuracy",
                mode="max",
                scheduler=pbt,
                num_samples=knobs.population,  # type: ignore[union-attr]
                time_budget_s=max_seconds,
                reuse_actors=True,
                search_alg=tune.search.BasicVariantGenerator(random_state=spec.seed),
            ),
            run_config=tune.RunConfig(
                verbose=0, storage_path=str(Path(log_path).parent / "ray"), stop={"step": spec.budget.max_steps}
            ),
        )
        tuner.fit()
    finally:
        ray.shutdown()


# ---- Syne Tune's PBT -----------------------------------------------------------------------------------


class _Stop(Exception):
    """Raised in a worker when the scheduler stops its trial."""


def _syne_worker(spec: SearchSpec, conn: Any, log_path: str, work: str) -> None:
    """Train the trials the loop sends (`("run", id, config, clone_of)`), one at a time: a trial cloned
    from another starts from a copy of that trial's checkpoint. Each report goes to the loop
    (`("report", id, step, accuracy)`) after the trial's checkpoint is written, and waits for "continue"
    or "stop"; `("done", id, accuracy)` at the end (None: stopped or failed)."""
    import shutil

    import torch

    from bench.peers import load

    torch.set_num_threads(1)
    fn = load(spec.trainable)
    while True:
        msg = conn.recv()
        if msg is None:
            return
        _, tid, config, clone_of = msg
        ckpt = Path(work) / f"trial-{tid}.pt"
        if clone_of is not None:
            shutil.copy(Path(work) / f"trial-{clone_of}.pt", ckpt)
        last: dict[str, float] = {}

        def on_checkpoint(path: str, step: int, metrics: dict[str, float], tid: int = tid, last: dict = last) -> None:
            last.clear()
            last.update(metrics)
            conn.send(("report", tid, step, float(metrics.get("accuracy", 0.0))))
            if conn.recv() == "stop":
                raise _Stop

        full = {"seed": spec.seed, **spec.config, "lr": float(config["lr"])}
        trial = _adapter(
            full,
            spec.budget.max_steps,
            log_path,
            f"s{tid}",
            str(ckpt),
            clone_of is not None,
            on_checkpoint=on_checkpoint,
        )
        try:
            fn(full, trial)
            trial.flush()
            conn.send(("done", tid, last.get("accuracy")))
        except _Stop:
            conn.send(("done", tid, None))
        except (RuntimeError, ValueError):
            conn.send(("done", tid, None))


def run_syne_pbt(spec: SearchSpec, log_path: str, devices: int, max_seconds: float) -> None:
    """Syne Tune's PopulationBasedTraining over `devices` forked workers (see the module docstring)."""
    from multiprocessing.connection import wait

    import numpy as np
    from syne_tune import config_space as cs
    from syne_tune.backend.trial_status import Trial as SyneTrial
    from syne_tune.optimizer.scheduler import SchedulerDecision
    from syne_tune.optimizer.schedulers import PopulationBasedTraining

    knobs = spec.scheduler
    np.random.seed(spec.seed)
    scheduler = PopulationBasedTraining(
        config_space={"lr": cs.loguniform(*LR)},
        metric="accuracy",
        do_minimize=False,
        time_attr="steps",
        max_t=spec.budget.max_steps,
        random_seed=spec.seed,
        population_size=knobs.population,  # type: ignore[union-attr]
        perturbation_interval=knobs.interval_steps,  # type: ignore[union-attr]
        quantile_fraction=knobs.quantile,  # type: ignore[union-attr]
        resample_probability=knobs.resample_p,  # type: ignore[union-attr]
    )
    from examples.mnist1d import prepare

    prepare()
    work = tempfile.mkdtemp(prefix="syne-pbt-", dir=Path(log_path).parent)
    ctx = mp.get_context("fork")
    pipes, procs = [], []
    for _ in range(devices):
        here, there = ctx.Pipe()
        p = ctx.Process(target=_syne_worker, args=(spec, there, log_path, work), daemon=True)
        p.start()
        pipes.append(here)
        procs.append(p)
    trials: dict[int, SyneTrial] = {}
    busy: dict[Any, int] = {}
    started = fresh = 0
    t0 = time.time()

    def start(conn: Any) -> bool:
        nonlocal started, fresh
        if not scheduler.trial_decisions_stack and fresh >= knobs.population:  # type: ignore[union-attr]
            return False  # the population is trained: no new random member
        suggestion = scheduler.suggest()
        clone = suggestion.checkpoint_trial_id
        fresh += clone is None
        trial = SyneTrial(trial_id=started, config=dict(suggestion.config), creation_time=None)
        scheduler.on_trial_add(trial)
        trials[started] = trial
        busy[conn] = started
        conn.send(("run", started, dict(suggestion.config), clone))
        started += 1
        return True

    try:
        for conn in pipes:
            start(conn)
        while busy and time.time() - t0 < max_seconds:
            for conn in wait(list(busy), timeout=1.0):
                msg = conn.recv()
                if msg[0] == "report":
                    _, tid, step, acc = msg
                    decision = scheduler.on_trial_result(trials[tid], {"steps": step + 1, "accuracy": acc})
                    conn.send("stop" if decision == SchedulerDecision.STOP else "continue")
                    continue
                _, tid, final = msg
                if final is not None:
                    scheduler.on_trial_complete(trials[tid], {"steps": spec.budget.max_steps, "accuracy": final})
                del busy[conn]
                start(conn)
    finally:
        for p in procs:
            p.kill()
            p.join()


# ---- one run -------------------------------------------------------------------------------------------


def _child(system: str, spec_json: str, log_path: str, devices: int, max_s: float) -> None:
    # From the module by its name, not `__mp_main__`: Ray Tune's workers import the trainable by reference.
    from bench import pbt

    spec = parse_spec(json.loads(spec_json))
    os.chdir(ROOT)
    {"ray_pbt": pbt.run_ray_pbt, "syne_pbt": pbt.run_syne_pbt}[system](spec, log_path, devices, max_s)


def one_run(system: str, spec: SearchSpec, devices: int, target: float, max_s: float) -> dict[str, Any]:
    """Run one search in a fresh process; the seconds to the target (None: missed), the best final and
    best any accuracy, the wall time. Only reports made within `max_s` of the launch count (a search
    overruns its cap by the time its last trials take to stop)."""
    work = Path(tempfile.mkdtemp(prefix=f"qbench-pbt-{system}-"))
    log = work / "reports.jsonl"
    log.touch()
    t0 = time.time()
    if system in ("quanta_pbt", "default"):
        from bench.search import run_quanta
        from quanta.db.store import Store

        _, code = run_quanta(spec, devices, str(work / "objective.log"), str(work), max_s + 120)
        store = Store(f"sqlite:///{work}/q.db")
        rows = [r for s in store.searches() if s.id is not None for r in store.search_reports(s.id)]
        reports = [
            {"at": r.at, "trial": r.trial_id, "step": r.step, "accuracy": r.metrics.get("accuracy")}
            for r in rows
            if r.metrics.get("accuracy") is not None
        ]
    else:
        proc = mp.get_context("spawn").Process(
            target=_child, args=(system, spec.model_dump_json(), str(log), devices, max_s)
        )
        proc.start()
        proc.join(max_s + 120)
        if proc.is_alive():
            proc.kill()
            proc.join()
        code = proc.exitcode
        reports = read_reports(log)
    wall = time.time() - t0
    reports = [r for r in reports if r["at"] - t0 <= max_s]
    hits = [r["at"] - t0 for r in reports if r["accuracy"] >= target]
    last = spec.budget.max_steps - 1
    finals = [r["accuracy"] for r in reports if r["step"] == last]
    return {
        "wall_s": round(wall, 2),
        "reached_s": round(max(0.0, min(hits)), 2) if hits else None,
        "best_final": max(finals) if finals else None,
        "best_any": max((r["accuracy"] for r in reports), default=None),
        "finals": len(finals),
        "reports": len(reports),
        "exit_code": code,
    }


# ---- the sweep for the target --------------------------------------------------------------------------


def _sweep_one(lr: float, max_steps: int) -> dict[str, Any]:
    import torch

    from bench.peers import AdapterTrial
    from examples.mnist1d import train

    torch.set_num_threads(1)
    config = {**WORKLOAD["config"], "seed": 0, "lr": lr}
    got: list[tuple[int, float]] = []
    t0 = time.time()
    train(config, AdapterTrial(config, max_steps, lambda step, m: got.append((step, m.get("accuracy", math.nan)))))
    accs = [a for _, a in got if math.isfinite(a)]
    return {
        "lr": lr,
        "seconds": round(time.time() - t0, 1),
        "best": max(accs, default=None),
        "final": got[-1][1] if got else None,
        "curve": got,
    }


def sweep(lrs: tuple[float, ...], max_steps: int, devices: int, console: Console) -> dict[str, Any]:
    """Each fixed rate of `lrs` to the full budget, `devices` at a time; the target is the best accuracy
    the best of them reached (a PBT that changes its rate should reach it, and sooner)."""
    from examples.mnist1d import prepare

    os.chdir(ROOT)
    prepare()
    with mp.get_context("fork").Pool(devices) as pool:
        runs = pool.starmap(_sweep_one, [(lr, max_steps) for lr in lrs])
    for r in runs:
        console.print(f"lr {r['lr']:g}: best {r['best']:.4f}, final {r['final']:.4f} ({r['seconds']} s)")
    best = max(runs, key=lambda r: r["best"] or 0.0)
    return {"max_steps": max_steps, "workload": WORKLOAD, "runs": runs, "target": best["best"], "target_lr": best["lr"]}


# ---- the race ------------------------------------------------------------------------------------------


def quartiles(xs: list[float]) -> tuple[float, float]:
    if len(xs) < 2:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def summarise(runs: Mapping[str, list[dict[str, Any]]], target: float) -> dict[str, Any]:
    systems: dict[str, Any] = {}
    for name, rs in runs.items():
        times = [r["reached_s"] if r["reached_s"] is not None else r["wall_s"] for r in rs]
        finals = [r["best_final"] for r in rs if r["best_final"] is not None]
        anys = [r["best_any"] for r in rs if r["best_any"] is not None]
        q1, q3 = quartiles(times) if times else (None, None)
        systems[name] = {
            "runs": rs,
            "median_reached_s": statistics.median(times) if times else None,
            "q1_s": q1,
            "q3_s": q3,
            "reached": sum(r["reached_s"] is not None for r in rs),
            "median_best_final": statistics.median(finals) if finals else None,
            "best_final": max(finals, default=None),
            "median_best_any": statistics.median(anys) if anys else None,
        }
    ours = systems.get("quanta_pbt", {}).get("median_reached_s")
    ratios = {  # every peer's, at each interval it ran at (`name@N`): its best setup is among them
        p: systems[p]["median_reached_s"] / ours
        for p in systems
        if system_interval(p, 0)[0] in PEERS and ours and systems[p]["median_reached_s"] is not None
    }
    return {"target": target, "systems": systems, "ratios": ratios}


def print_table(out: dict[str, Any], console: Console) -> None:
    table = Table(title=f"PBT on MNIST-1D, constant-rate SGD: seconds to accuracy {out['target']:.4f}")
    for col in ("system", "median s (quartiles)", "reached", "median best final", "best final", "median best any"):
        table.add_column(col, justify="left" if col == "system" else "right")
    for name, s in out["systems"].items():
        n = len(s["runs"])
        med = "" if s["median_reached_s"] is None else f"{s['median_reached_s']:.1f} ({s['q1_s']:.1f}-{s['q3_s']:.1f})"
        mf = "" if s["median_best_final"] is None else f"{s['median_best_final']:.4f}"
        bf = "" if s["best_final"] is None else f"{s['best_final']:.4f}"
        ba = "" if s["median_best_any"] is None else f"{s['median_best_any']:.4f}"
        table.add_row(name, med, f"{s['reached']}/{n}", mf, bf, ba)
    console.print(table)
    for peer, r in out["ratios"].items():
        console.print(f"{peer} median / quanta_pbt median: {r:.2f}x")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated of {', '.join(SYSTEMS)}")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--max-seconds", type=float, default=900.0, help="wall-time cap of each PBT run")
    ap.add_argument("--max-steps", type=int, default=WORKLOAD["max_steps"], help="mini-batches per member")
    ap.add_argument("--interval", type=int, default=WORKLOAD["interval"], help="perturbation interval, in steps")
    ap.add_argument("--population", type=int, default=WORKLOAD["population"])
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--target", type=float, default=None, help=f"default: {TARGETS.name}'s")
    ap.add_argument("--sweep", action="store_true", help="run the fixed rates and write the target file")
    ap.add_argument("--sweep-lrs", default=",".join(f"{x:g}" for x in SWEEP_LRS))
    ap.add_argument("--targets-file", type=Path, default=TARGETS)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    console = Console()
    if args.sweep:
        lrs = tuple(float(x) for x in args.sweep_lrs.split(","))
        found = sweep(lrs, args.max_steps, args.devices, console)
        args.targets_file.parent.mkdir(parents=True, exist_ok=True)
        args.targets_file.write_text(json.dumps(found, indent=2))
        console.print(f"target {found['target']:.4f} (lr {found['target_lr']:g}); wrote {args.targets_file}")
        return found
    target = args.target
    if target is None:
        if not args.targets_file.exists():
            raise SystemExit(
                f"no target: run `python bench/pbt.py --sweep` (writes {args.targets_file}) or pass --target"
            )
        target = float(json.loads(args.targets_file.read_text())["target"])
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if system_interval(s, 1)[0] not in SYSTEMS or s.startswith("default@")]
    if unknown:
        raise SystemExit(f"--systems: unknown {', '.join(unknown)}; expected {', '.join(SYSTEMS)}")
    if "default" in systems and "quanta_pbt" not in systems:
        raise SystemExit("--systems: default takes the device-seconds of quanta_pbt's run: name both")
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for seed in [int(x) for x in args.seeds.split(",")]:
        pbt_wall = args.max_seconds
        for system in [s for s in systems if s != "default"] + (["default"] if "default" in systems else []):
            cap = pbt_wall if system == "default" else args.max_seconds
            base, interval = system_interval(system, args.interval)
            spec = spec_for(base, seed, args.max_steps, interval, args.population, cap)
            r = one_run(base, spec, args.devices, target, cap)
            r["seed"] = seed
            if system == "quanta_pbt":
                pbt_wall = r["wall_s"]
            runs[system].append(r)
            console.print(f"seed {seed} {system}: {r}")
    out = {
        "workload": {**WORKLOAD, "max_steps": args.max_steps, "interval": args.interval, "population": args.population},
        "devices": args.devices,
        "max_seconds": args.max_seconds,
        "seeds": args.seeds,
        **summarise(runs, target),
    }
    print_table(out, console)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
        console.print(f"wrote {args.json}")
    return out


if __name__ == "__main__":
    main()
