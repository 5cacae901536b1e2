"""`quanta simulate`: replay a trace under one or more policies and compare them. `quanta simulate-search`:
replay one hyperparameter search on YAHPO Gym's LCBench surrogate (`quanta.sim.search_bench`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from quanta.cli.output import fail, write_json_atomic


def simulate(
    trace: Annotated[str, typer.Option(help="trace file, or a name: ee9e8c, 60_job, all (every Philly trace)")],
    gpus: Annotated[int, typer.Option(help="devices in the cluster")] = 100,
    gpus_per_server: Annotated[int, typer.Option(help="devices per server")] = 4,
    policy: Annotated[str, typer.Option(help="policy to simulate")] = "gandiva",
    compare: Annotated[str, typer.Option(help="more policies, comma separated (e.g. fifo,tiresias)")] = "",
    json_out: Annotated[Path | None, typer.Option("--json", help="write {policy: summary} here")] = None,
    plot: Annotated[Path | None, typer.Option(help="write a CDF of job completion times here (PNG)")] = None,
    seed: Annotated[int, typer.Option(help="seed (used with --jitter)")] = 0,
    max_jobs: Annotated[int | None, typer.Option(help="only the first N jobs of the trace")] = None,
    quantum: Annotated[float, typer.Option(help="scheduling quantum, seconds")] = 60.0,
    kind: Annotated[
        str, typer.Option(help="device kind in the throughput table (v100, p100, k80), or a mix: v100=60,k80=40")
    ] = "v100",
    jitter: Annotated[float, typer.Option(help="per-job log-normal noise on solo rates (sigma)")] = 0.0,
    check: Annotated[bool, typer.Option(help="check invariants after every event (slower)")] = False,
    users: Annotated[
        int, typer.Option(help="jobs belong to users: the trace's own, else N users with skewed demand (0: off)")
    ] = 0,
    shares: Annotated[
        str, typer.Option(help="with --users: none (no share layer), equal, or a JSON file {user: weight}")
    ] = "none",
    favour_worst_rho: Annotated[
        bool, typer.Option(help="with --shares: the share layer favours the users with the worst rho")
    ] = False,
    rho_bound: Annotated[
        float | None,
        typer.Option(
            help="with --shares: guarantee fair shares only to users whose rho exceeds this (>= 1), the rest "
            "of the cluster divided by demand (Themis's fairness knob)",
            show_default=False,
        ),
    ] = None,
    sticky: Annotated[
        bool, typer.Option(help="gandiva: time-slice jobs on their own devices (knob sticky, docs/simulation.md)")
    ] = False,
    gang: Annotated[
        bool,
        typer.Option(help="gandiva with --sticky: multi-server jobs time-slice on aligned blocks of servers (gang)"),
    ] = False,
    gang_patience: Annotated[
        int | None,
        typer.Option(
            help="gandiva with --gang: rounds in a row a multi-server job waits for its block before it runs on "
            "devices the round leaves idle (default: the knob's; -1: it waits for its block)"
        ),
    ] = None,
    kind_blind: Annotated[
        bool,
        typer.Option(
            help="on a --kind mix, place jobs without regard to kind (never on a kind where a job's rate is 0); "
            "default: where a job's rate relative to the other kinds is highest (Gavel)"
        ),
    ] = False,
) -> None:
    """Simulate a job trace on a virtual cluster with the service's own controller and policies."""
    from quanta.sim.driver import simulate as run_sim
    from quanta.sim.traces import load_trace

    console = Console()
    err = Console(stderr=True)
    names = [policy, *[p.strip() for p in compare.split(",") if p.strip()]]
    try:
        jobs = load_trace(trace, max_jobs)
    except FileNotFoundError as exc:
        raise fail(str(exc)) from None
    from quanta.executor.policy import policy_names
    from quanta.sim.driver import server_kinds

    try:
        server_kinds(kind, gpus, gpus_per_server)
    except ValueError as exc:
        raise fail(str(exc)) from None
    weights: dict[str, float] | None = None
    if users or shares != "none" or favour_worst_rho or rho_bound is not None:
        from quanta.sim.users import assign_users, parse_shares, user_summary

        try:
            if not users:
                raise ValueError("shares: --shares, --favour-worst-rho and --rho-bound need --users N")
            if rho_bound is not None and shares == "none":
                raise ValueError("shares: --rho-bound needs the share layer: --shares equal or a weights file")
            weights = parse_shares(shares)
            jobs = assign_users(jobs, users)
        except ValueError as exc:
            raise fail(str(exc)) from None
    from quanta.cli.share_options import ShareOptionError
    from quanta.cli.share_options import share_knobs as checked_knobs

    try:
        share_knobs = checked_knobs(None, favour_worst_rho, None, rho_bound)
    except ShareOptionError as exc:
        raise fail(str(exc)) from None
    unknown = [n for n in names if n not in policy_names()]
    if unknown:
        raise fail(f"unknown policy {unknown} (known: {', '.join(policy_names())})")
    results = {}
    per_job = {}
    for name in names:
        err.print(f"simulating {len(jobs)} jobs of {trace} under {name} on {gpus} {kind} ({gpus_per_server}/server)")
        try:
            res = run_sim(
                jobs,
                name,
                gpus=gpus,
                gpus_per_server=gpus_per_server,
                quantum_s=quantum,
                seed=seed,
                kind=kind,
                jitter=jitter,
                check=check,
                progress=lambda done, n, now: err.print(f"  {done}/{n} jobs done, virtual day {now / 86400:.1f}"),
                shares=weights,
                share_knobs=share_knobs,
                kind_aware=not kind_blind,
                policy_knobs=_gandiva_knobs(sticky, gang, gang_patience) if name == "gandiva" else None,
            )
            if users:
                by_user = user_summary(
                    jobs,
                    res.jobs,
                    name,
                    gpus=gpus,
                    gpus_per_server=gpus_per_server,
                    quantum_s=quantum,
                    kind=kind,
                    weights=weights,
                    kind_aware=not kind_blind,
                )
                res.summary.update(by_user)
                res.summary["shares"] = shares
                res.summary["favour_worst_rho"] = favour_worst_rho
                res.summary["rho_bound"] = rho_bound
            res.summary["kind"] = kind
            res.summary["kind_aware"] = not kind_blind
        except (ValueError, KeyError) as exc:  # a job the cluster cannot run, a type the table lacks
            raise fail(str(exc)) from None
        results[name] = res.summary
        per_job[name] = [r["jct_s"] for r in res.jobs]
        console.print(_table(name, trace, res.summary))
    if json_out is not None:
        write_json_atomic(json_out, results)
        err.print(f"wrote {json_out}")
    if plot is not None:
        _plot_cdf(plot, per_job, f"{trace}: {len(jobs)} jobs on {gpus} GPUs")
        err.print(f"wrote {plot}")


def _gandiva_knobs(sticky: bool, gang: bool, gang_patience: int | None = None) -> dict[str, Any] | None:
    """The gandiva knobs the flags set (None: the defaults)."""
    knobs: dict[str, Any] = {k: True for k, on in (("sticky", sticky), ("gang", gang)) if on}
    if gang and gang_patience is not None:
        knobs["gang_patience"] = gang_patience if gang_patience >= 0 else None
    return knobs or None


def _table(name: str, trace: str, s: dict) -> Table:
    t = Table(title=f"{name} on {trace}", show_header=True)
    t.add_column("metric")
    t.add_column("value", justify="right")
    hours = 3600.0
    t.add_row("jobs", str(s["jobs"]))
    t.add_row("mean JCT", f"{s['mean_jct_s'] / hours:,.2f} h")
    t.add_row("median JCT", f"{s['median_jct_s'] / hours:,.2f} h")
    t.add_row("p95 JCT", f"{s['p95_jct_s'] / hours:,.2f} h")
    t.add_row("makespan", f"{s['makespan_s'] / hours:,.1f} h")
    t.add_row("mean GPU utilisation", f"{s['utilization']:.1%}")
    t.add_row("mean time to first 100 mini-batches", f"{s['mean_time_to_100_minibatches_s'] / 60:,.1f} min")
    t.add_row("packs kept / undone", f"{s['packs_kept']} / {s['packs_undone']}")
    t.add_row("migrations", str(s["migrations"]))
    if "users" in s:
        for user, u in s["users"].items():
            row = f"{u['jobs']}, {u['mean_jct_s'] / hours:,.2f} h, {u['rho']:.2f}"
            t.add_row(f"user {user}: jobs, mean JCT, rho", row)
        t.add_row("max rho / Jain's index", f"{s['max_rho']:.2f} / {s['jain_index']:.3f}")
    t.add_row("simulated in", f"{s['wall_s']:.1f} s ({s['jobs_per_s']} jobs/s, {s['ticks']} ticks)")
    return t


def _plot_cdf(path: Path, per_job: dict[str, list[float]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, jct in per_job.items():
        x = np.sort(np.asarray(jct) / 3600.0)
        y = np.arange(1, len(x) + 1) / max(1, len(x))
        ax.step(x, y, where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def simulate_search(
    task: Annotated[str, typer.Option(help="LCBench task (OpenML task id), e.g. 3945")],
    benchmark: Annotated[str, typer.Option(help="surrogate benchmark (lcbench)")] = "lcbench",
    workers: Annotated[int, typer.Option(help="devices")] = 4,
    policy: Annotated[str, typer.Option(help="fifo, timeslice, gandiva, asha, hyperband or default")] = "default",
    algorithm: Annotated[str | None, typer.Option(help="searcher: tpe, bohb or random (default: the spec's)")] = None,
    hours: Annotated[float, typer.Option(help="simulated hours of search")] = 8.0,
    seed: Annotated[int, typer.Option(help="the search's seed")] = 0,
    target_medium: Annotated[float | None, typer.Option(help="a val_accuracy target (fraction) to time")] = None,
    target_hard: Annotated[float | None, typer.Option(help="a harder val_accuracy target (fraction) to time")] = None,
    stop_at_hard: Annotated[bool, typer.Option(help="end the search when the hard target is reached")] = False,
    data: Annotated[str | None, typer.Option(help="YAHPO data folder ($QUANTA_YAHPO_DATA, ../shared)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the result here")] = None,
) -> None:
    """Replay a hyperparameter search on a learning-curve surrogate (YAHPO Gym's LCBench) in simulated
    time, through the service's own controller, searcher and policy."""
    from quanta.executor.policy import policy_names
    from quanta.sim.search_bench import simulate_search as run

    err = Console(stderr=True)

    if benchmark != "lcbench":
        raise fail(f"--benchmark: only 'lcbench' is known, not {benchmark!r}")
    if policy != "default" and policy not in policy_names():
        raise fail(f"--policy: unknown policy {policy!r} (known: default, {', '.join(policy_names())})")
    if algorithm is not None and algorithm not in ("tpe", "bohb", "random"):
        raise fail(f"--algorithm: {algorithm!r} is not tpe, bohb or random")
    if stop_at_hard and target_hard is None:
        raise fail("--stop-at-hard needs --target-hard")
    targets = {k: v for k, v in (("medium", target_medium), ("hard", target_hard)) if v is not None}
    for name, v in targets.items():
        if not 0.0 <= v <= 1.0:
            raise fail(f"--target-{name}: {v} is not an accuracy fraction in [0, 1]")
    try:
        res = run(task, policy, algorithm, workers, hours, seed, targets, target_hard if stop_at_hard else None, data)
    except (FileNotFoundError, ImportError, ValueError, KeyError) as exc:
        raise fail(str(exc)) from None
    Console().print(_search_table(task, workers, hours, seed, res))
    if json_out is not None:
        from dataclasses import asdict

        write_json_atomic(json_out, {"task": task, "workers": workers, "hours": hours, "seed": seed, **asdict(res)})
        err.print(f"wrote {json_out}")


def _search_table(task: str, workers: int, hours: float, seed: int, res: object) -> Table:
    from quanta.sim.search_bench import SearchSimResult

    assert isinstance(res, SearchSimResult)
    t = Table(title=f"lcbench {task}: {res.policy} + {res.algorithm}, {workers} workers, {hours:g} h, seed {seed}")
    t.add_column("metric")
    t.add_column("value", justify="right")
    for name, at in res.time_to_target.items():
        t.add_row(f"time to {name} target", "missed" if at is None else f"{at:,.0f} s ({at / 3600:.2f} h)")
    best = res.best_so_far[-1] if res.best_so_far else None
    t.add_row("best val_accuracy", "-" if best is None else f"{best[1]:.4f} at {best[0]:,.0f} s")
    marks = [0.25, 0.5, 1, 2, 4, 8]
    for h in [m for m in marks if m <= hours] or [hours]:
        got = [b for at, b in res.best_so_far if at <= h * 3600]
        t.add_row(f"best after {h:g} h", f"{got[-1]:.4f}" if got else "-")
    t.add_row("trials started / parked / killed", f"{res.started} / {res.parked} / {res.killed}")
    t.add_row("trials completed", str(res.completed))
    t.add_row("simulated", f"{res.sim_seconds:,.0f} s in {res.wall_seconds:.1f} s wall ({res.reports:,} reports)")
    return t
