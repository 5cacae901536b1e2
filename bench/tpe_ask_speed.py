"""How long one TPE ask takes once many trials are told (the searcher's share of a long simulated search).

A `HyperOptSearcher` on a 7-dimensional space shaped like LCBench's (six floats uniform or loguniform, one
integer; hand-written bounds, so no data folder is needed) is told
`--told` trials with a fixed synthetic loss, then `--asks` more are asked and told, timed in CPU seconds
on one core. No training, no surrogate: only the searcher.

    python bench/tpe_ask_speed.py --told 800 --asks 200 --json bench/results/tpe_ask_speed.json

Prints a table (ms per ask) and writes {"told", "asks", "ms_per_ask", "suggestions_sha"}: the hash of
every suggestion made, so two versions of the code can be checked to ask the same things.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from app.search.searcher import HyperOptSearcher  # noqa: E402

SPACE = {
    "batch_size": {"loguniform": [16, 512]},
    "learning_rate": {"loguniform": [1e-4, 0.1]},
    "momentum": {"uniform": [0.1, 0.99]},
    "weight_decay": {"uniform": [1e-5, 0.1]},
    "num_layers": {"randint": [1, 6]},
    "max_units": {"loguniform": [64, 1024]},
    "max_dropout": {"uniform": [0.0, 1.0]},
}


def loss(params: dict[str, float]) -> float:
    return (math.log(params["learning_rate"]) + 5) ** 2 + params["momentum"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--told", type=int, default=800)
    ap.add_argument("--asks", type=int, default=200)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    s = HyperOptSearcher(SPACE, seed=0, n_startup=10)
    digest = hashlib.sha256()
    for n in range(args.told):
        sug = s.ask(n)
        digest.update(json.dumps(sug.vals, sort_keys=True).encode())
        s.tell(n, loss(sug.params))
    cpu0 = time.process_time()
    for n in range(args.told, args.told + args.asks):
        sug = s.ask(n)
        digest.update(json.dumps(sug.vals, sort_keys=True).encode())
        s.tell(n, loss(sug.params))
    ms = (time.process_time() - cpu0) / args.asks * 1000
    table = Table(title="TPE ask, one core")
    for col in ("trials told", "asks timed", "ms per ask"):
        table.add_column(col, justify="right")
    table.add_row(str(args.told), str(args.asks), f"{ms:.2f}")
    Console().print(table)
    out = {"told": args.told, "asks": args.asks, "ms_per_ask": round(ms, 3), "suggestions_sha": digest.hexdigest()[:16]}
    print(json.dumps(out))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
