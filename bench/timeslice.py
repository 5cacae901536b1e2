"""Time-slicing mechanism benchmark: what suspend/resume at mini-batch boundaries costs.

- efficiency: 4 identical trials on one device, time-sliced (timeslice policy) at quanta of 0.5, 2
  and 10 s, versus the same 4 trials run one after another (fifo policy): ratio of aggregate
  mini-batches per second (= fifo wall time / time-sliced wall time for the same work).
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


def run_search(policy: str, quantum: float, steps: int, width: int, tmp: Path) -> dict:
    """4 identical trials on one single-core CPU device under `policy`; returns wall time and latencies."""
    spec = parse_spec(
        {
            "name": f"bench-{policy}-{quantum}",
            "trainable": TRAINABLE,
            "space": {"seed": {"choice": [0]}},
            "metric": {"name": "loss", "goal": "minimize"},
            "budget": {"max_trials": 4, "max_steps": steps, "max_seconds": 36000},
            "parallelism": 4,
            "search": {"algorithm": "random"},
            "scheduler": {
                "policy": policy,
                "quantum_s": quantum,
                "checkpoint_every_quanta": 10**6,
                "checkpoint_every_s": 10**6,
            },
            "config": {"width": width, "depth": 4},
        }
    )
    db = tmp / f"{policy}-{quantum}.db"
    store = Store(f"sqlite:///{db}")
    device = parse_devices("cpu:2")[:1]  # one core, one thread
    rt = LocalRuntime(device, warm_modules=["bench.trainables"])
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
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="quanta-bench-"))
    console = Console()

    console.print(f"sequential baseline: 4 x {args.steps} steps, fifo, one CPU core ...")
    base = run_search("fifo", 2.0, args.steps, args.width, tmp)
    efficiency, parks, resumes, busy = {}, [], [], {"sequential": base["busy_fraction"]}
    for q in [float(x) for x in args.quanta.split(",")]:
        console.print(f"time-sliced at {q:g} s ...")
        r = run_search("timeslice", q, args.steps, args.width, tmp)
        efficiency[f"{q:g}"] = base["wall_s"] / r["wall_s"]
        busy[f"{q:g}"] = r["busy_fraction"]
        parks += r["park_ms"]
        resumes += r["resume_ms"]
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
        "minibatch_ms": base["minibatch_ms"],
        "resume_ms_p50": pct(resumes, 50),
        "migration_ms": mig,
        "migration_params": sizes,
        "start_ms_template": warm,
        "start_ms_cold": cold,
        "sequential_wall_s": base["wall_s"],
        "busy_fraction": busy,
        "steps_per_trial": args.steps,
        "mlp_width": args.width,
        "mlp_params": param_count(args.width, 4),
    }
    table = Table(title="time-slicing mechanism (one CPU core)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    for q, e in efficiency.items():
        target = {"2": ">= 0.97", "10": ">= 0.99"}.get(q, "")
        table.add_row(f"efficiency at {q} s quanta (device busy {busy[q]:.3f})", f"{e:.3f}", target)
    table.add_row("mini-batch", f"{result['minibatch_ms']:.1f} ms", "")
    table.add_row(
        f"park p50 / p99 ({len(parks)} parks)",
        f"{result['park_ms_p50']:.1f} / {result['park_ms_p99']:.1f} ms",
        f"p99 <= {result['minibatch_ms'] + 5:.1f} ms",
    )
    table.add_row("resume p50", f"{result['resume_ms_p50']:.2f} ms", "")
    for k, v in mig.items():
        table.add_row(f"in-node migration {k} ({sizes[k] / 1e6:.1f}M params)", f"{v:.1f} ms", "")
    table.add_row("start from template / cold process", f"{warm:.1f} / {cold:.0f} ms", "template < 100 ms")
    console.print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
