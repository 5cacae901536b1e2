"""Where a Quanta search's time to target went, read from the databases `bench/search.py` leaves behind.

For each run (a `qbench-<system>-*` directory holding `q.db` and `spec.json`) and target: the first report
at or above it and its trial (the winner), split into *finding* it (from the search's start to the
winner's start: the configurations tried before it, how many, their device-seconds) and *training* it
(from its start to the report: its own steps and device-seconds, and how long it waited parked). When
finding dominates, what limits the search is the searcher (how soon it proposes a configuration good
enough) and how fast the policy discards the others; when training dominates, it is the trial's own
length, which no scheduler shortens on one device.

    python bench/search_anatomy.py /tmp/qbench-default-* --targets 0.966,0.972,0.976 [--json OUT]

`--early` ranks fifo's whole curves by their early values against their best (how much a first rung can
tell); `--explore` compares how fast runs of any system that leaves a record (Quanta's `q.db`, Optuna's
journal) started configurations and how long each trained.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from app.db.store import Store  # noqa: E402


def anatomy(run_dir: Path, target: float) -> dict[str, Any] | None:
    """The split of one run's time to `target` (seconds from the search's creation), or None when the
    run never reached it. Device-seconds are summed from the stored quanta, cut at the hit."""
    store = Store(f"sqlite:///{run_dir / 'q.db'}")
    searches = store.searches()
    if not searches:
        return None
    s = searches[0]
    sid = s.id
    if sid is None:
        return None
    maximize = s.spec.get("metric", {}).get("goal", "maximize") == "maximize"
    sign = 1.0 if maximize else -1.0
    reports = sorted(store.search_reports(sid), key=lambda r: r.at)
    hit = next((r for r in reports if r.objective is not None and sign * r.objective >= sign * target), None)
    if hit is None:
        return None
    trials = {t.id: t for t in store.trials(sid)}
    win = trials[hit.trial_id]
    t0 = s.created_at
    quanta = store.quanta(sid)

    def device_s(trial_id: int | None, until: float) -> float:
        return sum(
            max(0.0, min(q.ended_at, until) - q.started_at) * len(q.devices.split(","))
            for q in quanta
            if (trial_id is None or q.trial_id == trial_id) and q.started_at < until
        )

    started = win.started_at if win.started_at is not None else hit.at
    own_compute = device_s(win.id, hit.at)
    return {
        "run": run_dir.name,
        "seed": json.loads((run_dir / "spec.json").read_text()).get("seed"),
        "target": target,
        "hit_s": round(hit.at - t0, 2),
        "winner_number": win.number,
        "trials_before_winner": sum(1 for t in trials.values() if t.number < win.number),
        "winner_proposed_s": round(win.created_at - t0, 2),
        "winner_started_s": round(started - t0, 2),
        "winner_steps_at_hit": hit.step,
        "winner_device_s": round(own_compute, 2),
        "winner_parked_s": round(max(0.0, hit.at - started - own_compute), 2),
        "others_device_s_before_hit": round(device_s(None, hit.at) - own_compute, 2),
        "finding_share": round((started - t0) / max(hit.at - t0, 1e-9), 3),
    }


def configurations(run_dir: Path) -> list[tuple[float, int]]:
    """(start time in seconds since the epoch, mini-batches it reported up to) of every configuration a
    run started, in order: from a Quanta run's `q.db` or an Optuna run's `optuna-journal.log` (trial
    creation times and intermediate steps), so that how fast each system explores can be compared."""
    if (run_dir / "q.db").exists():
        store = Store(f"sqlite:///{run_dir / 'q.db'}")
        out: list[tuple[float, int]] = []
        for s in store.searches():
            if s.id is None:
                continue
            last: dict[int, int] = {}
            for r in store.search_reports(s.id):
                last[r.trial_id] = max(last.get(r.trial_id, 0), r.step)
            out += [(t.started_at, last.get(t.id or -1, 0)) for t in store.trials(s.id) if t.started_at is not None]
        return sorted(out)
    journal = run_dir / "optuna-journal.log"
    if not journal.exists():
        return []
    start: dict[int, float] = {}
    steps: dict[int, int] = {}
    number = 0
    for line in journal.read_text().splitlines():
        op = json.loads(line)
        if op["op_code"] == 4:  # create a trial: trial ids are given in creation order
            start[number] = datetime.fromisoformat(op["datetime_start"]).timestamp()
            number += 1
        elif op["op_code"] == 7:  # an intermediate value
            steps[op["trial_id"]] = max(steps.get(op["trial_id"], 0), int(op["step"]))
    return sorted((at, steps.get(tid, 0)) for tid, at in start.items())


def exploration(run_dir: Path, within: list[float]) -> dict[str, Any] | None:
    """How fast a run tried configurations: how many it had started `within` seconds of its first, and
    the mini-batches each trained (median, over all it started), or None when the run left no record."""
    configs = configurations(run_dir)
    if not configs:
        return None
    t0 = configs[0][0]
    return {
        "run": run_dir.name,
        "configurations": len(configs),
        "started_within_s": {str(w): sum(1 for at, _ in configs if at - t0 <= w) for w in within},
        "median_steps": statistics.median(n for _, n in configs),
    }


def whole_curves(run_dirs: list[Path], final_steps: int) -> list[dict[int, float]]:
    """Every trial's curve ({step: value}) in the searches of `run_dirs` that trained at least `final_steps`."""
    curves: list[dict[int, float]] = []
    for d in run_dirs:
        store = Store(f"sqlite:///{d / 'q.db'}")
        for s in store.searches():
            if s.id is None:
                continue
            by_trial: dict[int, dict[int, float]] = {}
            for r in store.search_reports(s.id):
                if r.objective is not None:
                    by_trial.setdefault(r.trial_id, {})[r.step] = r.objective
            curves.extend(c for c in by_trial.values() if max(c) >= final_steps)
    return curves


def early_against_final(
    curves: list[dict[int, float]], early_steps: list[int], good: float | None = None
) -> dict[str, Any]:
    """How well a trial's value after `early_steps` mini-batches ranks `curves` (`whole_curves`) by
    their best value (with `good`, only those whose best reached it: the ranking among the good ones,
    which decides who reaches a hard target): Spearman's rho per early step, and how many trials. Run
    on fifo's searches, whose trials all run to the end, it says how much a first rung at that step can
    tell the configurations apart."""
    from scipy.stats import spearmanr

    chosen = [c for c in curves if good is None or max(c.values()) >= good]
    out: dict[str, Any] = {"trials": len(chosen), "good": good, "rho": {}}
    best = [max(c.values()) for c in chosen]
    for e in early_steps:
        early = [max((v for k, v in c.items() if k <= e), default=float("nan")) for c in chosen]
        out["rho"][str(e)] = round(float(spearmanr(early, best, nan_policy="omit").statistic), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="qbench-<system>-* directories")
    ap.add_argument("--targets", required=True, help="comma-separated target values")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--early",
        default="",
        help="comma-separated steps: also rank the runs' trials that trained --final steps by their value "
        "at each of these steps against their best (Spearman), e.g. 500,1000,2500 on fifo's runs",
    )
    ap.add_argument("--final", type=int, default=0, help="with --early: trials that trained at least this many steps")
    ap.add_argument("--good", type=float, default=None, help="with --early: also among the trials whose best >= this")
    ap.add_argument(
        "--explore",
        default="",
        help="comma-separated seconds: also count the configurations each run (Quanta or Optuna) had started "
        "within these seconds of its first, e.g. 30,60,120,240",
    )
    args = ap.parse_args()
    targets = [float(x) for x in args.targets.split(",")]
    rows = [a for d in args.runs if (d / "q.db").exists() for t in targets if (a := anatomy(d, t)) is not None]
    table = Table(title="where the time to target went (seconds from the search's creation)")
    cols: tuple[str, ...] = ("run", "seed", "target", "hit_s", "winner_number", "winner_proposed_s", "winner_started_s")
    cols += ("winner_steps_at_hit", "winner_device_s", "winner_parked_s", "finding_share")
    for c in cols:
        table.add_column(c.replace("_", " "), justify="left" if c == "run" else "right", no_wrap=True)
    for r in rows:
        table.add_row(*(str(r[c]) for c in cols))
    console = Console(width=200)
    console.print(table)
    for t in targets:
        shares = [r["finding_share"] for r in rows if r["target"] == t]
        if shares:
            share = statistics.median(shares)
            console.print(f"target {t}: median share of the time before the winner started {share:.2f}")
    out: dict[str, Any] = {"runs": rows, "command": "python " + " ".join(sys.argv)}
    if args.early:
        steps = [int(x) for x in args.early.split(",")]
        final = args.final or max(steps)
        curves = whole_curves(args.runs, final)
        checks = [{"final_steps": final, **early_against_final(curves, steps)}]
        if args.good is not None:
            checks.append({"final_steps": final, **early_against_final(curves, steps, args.good)})
        out["early_against_final"] = checks
        for check in checks:
            among = "" if check["good"] is None else f" whose best >= {check['good']}"
            console.print(f"{check['trials']} trials trained {final}+ steps{among}; Spearman rho of the value at")
            rhos = ", ".join(f"{k}: {v}" for k, v in check["rho"].items())
            console.print(f"each early step against their best: {rhos}")
    if args.explore:
        within = [float(x) for x in args.explore.split(",")]
        explored = [e for d in args.runs if (e := exploration(d, within)) is not None]
        out["exploration"] = explored
        seen = Table(title="configurations started within N s of the first, and mini-batches each trained")
        for c in ("run", *(f"{w:g} s" for w in within), "all", "median steps"):
            seen.add_column(c, justify="left" if c == "run" else "right", no_wrap=True)
        for e in explored:
            counts = [str(e["started_within_s"][str(w)]) for w in within]
            seen.add_row(e["run"], *counts, str(e["configurations"]), f"{e['median_steps']:g}")
        console.print(seen)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
