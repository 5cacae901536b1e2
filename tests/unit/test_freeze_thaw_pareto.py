"""Freeze-thaw on a search with several objectives: expected hypervolume improvement per device-second
(quanta.executor.policy.freeze_thaw_pareto). Pure: nothing trains."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from quanta.executor.policy.freeze_thaw import FreezeThawPolicy
from quanta.executor.policy.freeze_thaw_pareto import loss_of_score
from quanta.executor.policy.types import ClusterSnapshot, DeviceView, SearchView, TrialStatus, TrialView
from quanta.search.curve_model import score

MAX = 52
SEARCH = SearchView(id=1, goal="maximize", max_steps=MAX, more_trials=True, pareto=True, reference=(0.0, 10.0))
ONE = (DeviceView("cpu:0"),)


def trial(tid, accs=(), cost=5.0, violation=0.0, *, devices=(), running=False) -> TrialView:
    curve = tuple((i + 1, a) for i, a in enumerate(accs))
    return TrialView(
        id=tid,
        search_id=1,
        status=TrialStatus.RUNNING if devices else TrialStatus.QUEUED,
        devices=tuple(devices),
        running=running,
        arrival=float(tid),
        steps_done=len(accs),
        max_steps=MAX,
        device_seconds=2.0 * len(accs),
        curve=curve,
        points=tuple((i + 1, (-a, cost), violation) for i, a in enumerate(accs)),
    )


def snap(trials, state=None, search=SEARCH):
    return ClusterSnapshot(now=0.0, devices=ONE, trials=tuple(trials), searches=(search,), policy_state=state or {})


def learned() -> dict:
    """A policy's state after trials (ended since) that tell the model how curves go, with costs 3..7."""
    hist = [
        trial(
            100 + i, [0.5 + 0.4 * i / 40 + 0.01 * e for e in range(6)], cost=3.0 + 4.0 * (i % 5) / 4, devices=("cpu:9",)
        )
        for i in range(40)
    ]
    return dict(FreezeThawPolicy().plan(snap(hist)).state)


@pytest.mark.parametrize(
    ("goal", "unit"), [("maximize", True), ("minimize", True), ("maximize", False), ("minimize", False)]
)
def test_a_score_maps_back_to_the_first_objective_s_loss(goal, unit):
    values = np.array([0.1, 0.4, 0.8])
    z = np.array([score(v, goal, unit) for v in values])
    want = -values if goal == "maximize" else values
    assert loss_of_score(z, goal, unit) == pytest.approx(want)


def test_the_front_of_every_point_is_kept_in_the_state():
    state = learned()
    kept = [tuple(f) for f in state["fronts"]["1"]]
    assert kept and all(f[0] < 0 for f in kept)
    for a in kept:  # non-dominated among themselves
        assert not any(b != a and b[0] <= a[0] and b[1] <= a[1] for b in kept)


def test_a_cheap_parked_trial_that_would_move_the_front_goes_before_a_costly_dominated_one():
    state = learned()
    # (the costly one came first: arrival order would choose it)
    costly = trial(1, [0.8, 0.81, 0.82, 0.83], cost=9.0, devices=("cpu:0",))  # dominated by the front's trials
    cheap = trial(2, [0.8, 0.81, 0.82, 0.83], cost=0.5, devices=("cpu:0",))  # as accurate as most, far cheaper
    plan = FreezeThawPolicy().plan(snap([costly, cheap], state))
    assert plan.devices_of(2) == ("cpu:0",) and 1 in plan.hold


def test_an_infeasible_trial_is_worth_nothing_and_waits():
    state = learned()
    bad = trial(1, [0.88, 0.9, 0.92, 0.93], cost=0.5, violation=1.0, devices=("cpu:0",))
    fine = trial(2, [0.8, 0.81, 0.82, 0.83], cost=0.5, devices=("cpu:0",))  # arrived after the infeasible one
    plan = FreezeThawPolicy().plan(snap([bad, fine], state))
    assert plan.devices_of(2) == ("cpu:0",) and 1 in plan.hold
    assert plan.stop == ()  # never given up on: a Pareto search has no chance of a point target computed


def test_a_single_objective_search_keeps_no_front():
    single = dataclasses.replace(SEARCH, pareto=False, reference=None, target=0.95)
    plan = FreezeThawPolicy().plan(snap([trial(1, [0.5, 0.6], devices=("cpu:0",))], search=single))
    assert "fronts" not in plan.state
