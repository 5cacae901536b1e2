"""Full learning curves of random configurations of a live workload, and what they say about screening.

Trains `--configs` configurations drawn by the spec's random searcher (`search.algorithm: random`, seed
`--seed`) to the spec's full budget, standalone (no controller, one torch thread per process, `--jobs`
processes), and keeps every report of the metric: a small tabular benchmark of the workload. Accuracy
does not depend on how busy the machine is (training is seeded), only the seconds do. Resumable: the
configurations already in `--runs` (JSONL, one per line) are not trained again.

Then, per target of `--targets`: the share of configurations whose best report reaches it (what random
search's chance per proposal is), and for each rung (steps), how many of the configurations that reach
the target are in the best 1/eta of all configurations at that rung (what a successive-halving screen
keeps of them), and the Spearman rank correlation between the metric at the rung and the best over the
whole budget. With `--replay N`: a simplified model of random search with asynchronous successive halving
(Li et al.'s promotion, paused trials resumed where they stopped, one trial per device, no time-slicing),
replayed N times on `--devices` devices over configurations drawn with replacement from the table, with
each configuration's measured seconds per step; the median seconds to each target per ladder (rungs in
steps, each judged at the first report at or after it), and how many replays missed (100 trials).

    python bench/long_curves.py --spec examples/mnist1d_long.yaml --configs 60 --jobs 2 \\
        --targets 0.966,0.972,0.976 --runs bench/results/long_curves_runs.jsonl \\
        --json bench/results/long_curves.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def configs(spec_path: Path, n: int, seed: int) -> list[dict[str, Any]]:
    """The first `n` configurations the spec's random searcher proposes with `seed`, as trials get them."""
    from app.search.factory import make_searcher
    from app.spec import load_spec

    spec = load_spec(spec_path)
    spec = spec.model_copy(update={"search": spec.search.model_copy(update={"algorithm": "random"}), "seed": seed})
    searcher = make_searcher(spec.space, spec.seed, spec.search)
    out = []
    for number in range(n):
        params = searcher.ask(number).params
        out.append({"seed": spec.seed, **spec.config, **params})
    return out


def train_one(args: tuple[str, int, dict[str, Any], int, str]) -> dict[str, Any]:
    """Train one configuration to `max_steps` standalone; its reports of `metric` as [step, value]."""
    trainable, number, config, max_steps, metric = args
    import importlib

    import torch

    torch.set_num_threads(1)
    from app.sdk import Trial

    module, _, fn = trainable.partition(":")
    mod = importlib.import_module(module)
    if hasattr(mod, "prepare"):
        mod.prepare(config)
    trial = Trial.standalone(config, max_steps=max_steps, metric=metric)
    t0 = time.perf_counter()
    getattr(mod, fn)(config, trial)
    seconds = time.perf_counter() - t0
    curve = [[int(step), float(m[metric])] for step, m in trial.history if metric in m]
    return {"number": number, "config": config, "curve": curve, "seconds": round(seconds, 2)}


def spearman(a: list[float], b: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def analyse(runs: list[dict[str, Any]], targets: dict[str, float], eta: int, rung_steps: list[int]) -> dict:
    best = {r["number"]: max((v for _, v in r["curve"]), default=0.0) for r in runs}
    out: dict[str, Any] = {"configs": len(runs), "targets": {}, "rungs": {}}
    for name, target in targets.items():
        capable = [n for n, b in best.items() if b >= target]
        out["targets"][name] = {"target": target, "reach": len(capable), "share": len(capable) / max(1, len(runs))}
    for s in rung_steps:
        at = {}
        for r in runs:
            before = [v for step, v in r["curve"] if step <= s]
            at[r["number"]] = before[-1] if before else 0.0
        ranked = sorted(at, key=lambda n: -at[n])
        kept = set(ranked[: max(1, len(ranked) // eta)])
        row: dict[str, Any] = {"spearman_vs_best": spearman([at[n] for n in best], [best[n] for n in best])}
        for name, target in targets.items():
            capable = [n for n, b in best.items() if b >= target]
            row[f"{name}_kept"] = sum(1 for n in capable if n in kept)
            row[f"{name}_reach"] = len(capable)
            row[f"{name}_ranks"] = sorted(ranked.index(n) + 1 for n in capable)
        out["rungs"][str(s)] = row
    return out


LADDERS: dict[str, tuple[tuple[float, ...], int]] = {  # name -> (rungs as fractions of max_steps, eta)
    "eta 3, first rung max/81 (the default)": ((1 / 81, 1 / 27, 1 / 9, 1 / 3), 3),
    "eta 3, first rung max/27": ((1 / 27, 1 / 9, 1 / 3), 3),
    "eta 4, first rung max/256": ((1 / 256, 1 / 64, 1 / 16, 1 / 4), 4),
    "Ray's (grace 1 %, reduction 4)": ((0.01, 0.04, 0.16, 0.64), 4),
    "eta 5, first rung max/125": ((1 / 125, 1 / 25, 1 / 5), 5),
}


def replay_once(
    runs: list[dict[str, Any]],
    fractions: tuple[float, ...],
    eta: int,
    targets: dict[str, float],
    seed: int,
    max_steps: int,
    devices: int = 2,
    max_trials: int = 100,
) -> dict[str, float]:
    """Seconds to each target (inf: missed) of one replay of random search + ASHA (see the docstring)."""
    import math
    import random

    rnd = random.Random(seed)
    curves = [dict((int(st), v) for st, v in r["curve"]) for r in runs]
    per_step = [r["seconds"] / (max(c) + 1) for r, c in zip(runs, curves, strict=True)]
    reports = sorted({st for c in curves for st in c})

    def judged(step: float) -> int:  # the first report at or after a rung
        return next((x for x in reports if x >= step), reports[-1])

    levels = sorted({judged(f * max_steps) for f in fractions} | {reports[-1]})
    trials: list[list[int]] = []  # per trial: [configuration, step reached, next level index]
    recorded: list[list[tuple[float, int]]] = [[] for _ in levels]
    promoted: list[set[int]] = [set() for _ in levels]
    hit = dict.fromkeys(targets, math.inf)
    free_at = [0.0] * devices

    def next_trial() -> int | None:
        for k in range(len(levels) - 2, -1, -1):  # the highest rung with a trial in its best 1/eta first
            for _, tid in sorted(recorded[k], reverse=True)[: len(recorded[k]) // eta]:
                if tid not in promoted[k]:
                    promoted[k].add(tid)
                    return tid
        if len(trials) < max_trials:
            trials.append([rnd.randrange(len(runs)), -1, 0])
            return len(trials) - 1
        return None

    while any(math.isinf(v) for v in hit.values()):
        d = min(range(devices), key=free_at.__getitem__)
        tid = next_trial()
        if tid is None:
            break
        cfg, step, lvl = trials[tid]
        curve, spt, upto, now = curves[cfg], per_step[cfg], levels[lvl], free_at[d]
        for st in (x for x in reports if step < x <= upto):
            for name, target in targets.items():
                if math.isinf(hit[name]) and curve.get(st, 0.0) >= target:
                    hit[name] = now + (st - max(step, 0)) * spt
        free_at[d] = now + (upto - max(step, 0)) * spt
        recorded[lvl].append((curve.get(upto, 0.0), tid))
        trials[tid] = [cfg, upto, lvl + 1]
    return hit


def replay(runs: list[dict[str, Any]], targets: dict[str, float], n: int, max_steps: int, devices: int) -> dict:
    import math
    import statistics

    out: dict[str, Any] = {}
    for name, (fractions, eta) in LADDERS.items():
        times: dict[str, list[float]] = {t: [] for t in targets}
        for seed in range(n):
            for t, v in replay_once(runs, fractions, eta, targets, seed, max_steps, devices).items():
                times[t].append(v)
        medians = {t: statistics.median(v) for t, v in times.items()}
        out[name] = {
            t: {"median_s": m if math.isfinite(m) else None, "missed": sum(map(math.isinf, times[t]))}
            for t, m in medians.items()
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "mnist1d_long.yaml")
    ap.add_argument("--configs", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--targets", default="0.966,0.972,0.976")
    ap.add_argument("--eta", type=int, default=3)
    ap.add_argument("--rungs", default="250,500,1000,2000,3750,5000", help="steps at which to rank")
    ap.add_argument("--replay", type=int, default=0, help="replays of random search + ASHA per ladder")
    ap.add_argument("--devices", type=int, default=2, help="devices of the replay")
    ap.add_argument("--runs", type=Path, required=True)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from app.spec import load_spec

    spec = load_spec(args.spec)
    metric = spec.metric.name
    todo = configs(args.spec, args.configs, args.seed)
    done: dict[int, dict[str, Any]] = {}
    if args.runs.exists():
        for line in args.runs.read_text().splitlines():
            r = json.loads(line)
            n = r["number"]
            if n < len(todo) and r["config"] == todo[n]:  # a configuration of this spec and seed
                done[n] = r
    work = [(spec.trainable, n, c, spec.budget.max_steps, metric) for n, c in enumerate(todo) if n not in done]
    print(f"{len(done)} configurations read back, {len(work)} to train", file=sys.stderr)
    args.runs.parent.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool, args.runs.open("a") as log:
        for r in pool.map(train_one, work):
            done[r["number"]] = r
            log.write(json.dumps(r) + "\n")
            log.flush()
            best = max((v for _, v in r["curve"]), default=0.0)
            print(f"config {r['number']}: best {best:.4f} in {r['seconds']} s", file=sys.stderr)
    runs = [done[n] for n in sorted(done)]
    targets = dict(zip(("easy", "medium", "hard"), (float(x) for x in args.targets.split(",")), strict=True))
    res = analyse(runs, targets, args.eta, [int(x) for x in args.rungs.split(",")])
    res["command"] = "python " + " ".join(sys.argv)
    print(f"{res['configs']} configurations", file=sys.stderr)
    for name, t in res["targets"].items():
        print(f"  {name} {t['target']}: reached by {t['reach']} ({t['share']:.1%})")
    for s, row in res["rungs"].items():
        kept = ", ".join(f"{n} {row[f'{n}_kept']}/{row[f'{n}_reach']} (ranks {row[f'{n}_ranks']})" for n in targets)
        print(f"  rung {s}: spearman {row['spearman_vs_best']:.2f}; kept in the best 1/{args.eta}: {kept}")
    if args.replay:
        res["replay"] = replay(runs, targets, args.replay, spec.budget.max_steps, args.devices)
        res["replay_runs"] = args.replay
        print(f"random search + ASHA (promotion, pause), {args.replay} replays on {args.devices} devices:")
        for name, row in res["replay"].items():
            cells = "  ".join(
                f"{t} {'a miss' if v['median_s'] is None else format(v['median_s'], '.1f') + ' s'} "
                f"(missed {v['missed']})"
                for t, v in row.items()
            )
            print(f"  {name}: {cells}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
