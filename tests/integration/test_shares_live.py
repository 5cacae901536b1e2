"""The share layer on a live controller: two users' searches on two CPU devices each get about half the
device time (from the stored quanta), and when one ends the other takes both devices at once."""

from __future__ import annotations

import time

from quanta.controller import Controller, ControllerOptions
from quanta.db.store import Store
from quanta.devices import parse_devices
from quanta.executor.runtime.local import LocalRuntime
from quanta.spec import parse_spec

QUANTUM_S = 0.25


def spec(name: str) -> dict:
    return {
        "name": name,
        "trainable": "tests.trainables:linear",
        "space": {"lr": {"choice": [0.01]}},
        "metric": {"name": "accuracy", "target": 2.0},  # never reached: the searches run until stopped
        "budget": {"max_trials": 2, "max_steps": 10_000_000},
        "parallelism": 2,
        "search": {"algorithm": "random"},
        "scheduler": {"policy": "timeslice", "quantum_s": QUANTUM_S},
        "config": {"report_every": 1000, "sleep_s": 0.002, "hidden": 4},  # tiny, mostly sleeping
    }


def step_until(ctl: Controller, cond, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not met in time"
        ctl.step()


def test_two_users_split_two_devices_and_a_finished_search_hands_its_share_over(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/q.db")
    store.add_user("ann", 0.0)
    store.add_user("bob", 0.0)
    rt = LocalRuntime(parse_devices("cpu:2"), warm_modules=["tests.trainables"])
    ctl = Controller(store, rt, ControllerOptions(workdir=tmp_path))
    now = time.time()
    a = store.create_search("a", parse_spec(spec("a")).model_dump(mode="json"), now, "ann").id
    b = store.create_search("b", parse_spec(spec("b")).model_dump(mode="json"), now, "bob").id
    assert a is not None and b is not None

    def running(search_id: int) -> int:
        ids = {t.id for t in ctl.trials_of(search_id)}
        return sum(1 for tid, r in rt.residency().items() if tid in ids and r.running)

    try:
        step_until(ctl, lambda: running(a) == 1 and running(b) == 1)
        ctl.flush()
        since = {q.id for q in store.quanta()}
        end = time.monotonic() + 12.0
        while time.monotonic() < end:
            ctl.step()
            assert running(a) <= 1 and running(b) <= 1  # one device each, every quantum
        ctl.flush()
        device_s = {a: 0.0, b: 0.0}
        for q in store.quanta():
            if q.id not in since:
                device_s[q.search_id] += (q.ended_at - q.started_at) * len(q.devices.split(","))
        share_a = device_s[a] / (device_s[a] + device_s[b])
        assert 0.4 <= share_a <= 0.6, device_s

        store.update_search(b, command="stop")
        step_until(ctl, lambda: store.search(b).status == "stopped")
        handed = time.monotonic()
        step_until(ctl, lambda: running(a) == 2, timeout=30)
        assert time.monotonic() - handed < 5 * QUANTUM_S + 2.0  # at once (a few quanta on a busy machine)
        store.update_search(a, command="stop")
        step_until(ctl, lambda: store.search(a).status == "stopped")
    finally:
        ctl.close()
