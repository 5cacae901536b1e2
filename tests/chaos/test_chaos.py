"""Chaos: a distributed search on two worker nodes while faults are injected at random moments — a trial
process killed with SIGKILL, a worker killed with SIGKILL (and started again), the controller killed
with SIGKILL (and started again), Redis restarted empty. At the end every report each trial wrote to its
own log (`tests.distributed.trainables:guarded`) must be stored, none twice (by its nonce, and by its
(trial, step, attempt)), the curves show every step once, every trial number exists once, no trial ran
twice at once, and the search completes.

A report stored but missing from the trial's log is allowed only for a process that was killed: the
trainable logs a report just after `trial.report` returns, so a kill in between leaves it unlogged.

Short form (make test): one fault of each kind. Long form (make chaos): QUANTA_CHAOS_FAULTS=20."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter

import pytest

from tests.chaos.conftest import env_int, publish
from tests.distributed.conftest import Cluster, fault_spec, wait_for

# The long form runs for many minutes: its bound grows with the faults it injects.
pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.timeout(600 + 90 * env_int("QUANTA_CHAOS_FAULTS", 4))]

KINDS = ("trial", "worker", "controller", "redis")


def _trial_pids(cluster: Cluster) -> list[tuple[str, int, int]]:
    out = []
    for node in ("n1", "n2"):
        for tid, r in cluster.node_trials(node).items():
            if r.get("pid"):
                out.append((node, tid, int(r["pid"])))
    return out


def _inject(cluster: Cluster, kind: str, rng: random.Random) -> tuple[str, int] | None:
    """Inject one fault; returns what was done and how many trial processes it killed (None when there
    was nothing to hit)."""
    if kind == "trial":
        pids = _trial_pids(cluster)
        if not pids:
            return None
        node, tid, pid = rng.choice(pids)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        return f"kill -9 trial {tid} (pid {pid}) on {node}", 1
    if kind == "worker":
        node = rng.choice(["n1", "n2"])
        resident = len(cluster.node_trials(node))
        cluster.kill(node)  # its template, then its trial processes, exit with it
        time.sleep(rng.uniform(0.5, 2.0))
        cluster.ensure()  # the node comes back (new incarnation) once it has registered
        return f"kill -9 worker {node} ({resident} trials on it), restarted", resident
    if kind == "controller":
        cluster.kill("controller")
        time.sleep(rng.uniform(0.5, 2.0))
        cluster.controller()
        return "kill -9 controller, restarted", 0
    cluster.redis.stop()  # no persistence: every queued message is lost
    time.sleep(rng.uniform(0.5, 2.0))
    cluster.redis.start()
    return "Redis restarted empty", 0


def test_a_search_survives_random_kills_without_losing_a_report(cluster: Cluster) -> None:
    faults = env_int("QUANTA_CHAOS_FAULTS", len(KINDS))
    trials = env_int("QUANTA_CHAOS_TRIALS", 6)
    seed = env_int("QUANTA_CHAOS_SEED", 12)
    rng = random.Random(seed)
    plan = list(KINDS)
    rng.shuffle(plan)
    plan = (plan + [rng.choice(KINDS) for _ in range(max(0, faults - len(KINDS)))])[:faults]

    audit = cluster.tmp / f"audit-chaos-{seed}"
    spec = fault_spec(
        audit,
        name="chaos",
        budget={"max_trials": trials, "max_steps": 150 + 10 * faults, "max_seconds": 1800},
        scheduler={
            "policy": "timeslice",
            "quantum_s": 1.0,
            "checkpoint_every_quanta": 1,
            "checkpoint_every_s": 1.0,
            "max_retries": 10 + 2 * faults,  # every fault may crash a trial: none may fail for it
        },
    )
    sid = cluster.submit(spec)
    started = time.monotonic()
    wait_for(lambda: len(cluster.store.search_reports(sid)) >= 10, 120, "the first reports")
    done: list[str] = []
    injected: Counter[str] = Counter()
    processes_killed = 0
    for kind in plan:
        row = cluster.search(sid)
        if row is not None and row.status != "running":
            break
        time.sleep(rng.uniform(0.5, 2.5))
        hit = _inject(cluster, kind, rng)
        if hit is not None:
            done.append(hit[0])
            injected[kind] += 1
            processes_killed += hit[1]
    cluster.ensure()
    row = cluster.wait_search(sid, 300 + 60 * faults)
    elapsed = time.monotonic() - started

    assert row.status == "completed", row
    rows = cluster.trials(sid)
    numbers = Counter(t.number for t in rows)
    assert sorted(numbers) == list(range(trials)) and max(numbers.values()) == 1, f"trial numbers {numbers}"
    steps = spec["budget"]["max_steps"]
    unfinished = [(t.number, t.status, t.steps, t.error) for t in rows if t.status != "completed" or t.steps != steps]
    assert not unfinished, f"trials not run to their end: {unfinished}"
    assert cluster.doubles(audit) == [], "a trial ran twice at once"

    records = cluster.audit_records(audit)
    logged = Counter(r["nonce"] for recs in records.values() for r in recs if r["event"] == "report")
    reports = cluster.store.search_reports(sid)
    stored = Counter(r.metrics["nonce"] for r in reports)
    lost = set(logged) - set(stored)
    doubled = [k for k, v in stored.items() if v > 1]
    unlogged = set(stored) - set(logged)
    # By what a report is, not only by its nonce: one row per (trial, step, attempt). A step a later
    # attempt ran again (restarted from an older checkpoint) is a row of its own; the curves show it once.
    per_key = Counter((r.trial_id, r.step, r.attempt) for r in reports)
    per_step = Counter((r.trial_id, r.step) for r in reports)
    twice = [k for k, n in per_key.items() if n > 1]
    rerun = [k for k, n in per_step.items() if n > 1]
    curves = cluster.store.curves(sid, 10**6).trials
    curve_twice = sum(len(points) - len({step for step, _ in points}) for points in curves.values())
    figures = {
        "seed": seed,
        "faults_planned": len(plan),
        "faults_injected": dict(injected),
        "faults_survived": sum(injected.values()),
        "what": done,
        "trials": trials,
        "reports_logged": sum(logged.values()),
        "reports_stored": sum(stored.values()),
        "reports_lost": len(lost),
        "reports_stored_twice": len(doubled),
        "reports_stored_twice_per_trial_step_attempt": len(twice),
        "steps_stored_by_two_attempts": len(rerun),
        "curve_points_twice": curve_twice,
        "reports_unlogged": len(unlogged),
        "trial_processes_killed": processes_killed,
        "retries": sum(t.retries for t in rows),
        "search_seconds": round(elapsed, 1),
    }
    publish("chaos", figures)
    assert logged, "the trials reported nothing"
    if lost:  # where each was made, and what is stored at its (trial, step)
        made = {r["nonce"]: (tid, r["step"]) for tid, recs in records.items() for r in recs if r["event"] == "report"}
        at = {
            k: [(r.attempt, r.metrics["nonce"], r.at) for r in reports if (r.trial_id, r.step) == k]
            for k in made.values()
        }
        where = [(made[n], at[made[n]]) for n in sorted(lost)]
        raise AssertionError(f"{len(lost)} reports lost: {where} {figures}")
    assert not doubled, f"{len(doubled)} reports stored twice: {figures}"
    assert not twice, f"{len(twice)} (trial, step, attempt) stored twice: {twice[:5]} {figures}"
    assert curve_twice == 0, f"the curves show a step twice: {figures}"
    # Only a killed process can have reported without logging it (killed between the two).
    assert len(unlogged) <= processes_killed, f"reports nobody made: {figures}"
