"""What one decision of the default multi-objective search costs as the search grows: the wall time of one
round of its policy (Pareto ASHA's `plan`) and of one ask of its searcher (ParetoTPE), by how many trials
the search holds.

The search is LCBench's two-objective search of `bench/lcbench_mo.py` (validation accuracy against training
time, 4 workers, the exact clock: the real controller on `SimRuntime`), run until it holds `--trials`
trials; every round and every ask is timed where the controller calls them, and the medians are taken
in windows of trials (100-200, 450-550, 950-1,050 by default). A controller ticks after every report, so
these are the costs a service pays per report of a search that size.

    python bench/round_cost.py --task 168910 --seed 2 --trials 1100 --json bench/results/round_cost.json

Prints a table and writes JSON shaped {"task", "seed", "trials", "windows": [{"from", "to", "rounds",
"round_ms", "asks", "ask_ms"}], "wall_s", "command"}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lcbench_mo import DEFAULT_REFERENCE_JSON, references_for, run_one  # noqa: E402

WINDOWS = ((100, 200), (450, 550), (950, 1050))


class _Enough(Exception):
    """The search holds the trials asked for: the run ends here."""


@contextmanager
def timed(trials: int, rounds: list[tuple[int, float]], asks: list[tuple[int, float]]) -> Iterator[None]:
    """Time every round of `AshaPolicy` and every ask of `ParetoTPE` (appending (trials held, seconds)),
    ending the run once a round sees `trials` trials; the two are restored after."""
    from quanta.executor.policy.asha.policy import AshaPolicy
    from quanta.search.pareto_tpe import ParetoTPE

    plan, ask = AshaPolicy.plan, ParetoTPE.ask

    def timed_plan(self: AshaPolicy, snapshot: Any) -> Any:
        if len(snapshot.trials) >= trials:
            raise _Enough
        t = time.perf_counter()
        out = plan(self, snapshot)
        rounds.append((len(snapshot.trials), time.perf_counter() - t))
        return out

    def timed_ask(self: ParetoTPE, number: int) -> Any:
        t = time.perf_counter()
        out = ask(self, number)
        asks.append((number, time.perf_counter() - t))  # trials are numbered from 0 as they are asked for
        return out

    AshaPolicy.plan, ParetoTPE.ask = timed_plan, timed_ask  # type: ignore[method-assign]
    try:
        yield
    except _Enough:
        pass
    finally:
        AshaPolicy.plan, ParetoTPE.ask = plan, ask  # type: ignore[method-assign]


def windows(
    rounds: Sequence[tuple[int, float]], asks: Sequence[tuple[int, float]], bounds: Sequence[tuple[int, int]]
) -> list[dict[str, Any]]:
    """Per window [from, to) of trials held: how many rounds and asks fell in it and their median ms (None:
    none did)."""
    out: list[dict[str, Any]] = []
    for lo, hi in bounds:
        r = [s for n, s in rounds if lo <= n < hi]
        a = [s for n, s in asks if lo <= n < hi]
        out.append(
            {
                "from": lo,
                "to": hi,
                "rounds": len(r),
                "round_ms": round(1000 * statistics.median(r), 2) if r else None,
                "asks": len(a),
                "ask_ms": round(1000 * statistics.median(a), 2) if a else None,
            }
        )
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="168910")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--trials", type=int, default=1100, help="end the search once it holds this many trials")
    ap.add_argument("--windows", default=",".join(f"{lo}-{hi}" for lo, hi in WINDOWS), help="from-to,...")
    ap.add_argument("--data", type=Path, default=None, help="YAHPO data folder (default ../shared/data/yahpo)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    bounds = [tuple(int(x) for x in w.split("-", 1)) for w in args.windows.split(",")]
    refs = references_for([args.task], DEFAULT_REFERENCE_JSON, args.data)
    rounds: list[tuple[int, float]] = []
    asks: list[tuple[int, float]] = []
    t0 = time.perf_counter()
    with timed(args.trials, rounds, asks):
        run_one("quanta_default", args.task, args.seed, 4, 8.0, refs[args.task], args.data)
    out = {
        "task": args.task,
        "seed": args.seed,
        "trials": max((n for n, _ in rounds), default=0),
        "windows": windows(rounds, asks, bounds),  # type: ignore[arg-type]
        "wall_s": round(time.perf_counter() - t0, 1),
        "command": "python bench/round_cost.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    print(f"LCBench task {args.task}, seed {args.seed}, two objectives: one decision by trials held")
    print(f"{'trials':>12} {'rounds':>7} {'round ms':>9} {'asks':>5} {'ask ms':>7}")
    for w in out["windows"]:
        span, round_ms, ask_ms = f"{w['from']}-{w['to']}", w["round_ms"] or "-", w["ask_ms"] or "-"
        print(f"{span:>12} {w['rounds']:>7} {round_ms:>9} {w['asks']:>5} {ask_ms:>7}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
