"""Job traces for the simulator: the Philly-derived traces of the Gavel project, the Tiresias toy
trace, and a synthetic generator (Poisson arrivals, a job mix) for tests.

The data stays where it is (`../shared/data/traces` beside the project, or `$QUANTA_TRACES`); nothing
is copied into the project. See that folder's README for the formats.
"""

from __future__ import annotations

import csv
import math
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace: `steps` mini-batches of `job_type` on `devices` devices, arriving at
    `arrival` seconds. `rate` (mini-batches/s alone) is set when the trace says how fast the job runs
    (Tiresias' toy trace); otherwise the throughput table says. `user` is its submitter when the trace
    names one (merged Philly traces: the virtual cluster it came from)."""

    id: int
    job_type: str
    steps: int
    arrival: float
    devices: int = 1
    rate: float | None = None
    user: str = ""  # who submitted it, when the trace says (see `quanta.sim.users`)


def traces_dir() -> Path:
    """`$QUANTA_TRACES`, else `../shared/data/traces` beside the project root."""
    env = os.environ.get("QUANTA_TRACES")
    return Path(env) if env else (PROJECT_ROOT.parent / "shared" / "data" / "traces")


def throughputs_path() -> Path:
    return traces_dir() / "philly_gavel" / "simulation_throughputs.json"


def resolve_trace(name: str | Path) -> Path:
    """A trace path, or a short name: a Philly cluster id (``ee9e8c``), ``60_job`` or ``tiresias``."""
    p = Path(name)
    if p.exists():
        return p
    base = traces_dir()
    for cand in (
        base / "philly_gavel" / f"{name}.trace",
        base / "philly_gavel" / str(name),
        base / "tiresias" / f"{name}.csv",
        base / str(name),
    ):
        if cand.exists():
            return cand
    if str(name) == "tiresias":
        return base / "tiresias" / "60_job.csv"
    raise FileNotFoundError(f"trace '{name}' not found (looked in {base}; set QUANTA_TRACES to move it)")


def load_trace(name: str | Path, max_jobs: int | None = None) -> list[TraceJob]:
    """Read a trace by path or name. ``all`` merges every Philly trace (15,264 jobs) by arrival time, each
    job's `user` the virtual cluster (trace file) it came from."""
    if str(name) == "all":
        jobs: list[TraceJob] = []
        for path in sorted((traces_dir() / "philly_gavel").glob("*.trace")):
            jobs.extend(replace(j, user=path.stem) for j in read_philly(path))  # the virtual cluster
        jobs.sort(key=lambda j: (j.arrival, j.id))
        jobs = [replace(j, id=i) for i, j in enumerate(jobs)]
        return jobs[:max_jobs] if max_jobs else jobs
    path = resolve_trace(name)
    jobs = read_tiresias(path) if path.suffix == ".csv" else read_philly(path)
    return jobs[:max_jobs] if max_jobs else jobs


def read_philly(path: str | Path) -> list[TraceJob]:
    """Gavel's Philly-derived trace: tab separated job_type, command, num_steps_arg, needs_data_dir,
    total_steps, arrival_time, scale_factor. Rows asking for 0 devices are skipped."""
    jobs: list[TraceJob] = []
    with open(path) as fh:
        for line in fh:
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 7:
                continue
            sf = int(cols[6])
            if sf <= 0:
                continue
            jobs.append(TraceJob(len(jobs), cols[0], int(cols[4]), float(cols[5]), sf))
    jobs.sort(key=lambda j: (j.arrival, j.id))
    return jobs


def read_tiresias(path: str | Path) -> list[TraceJob]:
    """Tiresias' CSV (job_id, num_gpu, submit_time, iterations, model_name, duration, interval): the job
    runs `iterations` in `duration` seconds alone, so its rate is iterations / duration."""
    jobs: list[TraceJob] = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            n = int(row["num_gpu"])
            if n <= 0:
                continue
            steps, duration = int(row["iterations"]), float(row["duration"])
            jobs.append(
                TraceJob(int(row["job_id"]), row["model_name"], steps, float(row["submit_time"]), n, steps / duration)
            )
    jobs.sort(key=lambda j: (j.arrival, j.id))
    return jobs


DEFAULT_MIX: tuple[tuple[str, int, float], ...] = (
    # (job type in the throughput table, devices, weight): mostly single-device jobs, like Philly.
    ("ResNet-18 (batch size 64)", 1, 3.0),
    ("ResNet-50 (batch size 64)", 1, 2.0),
    ("Transformer (batch size 64)", 1, 2.0),
    ("LM (batch size 20)", 1, 2.0),
    ("Recommendation (batch size 2048)", 1, 1.5),
    ("A3C", 1, 1.0),
    ("CycleGAN", 1, 1.0),
    ("ResNet-50 (batch size 64)", 2, 0.7),
    ("Transformer (batch size 128)", 4, 0.5),
    ("ResNet-18 (batch size 128)", 8, 0.3),
)


def synthetic(
    n: int,
    *,
    seed: int = 0,
    mean_interarrival_s: float = 60.0,
    mix: Sequence[tuple[str, int, float]] = DEFAULT_MIX,
    median_steps: float = 5_000,
    sigma: float = 1.0,
    rate: float | None = None,
) -> list[TraceJob]:
    """`n` jobs with Poisson arrivals (exponential gaps of mean `mean_interarrival_s`), job types drawn
    from `mix` by weight, and log-normal step counts around `median_steps`. `rate` fixes every job's solo
    rate (no throughput table needed)."""
    rng = random.Random(seed)
    types = [(jt, d) for jt, d, _ in mix]
    weights = [w for _, _, w in mix]
    t = 0.0
    jobs: list[TraceJob] = []
    for i in range(n):
        if i:
            t += rng.expovariate(1.0 / mean_interarrival_s)
        jt, d = rng.choices(types, weights)[0]
        steps = max(1, int(math.exp(rng.gauss(math.log(median_steps), sigma))))
        jobs.append(TraceJob(i, jt, steps, round(t, 3), d, rate))
    return jobs


def offered_load(jobs: Sequence[TraceJob], gpus: int, solo_seconds) -> float:
    """Device-seconds the jobs need alone (`solo_seconds(job)` each, times its devices) over the
    device-seconds the cluster offers between the first and last arrival."""
    if not jobs:
        return 0.0
    span = max(j.arrival for j in jobs) - min(j.arrival for j in jobs)
    work = sum(solo_seconds(j) * j.devices for j in jobs)
    return work / (gpus * span) if span > 0 else math.inf
