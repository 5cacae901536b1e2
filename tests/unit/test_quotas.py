"""Per-user quotas in the controller (app/controller/book_trials.py, book_sync.py), on the simulator's
runtime: a user's alive trials and the devices they need stay within the user's quota; a search with no
room stays queued and says why; raising the quota lets it start at the next tick."""

from __future__ import annotations

from quanta.controller import Controller, ControllerOptions
from quanta.db.memory import MemoryStore
from quanta.db.models import FIRST_ADMIN
from quanta.executor.policy import make_policy
from quanta.sim.runtime import SimRuntime
from quanta.spec import parse_spec
from quanta.status import TrialStatus

SPEC = parse_spec(
    {
        "name": "q",
        "trainable": "tests.trainables:linear",
        "space": {"lr": {"uniform": [0.0, 1.0]}},
        "metric": {"name": "accuracy"},
        "budget": {"max_trials": 6, "max_steps": 100_000},
        "parallelism": 3,
        "config": {"rate": 1.0},  # the simulated runtime's steps per second: trials stay alive
    }
).model_dump(mode="json")


def _controller() -> tuple[Controller, MemoryStore]:
    store = MemoryStore()
    ctl = Controller(
        store, SimRuntime(1, 8, max_per_device=1), ControllerOptions(policy=make_policy("fifo"), quantum_s=60.0)
    )
    return ctl, store


def _alive(store: MemoryStore, search_id: int) -> int:
    return sum(1 for t in store.trials(search_id) if not TrialStatus(t.status).final)


def test_a_user_at_their_trial_quota_gets_no_more_trials_and_their_next_search_queues_with_the_reason():
    ctl, store = _controller()
    store.add_user("bob", 0.0, max_alive_trials=2)
    a = store.create_search("a", SPEC, 0.0, owner="bob").id
    b = store.create_search("b", SPEC, 0.0, owner="bob").id
    mine = store.create_search("admin's", SPEC, 0.0, owner=FIRST_ADMIN).id
    ctl.step(max_wait=1.0)
    ctl.step(max_wait=1.0)
    assert store.search(a).status == "running" and _alive(store, a) == 2  # parallelism 3, quota 2
    assert store.search(a).waiting == "quota: user bob has 2 of at most 2 alive trials"
    assert store.search(b).status == "queued" and store.trials(b) == []
    assert store.search(b).waiting == "quota: user bob has 2 of at most 2 alive trials"
    assert _alive(store, mine) == 3 and store.search(mine).waiting is None  # the admin has no quota

    store.update_user("bob", max_alive_trials=5)
    ctl.step(max_wait=1.0)
    ctl.step(max_wait=1.0)
    assert store.search(b).status == "running"
    assert _alive(store, a) + _alive(store, b) == 5  # a fills to 3 first, b gets the rest
    assert store.search(a).waiting is None  # a has its parallelism
    assert store.search(b).waiting == "quota: user bob has 5 of at most 5 alive trials"


def test_a_device_quota_counts_the_devices_each_trial_needs():
    ctl, store = _controller()
    store.add_user("carol", 0.0, max_devices=3)
    two_each = {**SPEC, "resources": {"devices_per_trial": 2}}
    a = store.create_search("a", two_each, 0.0, owner="carol").id
    ctl.step(max_wait=1.0)
    assert _alive(store, a) == 1  # a second trial would hold 4 devices
    assert store.search(a).waiting == "quota: user carol's alive trials hold 2 of at most 3 devices (a trial needs 2)"
    store.update_user("carol", max_devices=0)  # 0 = no quota
    ctl.step(max_wait=1.0)
    assert _alive(store, a) == 3 and store.search(a).waiting is None
