"""Just-in-time trials (`TrialMaker.alive_cap`): under a policy that runs trials to their next rung
without time-slicing (fifo, asha, hyperband), a search keeps at most the cluster's devices + `lookahead`
trials running or waiting to start, whatever its parallelism; a time-slicing policy keeps its whole
parallelism alive; `lookahead: null` restores parallelism alone."""

from __future__ import annotations

from typing import Any

import pytest

from quanta.controller import Controller, ControllerOptions
from quanta.db.memory import MemoryStore
from quanta.db.models import FIRST_ADMIN
from quanta.executor.policy import policy_for
from quanta.sim.runtime import SimRuntime
from quanta.spec import parse_spec
from quanta.status import TrialStatus


def _spec(scheduler: dict[str, Any], parallelism: int = 8, devices_per_trial: int = 1) -> Any:
    return parse_spec(
        {
            "name": "jit",
            "trainable": "tests.trainables:linear",
            "space": {"lr": {"uniform": [0.0, 1.0]}},
            "metric": {"name": "accuracy"},
            "budget": {"max_trials": 50, "max_steps": 100_000},
            "parallelism": parallelism,
            "resources": {"devices_per_trial": devices_per_trial},
            "scheduler": scheduler,
            "config": {"rate": 1.0},  # the simulated runtime's steps per second: trials stay alive
        }
    )


def _alive_after_two_ticks(scheduler: dict[str, Any], devices: int, **kw: Any) -> int:
    spec = _spec(scheduler, **kw)
    store = MemoryStore()
    ctl = Controller(
        store, SimRuntime(1, devices, max_per_device=1), ControllerOptions(policy=policy_for(spec.scheduler))
    )
    sid = store.create_search("jit", spec.model_dump(mode="json"), 0.0, owner=FIRST_ADMIN).id
    ctl.step(max_wait=1.0)
    ctl.step(max_wait=1.0)
    return sum(1 for t in store.trials(sid) if not TrialStatus(t.status).final)


@pytest.mark.parametrize("policy", ["asha", "hyperband", "fifo"])
def test_a_run_to_rung_policy_keeps_one_trial_ahead_of_the_devices(policy: str) -> None:
    assert _alive_after_two_ticks({"policy": policy}, devices=2) == 3  # 2 devices + lookahead 1, not 8


def test_lookahead_and_parallelism_and_devices_per_trial_bound_it_together() -> None:
    assert _alive_after_two_ticks({"policy": "asha", "lookahead": 0}, devices=2) == 2
    assert _alive_after_two_ticks({"policy": "asha", "lookahead": 3}, devices=2) == 5
    assert _alive_after_two_ticks({"policy": "asha"}, devices=8, parallelism=4) == 4  # parallelism is lower
    assert _alive_after_two_ticks({"policy": "asha"}, devices=4, devices_per_trial=2) == 3  # 2 slots + 1


def test_without_lookahead_or_under_a_time_slicing_policy_the_whole_parallelism_is_alive() -> None:
    assert _alive_after_two_ticks({"policy": "asha", "lookahead": None}, devices=2) == 8
    assert _alive_after_two_ticks({"policy": "gandiva"}, devices=2) == 8
    assert _alive_after_two_ticks({"policy": "timeslice"}, devices=2) == 8
