"""Time-slicing mechanism benchmark: what suspend/resume at mini-batch boundaries costs.

- efficiency: 4 identical trials on one device, time-sliced (timeslice policy) at quanta of 0.5, 2
  and 10 s, versus the same 4 trials run one after another (fifo policy): ratio of aggregate
  mini-batches per second (= fifo wall time / time-sliced wall time for the same work). With
  `--repeats N` the sequential run and each time-sliced one are run in turn N times and each
  efficiency is the median of the N ratios of runs made side by side (one run swings by up to 15 %).
  Beside it, where a loss would come from: the share of wall time some trial computed ("device
  busy": gaps between quanta) and the median mini-batch while computing (slower steps).
- park latency (suspend request to parked) p50/p99 and the mini-batch time, resume latency p50.
- in-node migration (request to computing on the other device) for 1M and 10M-parameter models.
- trial start from the pre-warmed template versus a cold Python process that imports torch.

Prints a table and writes --json PATH. Run: python bench/timeslice.py --json bench/results/timeslice.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.trainables import param_count  # noqa: E402
from quanta.controller import Controller, ControllerOptions  # noqa: E402
from quanta.db.store import Store  # noqa: E402
from quanta.devices import parse_devices  # noqa: E402
from quanta.executor.actions import Migrate, Reported, Resumed, Run, Started, Stop, TrialLaunch  # noqa: E402
from quanta.executor.runtime.base import LaunchFn  # noqa: E402
from quanta.executor.runtime.local import LocalRuntime  # noqa: E402
from quanta.spec import parse_spec  # noqa: E402

TRAINABLE = "bench.trainables:mlp"


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[k]


# The held-out workload of the live suite (`examples/breast_cancer.yaml`), one fixed configuration: what
# a user's small trainable costs when time-sliced, evaluation every 100 steps included.
HELD_OUT = "examples.breast_cancer:train"
HELD_OUT_CONFIG = {
    "lr": 1e-3,
    "hidden": 64,
    "layers": 2,
    "dropout": 0.1,
    "weight_decay": 1e-4,
    "batch_size": 32,
    "optimizer": {"name": "adam"},
    "eval_every": 100,
}


def run_search(
    policy: str,
    quantum: float,
    steps: int,
    width: int,
    tmp: Path,
    trainable: str = TRAINABLE,
    checkpoints: bool = False,
) -> dict:
    """4 identical trials on one single-core CPU device under `policy`; returns wall time and latencies.
    `trainable`: the benchmark's MLP (`width`) or `HELD_OUT`; `checkpoints`: the product's checkpoint
    cadence (every few quanta, written while parked, and every so many seconds), else none."""
    held_out = trainable == HELD_OUT
    scheduler: dict[str, object] = {"policy": policy, "quantum_s": quantum}
    if not checkpoints:
        scheduler.update(checkpoint_every_quanta=10**6, checkpoint_every_s=10**6)
    spec = parse_spec(
        {
            "name": f"bench-{policy}-{quantum}",
            "trainable": trainable,
            "space": {"seed": {"choice": [0]}},
            "metric": {"name": "accuracy" if held_out else "loss", "goal": "maximize" if held_out else "minimize"},
            "budget": {"max_trials": 4, "max_steps": steps, "max_seconds": 36000},
            "parallelism": 4,
            "search": {"algorithm": "random"},
            "scheduler": scheduler,
            "config": dict(HELD_OUT_CONFIG) if held_out else {"width": width, "depth": 4},
        }
    )
    tmp.mkdir(parents=True, exist_ok=True)
    db = tmp / f"{policy}-{quantum}.db"
    store = Store(f"sqlite:///{db}")
    device = parse_devices("cpu:2")[:1]  # one core, one thread
    rt = LocalRuntime(device, warm_modules=[trainable.partition(":")[0]])
    ctl = Controller(store, rt, ControllerOptions(workdir=tmp / "work"))
    rt.wait_ready()  # the template's start-up is not what this measures
    try:
        sid = ctl.submit(spec)
        t0 = time.monotonic()
        ctl.run(sid)
        wall = time.monotonic() - t0
    finally:
        ctl.close()
    trials = store.trials(sid)
    assert all(t.steps == steps for t in trials), [(t.id, t.status, t.steps) for t in trials]
    quanta = store.quanta(sid)
    rates = [q.rate for q in quanta if q.steps >= 5 and not q.packed_with]
    busy = sum(q.ended_at - q.started_at for q in quanta)
    return {
        "wall_s": wall,
        "steps": 4 * steps,
        "park_ms": [lat.ms for lat in store.latencies("park")],
        "resume_ms": [lat.ms for lat in store.latencies("resume")],
        "minibatch_ms": 1000 / statistics.median(rates) if rates else float("nan"),
        # time some trial was computing / wall time: separates scheduling gaps from slower steps
        "busy_fraction": busy / wall,
        "steps_per_s": 4 * steps / wall,
    }


def migration_ms(width: int, depth: int, tmp: Path, repeats: int = 5) -> float:
    """Median time from a Migrate request on a running trial to its Resumed event on the other CPU
    device (includes finishing the current mini-batch)."""
    cfg = {"width": width, "depth": depth, "steps": 10**9}

    def launch(tid: int) -> TrialLaunch:
        return TrialLaunch(tid, TRAINABLE, cfg, 10**9, str(tmp / f"mig-{tid}.pt"), checkpoint_every_s=10**6)

    rt = LocalRuntime(parse_devices("cpu:2"), LaunchFn(launch), warm_modules=["bench.trainables"])
    out = []
    try:
        rt.apply(1, [Run(1, ("cpu:0",))])
        while not any(isinstance(e, Reported) for e in rt.poll(5)):
            pass
        where, round_no = "cpu:0", 2
        for _ in range(repeats):
            where = "cpu:1" if where == "cpu:0" else "cpu:0"
            t0 = time.monotonic()
            rt.apply(round_no, [Migrate(1, (where,))])
            round_no += 1
            while True:
                evs = [e for e in rt.poll(5) if isinstance(e, Resumed)]
                if evs:
                    out.append((time.monotonic() - t0) * 1000)
                    break
            time.sleep(0.3)
        rt.apply(round_no, [Stop(1)])
    finally:
        rt.close()
    return statistics.median(out)


def start_ms(tmp: Path, repeats: int = 5) -> tuple[float, float]:
    """Median start latency: from the template (fork) and from a cold process importing torch."""

    def launch(tid: int) -> TrialLaunch:
        return TrialLaunch(tid, TRAINABLE, {"width": 64, "steps": 1}, 1, str(tmp / f"s-{tid}.pt"))

    rt = LocalRuntime(parse_devices("cpu:2"), LaunchFn(launch), warm_modules=["bench.trainables"])
    warm = []
    try:
        for i in range(1, repeats + 1):
            rt.apply(i, [Run(i, ("cpu:0",))])
            got = None
            while got is None:
                got = next((e for e in rt.poll(5) if isinstance(e, Started)), None)
            warm.append(got.start_ms)
            time.sleep(0.2)
    finally:
        rt.close()
    cold = []
    code = "import torch, quanta.sdk; print('ready', flush=True)"
    for _ in range(repeats):
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True)
        cold.append((time.monotonic() - t0) * 1000)
    return statistics.median(warm), statistics.median(cold)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--steps", type=int, default=1500, help="mini-batches per trial")
    ap.add_argument("--width", type=int, default=256, help="MLP width of the time-sliced trials")
    ap.add_argument("--quanta", default="0.5,2,10")
    ap.add_argument("--repeats", type=int, default=1, help="sequential and time-sliced runs made in turn")
    ap.add_argument("--no-latency", action="store_true", help="efficiency only: no migration or start runs")
    ap.add_argument("--held-out", action="store_true", help="time-slice the live suite's held-out workload")
    ap.add_argument("--checkpoints", action="store_true", help="with the product's checkpoint cadence")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="quanta-bench-"))
    console = Console()

    quanta = [float(x) for x in args.quanta.split(",")]
    trainable = HELD_OUT if args.held_out else TRAINABLE
    ratios: dict[str, list[float]] = {f"{q:g}": [] for q in quanta}
    busy_runs: dict[str, list[float]] = {"sequential": [], **{f"{q:g}": [] for q in quanta}}
    step_runs: dict[str, list[float]] = {"sequential": [], **{f"{q:g}": [] for q in quanta}}
    parks, resumes, bases = [], [], []
    for rep in range(args.repeats):
        # Every other repeat runs the time-sliced ones first: a machine that speeds up or slows down over
        # the run does not favour one order.
        runs: list[float | None] = [None, *quanta] if rep % 2 == 0 else [*quanta, None]
        got: dict[float | None, dict] = {}
        for q in runs:
            name = "sequential baseline (fifo)" if q is None else f"time-sliced at {q:g} s"
            console.print(f"[{rep + 1}/{args.repeats}] {name}: 4 x {args.steps} steps, one CPU core ...")
            policy, quantum = ("fifo", 2.0) if q is None else ("timeslice", q)
            got[q] = run_search(policy, quantum, args.steps, args.width, tmp / f"r{rep}", trainable, args.checkpoints)
        base = got[None]
        bases.append(base)
        busy_runs["sequential"].append(base["busy_fraction"])
        step_runs["sequential"].append(base["minibatch_ms"])
        for q in quanta:
            r = got[q]
            ratios[f"{q:g}"].append(base["wall_s"] / r["wall_s"])
            busy_runs[f"{q:g}"].append(r["busy_fraction"])
            step_runs[f"{q:g}"].append(r["minibatch_ms"])
            parks += r["park_ms"]
            resumes += r["resume_ms"]
    efficiency = {q: statistics.median(v) for q, v in ratios.items()}
    busy = {q: statistics.median(v) for q, v in busy_runs.items()}
    base = bases[len(bases) // 2]
    mig: dict[str, float] = {}
    sizes: dict[str, int] = {}
    warm = cold = float("nan")
    if not args.no_latency:
        console.print("migration and start latency ...")
        # width 3745 x depth 2 = 1.0M parameters; width 2180 x depth 4 = 10.1M
        mig = {"1M": migration_ms(3745, 2, tmp), "10M": migration_ms(2180, 4, tmp)}
        sizes = {"1M": param_count(3745, 2), "10M": param_count(2180, 4)}
        warm, cold = start_ms(tmp)
    result = {
        "efficiency": efficiency,
        "park_ms_p50": pct(parks, 50),
        "park_ms_p99": pct(parks, 99),
        "parks": len(parks),
        "minibatch_ms": statistics.median(step_runs["sequential"]),
        "repeats": args.repeats,
        "efficiency_runs": ratios,
        "busy_fraction_runs": busy_runs,
        "minibatch_ms_runs": step_runs,
        "resume_ms_p50": pct(resumes, 50),
        "migration_ms": mig,
        "migration_params": sizes,
        "start_ms_template": warm,
        "start_ms_cold": cold,
        "sequential_wall_s": statistics.median(b["wall_s"] for b in bases),
        "busy_fraction": busy,
        "steps_per_trial": args.steps,
        "trainable": trainable,
        "checkpoints": args.checkpoints,
        "mlp_width": args.width,
        "mlp_params": param_count(args.width, 4),
    }
    table = Table(title="time-slicing mechanism (one CPU core)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    for q, e in efficiency.items():
        target = {"2": ">= 0.97", "10": ">= 0.99"}.get(q, "")
        spread = f" ({min(ratios[q]):.3f}-{max(ratios[q]):.3f})" if len(ratios[q]) > 1 else ""
        step = statistics.median(step_runs[q])
        label = f"efficiency at {q} s quanta (device busy {busy[q]:.3f}, mini-batch {step:.2f} ms)"
        table.add_row(label, f"{e:.3f}{spread}", target)
    table.add_row(f"sequential: device busy {busy['sequential']:.3f}", "", "")
    table.add_row("mini-batch", f"{result['minibatch_ms']:.1f} ms", "")
    table.add_row(
        f"park p50 / p99 ({len(parks)} parks)",
        f"{result['park_ms_p50']:.1f} / {result['park_ms_p99']:.1f} ms",
        f"p99 <= {result['minibatch_ms'] + 5:.1f} ms",
    )
    table.add_row("resume p50", f"{result['resume_ms_p50']:.2f} ms", "")
    for k, v in mig.items():
        table.add_row(f"in-node migration {k} ({sizes[k] / 1e6:.1f}M params)", f"{v:.1f} ms", "")
    if not args.no_latency:
        table.add_row("start from template / cold process", f"{warm:.1f} / {cold:.0f} ms", "template < 100 ms")
    console.print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
