"""Replay a whole hyperparameter search on LCBench (YAHPO Gym's surrogate) in simulated time, through
the real `Controller`, searcher and policy on a `SimRuntime`.

Each trial is an LCBench configuration the search's own searcher proposes (`search.algorithm`: tpe,
bohb or random); the simulated trial reports `val_accuracy` (a fraction) after every epoch (one epoch
= one step) at the surrogate's cumulative training time, parks, resumes and moves at SimRuntime's
mechanism costs, and parks itself at the step limits successive-halving policies give it. The spec is
what a user would write (`search_spec`): the space is LCBench's config space, the trainable
`quanta.sim.lcbench_trial:train` (the same curve, run for real), the policy and algorithm by name
(`"default"` / None: what a spec naming none gets). Nothing in the controller, policies or searchers
knows it is simulated.

Multi-objective searches (`objectives`, e.g. `MO_OBJECTIVES`): the spec names `metrics` instead of
`metric`, and every report also carries `train_time_s`, the training time to the last epoch that a real
trial can measure after epoch e: its cumulative seconds so far / e x the epochs (`train_times`); at the
last epoch, its whole training time. `val_accuracy` stays the first objective (what `time_to_target`
and `best_so_far` read). Without `objectives` a search, its spec and its reports are exactly as before.

Interface for benchmark scripts (bench/lcbench.py finds it with `grep -rn "def simulate_search" app`):

    simulate_search(task, policy, algorithm, workers, hours, seed, targets, stop_at=None, data_path=None,
                    scheduler=None, search=None, objectives=None, stop_when=None, max_trials=None)
                    -> SearchSimResult

`SearchSimResult.time_to_target[name]` is the simulated seconds from the search's start to the first
report at or above `targets[name]` (None: not within the budget); `best_so_far` one point (seconds,
best accuracy so far) per improvement. `stop_at`: end the search at the first report at or above it
(the spec's target with `stop_on_target`). `scheduler` / `search`: knobs merged over the spec's scheduler
and search blocks (e.g. `{"mode": "kill"}`), for variants of a policy or searcher. Deterministic: the
same arguments give the same result (`wall_seconds` aside). `stop_when(seconds, metrics)` sees every
report as it arrives, in time order (seconds from the search's start); when it returns True the
simulation ends after that tick (`stopped`; e.g. once a benchmark has measured what it needs).
`max_trials`: a trial budget, so that the search can run out of trials before its hours (None: none
that matters, `MAX_TRIALS`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from quanta.controller import Controller, ControllerOptions
from quanta.db.memory import MemoryStore
from quanta.executor.actions import Event, Reported, TrialLaunch
from quanta.executor.policy.knobs import DEFAULT_POLICY, knobs_for
from quanta.sim.jobs import reporting_job
from quanta.sim.lcbench import LCBench, load_lcbench
from quanta.sim.runtime import InvariantError, JobSpec, SimCosts, SimRuntime, StepCurve
from quanta.spec import SearchSpec, parse_spec
from quanta.status import SearchStatus, TrialStatus

TRAINABLE = "quanta.sim.lcbench_trial:train"
METRIC = "val_accuracy"
TRAIN_TIME = "train_time_s"  # the training time to the last epoch, as measured so far (module docstring)
GOALS = {METRIC: "maximize", TRAIN_TIME: "minimize"}  # the metrics a simulated trial reports, better way
MO_OBJECTIVES: tuple[tuple[str, str], ...] = ((METRIC, "maximize"), (TRAIN_TIME, "minimize"))
MAX_TRIALS = 100_000  # the spec's ceiling: a search here is bounded by its simulated hours
QUANTUM_S = 30.0  # LCBench epochs last seconds and trials minutes (the service's 2 s suits live trials)
PACKING_POLICIES = frozenset({"gandiva"})  # policies that may put two trials on one device


@dataclass(frozen=True)
class SearchSimResult:
    """What one simulated search did (times in simulated seconds from the search's start)."""

    time_to_target: dict[str, float | None]
    best_so_far: list[tuple[float, float]]
    started: int  # trials started
    parked: int  # trials parked at least once (on request or at a step limit)
    killed: int  # trials a policy stopped before the search ended
    sim_seconds: float  # simulated time the search ran (to its target, or its whole budget)
    wall_seconds: float  # real time the simulation took
    completed: int = 0  # trials that ran all their epochs
    reports: int = 0
    policy: str = ""
    algorithm: str = ""
    stopped: bool = False  # ended by `stop_when` before its budget
    device_seconds: float = 0.0  # device time its trials took (every process of each), summed over them


def search_spec(
    bench: LCBench,
    *,
    policy: str = "default",
    algorithm: str | None = None,
    workers: int = 4,
    hours: float = 8.0,
    seed: int = 0,
    stop_at: float | None = None,
    quantum_s: float = QUANTUM_S,
    parallelism: int | None = None,
    scheduler: Mapping[str, Any] | None = None,
    search: Mapping[str, Any] | None = None,
    objectives: Sequence[tuple[str, str]] | None = None,
    max_trials: int | None = None,
) -> SearchSpec:
    """The spec of an LCBench search as a user would write it. `parallelism` (trials alive at once)
    defaults to `workers` for fifo (one trial per device) and twice that for the others (trials time-share
    or wait at rungs). `scheduler` / `search` are knobs merged over those blocks. `objectives`: (name,
    goal) pairs of `GOALS` (e.g. `MO_OBJECTIVES`) written as the spec's `metrics` (None: the single
    `metric` val_accuracy). Raises SpecError/KeyError/ValueError naming a bad policy, algorithm, knob,
    objective or number. `max_trials`: the spec's trial budget (None: `MAX_TRIALS`, so that the simulated
    hours bound the search)."""
    name = DEFAULT_POLICY if policy == "default" else policy
    knobs = knobs_for(name, quantum_s=quantum_s)  # KeyError names an unknown policy
    block: dict[str, Any] = {"quantum_s": quantum_s} if policy == "default" else knobs.model_dump(mode="json")
    block.update(scheduler or {})
    search_block: dict[str, Any] = {} if algorithm is None else {"algorithm": algorithm}
    search_block.update(search or {})
    doc: dict[str, Any] = {
        "name": f"lcbench-{bench.task}",
        "trainable": TRAINABLE,
        "space": bench.space,
        "metric": {"name": METRIC, "goal": "maximize", "target": stop_at},
        "budget": {
            "max_trials": MAX_TRIALS if max_trials is None else max_trials,
            "max_steps": bench.epochs,
            "max_seconds": hours * 3600.0,
            "stop_on_target": stop_at is not None,
        },
        "parallelism": parallelism or (workers if name == "fifo" else 2 * workers),
        "scheduler": block,
        "seed": seed,
        "config": {"task": bench.task},
    }
    if search_block:
        doc["search"] = search_block
    if objectives is not None:
        if stop_at is not None:
            raise ValueError("stop_at: a multi-objective search has no single target (stop it with stop_when)")
        for i, (name, _goal) in enumerate(objectives):
            if name not in GOALS:
                raise ValueError(f"objectives[{i}]: '{name}' is not reported (known: {', '.join(GOALS)})")
        del doc["metric"]
        doc["metrics"] = [{"name": name, "goal": goal} for name, goal in objectives]
        doc["config"]["report"] = [name for name, _ in objectives if name != METRIC]
    return parse_spec(doc, origin=f"lcbench task {bench.task}")


def train_times(time: Sequence[float], epochs: int) -> tuple[float, ...]:
    """`train_time_s` after each epoch of a curve whose cumulative seconds are `time`: the mean epoch so
    far times `epochs`, what a trial that has timed its epochs can tell of its whole training."""
    return tuple(t / (k + 1) * epochs for k, t in enumerate(time))


def lcbench_workload(
    bench: LCBench, step_overhead_s: float = 0.0, report: Sequence[str] = ()
) -> Callable[[TrialLaunch], JobSpec]:
    """What SimRuntime runs for a launched trial: its configuration's curve (one batched surrogate call,
    cached), reporting `val_accuracy` after each of its `max_steps` epochs, and `train_time_s` beside it
    when `report` names it. `step_overhead_s` lengthens every epoch by that many seconds (a live trial's
    report path, which the surrogate's times lack; the measured train_time_s includes it)."""
    if not step_overhead_s >= 0 or not math.isfinite(step_overhead_s):
        raise ValueError(f"step_overhead_s: must be a finite number >= 0, got {step_overhead_s}")
    unknown = [name for name in report if name != TRAIN_TIME]
    if unknown:
        raise ValueError(f"report: a simulated LCBench trial reports {METRIC} and {TRAIN_TIME}, not {unknown}")
    with_time = TRAIN_TIME in report

    def job(launch: TrialLaunch) -> JobSpec:
        curve = bench.curve(launch.config)
        ends = curve.time
        if step_overhead_s:
            ends = tuple(t + (k + 1) * step_overhead_s for k, t in enumerate(curve.time))
        more = ((TRAIN_TIME, train_times(ends, bench.epochs)),) if with_time else ()
        return reporting_job("lcbench", StepCurve(ends, METRIC, curve.val_accuracy, more), launch.max_steps)

    return job


def run_search(
    bench: LCBench,
    *,
    policy: str = "default",
    algorithm: str | None = None,
    workers: int = 4,
    hours: float = 8.0,
    seed: int = 0,
    targets: Mapping[str, float] | None = None,
    stop_at: float | None = None,
    quantum_s: float = QUANTUM_S,
    parallelism: int | None = None,
    costs: SimCosts = SimCosts(),
    step_overhead_s: float = 0.0,
    check: bool = False,
    on_tick: Callable[[Controller, SimRuntime], None] | None = None,
    scheduler: Mapping[str, Any] | None = None,
    search: Mapping[str, Any] | None = None,
    objectives: Sequence[tuple[str, str]] | None = None,
    stop_when: Callable[[float, Mapping[str, float | None]], bool] | None = None,
    max_trials: int | None = None,
) -> SearchSimResult:
    """Simulate one search on `bench` (any surrogate model: tests pass a stand-in). `check` verifies the
    cluster's invariants after every tick (device capacity, work conserved, nothing both computing and
    queued); `on_tick` is called after every tick (tests inspect the controller there); `step_overhead_s`:
    see `lcbench_workload`; `objectives` and `stop_when`: see the module docstring."""
    if workers < 1:
        raise ValueError(f"workers: must be >= 1, got {workers}")
    if not hours > 0 or not math.isfinite(hours):
        raise ValueError(f"hours: must be a positive number, got {hours}")
    started = time.perf_counter()
    spec = search_spec(
        bench,
        policy=policy,
        algorithm=algorithm,
        workers=workers,
        hours=hours,
        seed=seed,
        stop_at=stop_at,
        quantum_s=quantum_s,
        parallelism=parallelism,
        scheduler=scheduler,
        search=search,
        objectives=objectives,
        max_trials=max_trials,
    )
    report = [name for name, _ in objectives or () if name != METRIC]
    runtime = SimRuntime if stop_when is None else _WatchedRuntime
    rt = runtime(
        1,
        workers,
        kind="lcbench",
        costs=costs,
        max_per_device=2 if spec.scheduler.policy in PACKING_POLICIES else 1,
        workload=lcbench_workload(bench, step_overhead_s, report),
    )
    store = MemoryStore(keep_measurements=False)
    options = ControllerOptions(poll_cap_s=math.inf, publish_every_s=math.inf, cache_views=True)
    ctl = Controller(store, rt, options)
    search_id = ctl.submit(spec)
    s = ctl.search(search_id)
    assert s is not None
    if isinstance(rt, _WatchedRuntime) and stop_when is not None:
        rt.watch(stop_when, s.started_at)
    while s.status == SearchStatus.RUNNING:
        if isinstance(rt, _WatchedRuntime) and rt.stop:
            break
        ctl.step()
        if check:
            rt.check()
            _check_search(ctl, rt, search_id)
        if on_tick is not None:
            on_tick(ctl, rt)
    ctl.flush()
    stopped = isinstance(rt, _WatchedRuntime) and rt.stop and s.status == SearchStatus.RUNNING
    result = _result(ctl, rt, store, search_id, spec, dict(targets or {}), time.perf_counter() - started)
    if stopped:
        result = replace(result, stopped=True, sim_seconds=min(result.sim_seconds, rt.now() - s.started_at))
    return result


class _WatchedRuntime(SimRuntime):
    """A `SimRuntime` whose reports a `stop_when` sees as they leave it (in time order); `stop` turns
    True when it has had enough. Nothing else changes: the controller sees the same events."""

    def watch(self, stop_when: Callable[[float, Mapping[str, float | None]], bool], t0: float) -> None:
        self._stop_when = stop_when
        self._t0 = t0
        self.stop = False

    def poll(self, timeout: float) -> list[Event]:
        events = super().poll(timeout)
        for e in events:
            if isinstance(e, Reported) and not self.stop and self._stop_when(e.at - self._t0, e.metrics):
                self.stop = True
        return events


def _check_search(ctl: Controller, rt: SimRuntime, search_id: int) -> None:
    """What computes is RUNNING in the controller; no QUEUED trial is resident; no trial past its
    budget of steps."""
    resident = rt.residency()
    for tid in rt.running_ids():
        st = ctl.trial(tid).status
        if st != TrialStatus.RUNNING:
            raise InvariantError(f"trial {tid} computes but the controller has it {st}")
    for t in ctl.trials_of(search_id):
        if t.status == TrialStatus.QUEUED and t.id in resident:
            raise InvariantError(f"trial {t.id} is queued and resident")
        if t.steps > t.max_steps:
            raise InvariantError(f"trial {t.id}: {t.steps} steps of {t.max_steps}")


def _result(
    ctl: Controller,
    rt: SimRuntime,
    store: MemoryStore,
    search_id: int,
    spec: SearchSpec,
    targets: dict[str, float],
    wall: float,
) -> SearchSimResult:
    s = ctl.search(search_id)
    assert s is not None
    t0 = s.started_at
    budget = spec.budget.max_seconds
    end = rt.now()
    best = -math.inf
    curve: list[tuple[float, float]] = []
    reached: dict[str, float | None] = {name: None for name in targets}
    # The search ends at the first tick past its budget: a report after the budget does not count.
    for r in sorted(store.search_reports(search_id), key=lambda r: (r.at, r.trial_id, r.step)):
        at = r.at - t0
        if r.objective is None or at > budget + 1e-9:
            continue
        if r.objective > best:
            best = r.objective
            curve.append((at, best))
        for name, target in targets.items():
            if reached[name] is None and r.objective >= target:
                reached[name] = at
    trials = ctl.trials_of(search_id)
    ended = s.reached_at if spec.budget.stop_on_target and s.reached_at is not None else t0 + budget
    return SearchSimResult(
        time_to_target=reached,
        best_so_far=curve,
        started=sum(1 for t in trials if t.started_at is not None),
        parked=len(rt.parked_ids),
        killed=sum(
            1 for t in trials if t.status == TrialStatus.KILLED and t.finished_at is not None and t.finished_at < end
        ),
        sim_seconds=min(end, ended) - t0,
        wall_seconds=wall,
        completed=sum(1 for t in trials if t.status == TrialStatus.COMPLETED),
        device_seconds=math.fsum(t.device_seconds for t in trials),  # each: its earlier processes included
        reports=rt.reports,
        policy=spec.scheduler.policy,
        algorithm=spec.search.algorithm,
    )


_BENCHES: dict[tuple[str, str | None], LCBench] = {}  # surrogates (and their cached curves) by task


def lcbench(task: str, data_path: str | None = None) -> LCBench:
    """The real surrogate for `task`, opened once per process (curves stay cached across searches)."""
    key = (str(task), data_path)
    bench = _BENCHES.get(key)
    if bench is None:
        bench = _BENCHES[key] = load_lcbench(str(task), data_path)
    return bench


def simulate_search(
    task: str,
    policy: str,
    algorithm: str | None,
    workers: int,
    hours: float,
    seed: int,
    targets: dict[str, float],
    stop_at: float | None = None,
    data_path: str | None = None,
    scheduler: Mapping[str, Any] | None = None,
    search: Mapping[str, Any] | None = None,
    objectives: Sequence[tuple[str, str]] | None = None,
    stop_when: Callable[[float, Mapping[str, float | None]], bool] | None = None,
    max_trials: int | None = None,
) -> SearchSimResult:
    """One search on LCBench task `task` with Quanta's `policy` ("default": the spec's default) and
    searcher `algorithm` (None: the spec's default) on `workers` devices for `hours` simulated hours,
    `scheduler` / `search` knobs merged over the spec's, `objectives` (None: val_accuracy alone) and
    `stop_when` as in the module docstring, which also says what comes back."""
    return run_search(
        lcbench(task, data_path),
        policy=policy,
        algorithm=algorithm,
        workers=workers,
        hours=hours,
        seed=seed,
        targets=targets,
        stop_at=stop_at,
        scheduler=scheduler,
        search=search,
        objectives=objectives,
        stop_when=stop_when,
        max_trials=max_trials,
    )
