"""Many users on one simulated cluster: which user each trace job belongs to, the weights of `--shares`,
and the per-user report (mean JCT, finish-time fairness rho, Jain's index).

Users. A trace that names its own users keeps them (`load_trace("all")` gives each job its Philly
virtual cluster, the file it came from). Otherwise `assign_users` deals the jobs to `n` users
(``u0``, ``u1``, ...) by smooth weighted round robin with Zipf weights 1, 1/2, 1/3, ...: deterministic,
interleaved in time, and skewed (with 8 users, u0 submits 37 % of the jobs and u7 5 %).

rho (Themis's finish-time fairness) of user u = T_shared / T_ideal, where T_shared is the mean JCT of
u's jobs on the shared cluster and T_ideal the mean JCT of the same jobs, arriving at the same times,
simulated alone on u's fair share of the cluster: D * w_u / sum of weights devices (rounded down; at
least the most devices one of its jobs asks for, so that every job can run: that flatters T_ideal and
so errs towards a larger rho), under the same policy. On a mix of kinds (`--kind v100=100,k80=100`) the
fair share keeps the mix: each kind's GPUs times the same fraction, in whole servers (at least one of
each kind), plus servers of a kind a job runs on until each of the user's jobs fits on kinds where its
throughput is not 0 (`fair_mix`). rho = 1 is the ideal; max_rho is the worst user's.
Jain's fairness index, (sum x)^2 / (n * sum x^2), is computed over x = min(1, 1 / rho): each user's speed
relative to its fair share, a user that ran faster than on its fair share (it used devices others left
idle: work conservation) counting as 1, so that it measures whether every user got its fair share,
not whether the surplus was spread evenly; `jain_index_uncapped` is the same over 1 / rho itself.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from quanta.sim.traces import TraceJob


def zipf_weights(n: int) -> list[float]:
    return [1.0 / (i + 1) for i in range(n)]


def assign_users(jobs: Sequence[TraceJob], n: int) -> list[TraceJob]:
    """`jobs` with a user each: their own when every job has one (a trace with a user column), else
    dealt in arrival order to ``u0``..``u{n-1}`` by smooth weighted round robin on Zipf weights."""
    if n < 1:
        raise ValueError(f"users: must be >= 1, not {n}")
    if jobs and all(j.user for j in jobs):
        return list(jobs)
    weights = zipf_weights(n)
    total = sum(weights)
    current = [0.0] * n
    out: list[TraceJob] = []
    for j in sorted(jobs, key=lambda j: (j.arrival, j.id)):
        for i in range(n):
            current[i] += weights[i]
        pick = max(range(n), key=lambda i: (current[i], -i))
        current[pick] -= total
        out.append(replace(j, user=f"u{pick}"))
    return out


def parse_shares(value: str) -> dict[str, float] | None:
    """`--shares`: ``none`` (no share layer: None), ``equal`` (every user weighs 1: {}), or a JSON file
    {user: weight > 0}. ValueError naming the file and the key on bad input."""
    if value == "none":
        return None
    if value == "equal":
        return {}
    path = Path(value)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"shares: {value} is not equal, none or an existing JSON file") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"shares: {value}: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"shares: {value}: must be a JSON object {{user: weight}}")
    out: dict[str, float] = {}
    for user, w in data.items():
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w <= 0:
            raise ValueError(f"shares: {value}: weight of '{user}' must be a number > 0, not {w!r}")
        out[str(user)] = float(w)
    return out


def fair_devices(gpus: int, weights: Mapping[str, float], users: Sequence[str]) -> dict[str, int]:
    """Each user's fair share of `gpus` devices (weight 1 when not named), rounded down, at least 1."""
    w = {u: float(weights.get(u, 1.0)) for u in users}
    total = sum(w.values())
    return {u: max(1, int(math.floor(gpus * w[u] / total + 1e-9))) for u in users}


def fair_mix(kind: str, gpus: int, gpus_per_server: int, devices: int, jobs: Sequence[TraceJob]) -> tuple[str, int]:
    """(kind, GPUs) of a fair share of `devices` out of `gpus` for `jobs`: `kind` itself when it is one
    kind; for a mix, each kind's count scaled by devices / gpus in whole servers (at least one), then
    servers added (of the kind with the most GPUs left) until every job fits on the kinds it runs on."""
    from quanta.sim.driver import server_kinds

    if "=" not in kind:
        return kind, devices
    full: dict[str, int] = {}
    for k in server_kinds(kind, gpus, gpus_per_server):
        full[k] = full.get(k, 0) + gpus_per_server
    frac = devices / gpus
    mine = {k: gpus_per_server * max(1, round(n * frac / gpus_per_server)) for k, n in full.items()}
    table = None
    for j in jobs:
        if j.rate is not None:
            runs = set(full)
        else:
            if table is None:
                from quanta.sim.throughputs import Throughputs
                from quanta.sim.traces import throughputs_path

                table = Throughputs.load(throughputs_path())
            runs = {k for k in full if (table.solo(j.job_type, j.devices, k) or 0.0) > 0}
        while sum(mine[k] for k in runs) < min(j.devices, gpus):
            room = [k for k in runs if mine[k] < full[k]]
            if not room:
                break  # the whole cluster cannot run it: simulate() names the job
            grow = max(room, key=lambda k: (full[k] - mine[k], k))
            mine[grow] += gpus_per_server
    return ",".join(f"{k}={n}" for k, n in mine.items()), sum(mine.values())


def jain(xs: Sequence[float]) -> float:
    """Jain's fairness index of `xs` (1 = all equal; 1/n = one takes all)."""
    if not xs:
        return 1.0
    s2 = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * s2) if s2 > 0 else 1.0


def user_report(
    jobs: Sequence[TraceJob],
    rows: Sequence[Mapping[str, Any]],
    gpus: int,
    weights: Mapping[str, float],
    ideal_jct: Callable[[list[TraceJob], int], list[float]],
) -> dict[str, Any]:
    """`users` {name: {jobs, mean_jct_s, ideal_mean_jct_s, fair_devices, rho}}, `max_rho` and
    `jain_index` for a run's per-job `rows` (each with `id` and `jct_s`). `ideal_jct(jobs, devices)`
    simulates a user's jobs alone on `devices` devices and returns their JCTs (see the module
    docstring); it is called once per user."""
    user_of = {j.id: j.user for j in jobs}
    names = sorted({j.user for j in jobs})
    fair = fair_devices(gpus, weights, names)
    jct: dict[str, list[float]] = {u: [] for u in names}
    for r in rows:
        jct[user_of[r["id"]]].append(float(r["jct_s"]))
    users: dict[str, dict[str, Any]] = {}
    for u in names:
        mine = [j for j in jobs if j.user == u]
        devices = min(gpus, max(fair[u], max(j.devices for j in mine)))
        ideal = ideal_jct(mine, devices)
        shared_mean = sum(jct[u]) / len(jct[u])
        ideal_mean = sum(ideal) / len(ideal)
        users[u] = {
            "jobs": len(mine),
            "mean_jct_s": shared_mean,
            "ideal_mean_jct_s": ideal_mean,
            "fair_devices": devices,
            "rho": shared_mean / ideal_mean if ideal_mean > 0 else 1.0,
        }
    rhos = [v["rho"] for v in users.values()]
    return {
        "users": users,
        "max_rho": max(rhos, default=1.0),
        "jain_index": jain([min(1.0, 1.0 / r) for r in rhos if r > 0]),
        "jain_index_uncapped": jain([1.0 / r for r in rhos if r > 0]),
    }


def user_summary(
    jobs: Sequence[TraceJob],
    rows: Sequence[Mapping[str, Any]],
    policy: str,
    *,
    gpus: int,
    gpus_per_server: int,
    quantum_s: float,
    kind: str,
    weights: Mapping[str, float] | None,
    cache: dict[tuple[Any, ...], list[float]] | None = None,
    kind_aware: bool = True,
) -> dict[str, Any]:
    """`user_report` for one run of `policy`, each user's ideal simulated with the same policy (and the
    same `kind_aware`) alone on its fair share (`fair_mix` on a mix of kinds; `cache`, when given, keeps
    those JCTs by (policy, user, cluster, kind_aware) across runs)."""
    from quanta.sim.driver import simulate

    memo = cache if cache is not None else {}
    aware = kind_aware and "=" in kind  # on one kind the knob changes nothing: share the cache

    def ideal(mine: list[TraceJob], devices: int) -> list[float]:
        mix, total = fair_mix(kind, gpus, gpus_per_server, devices, mine)
        key = (policy, mine[0].user, total, mix, aware)
        if key not in memo:
            res = simulate(
                mine,
                policy,
                gpus=total,
                gpus_per_server=gpus_per_server,
                quantum_s=quantum_s,
                kind=mix,
                check=False,
                kind_aware=kind_aware,
            )
            memo[key] = [r["jct_s"] for r in res.jobs]
        return memo[key]

    return user_report(jobs, rows, gpus, weights or {}, ideal)
