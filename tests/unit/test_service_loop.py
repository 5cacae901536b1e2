"""The one controller loop (`quanta.service.ControllerLoop`) that `quanta run`, `quanta serve` and
`quanta controller` run: it rests while idle, never while a trial is alive, retries or raises a failing
round as told, ends on a lost lease, and shows the devices empty without rewriting what readers see.

A real controller and a real store (SQLite in a temporary folder) on the simulator's runtime."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from quanta import service
from quanta.controller import Controller, ControllerOptions
from quanta.db.lease import LeaseHeld
from quanta.db.store import Store
from quanta.executor.policy import make_policy
from quanta.service import ControllerLoop
from quanta.sim.runtime import JobSpec, SimRuntime


def _controller(tmp_path: Path) -> tuple[Controller, SimRuntime, Store]:
    store = Store(f"sqlite:///{tmp_path / 'quanta.db'}")
    rt = SimRuntime(1, 2, max_per_device=1)
    return Controller(store, rt, ControllerOptions(policy=make_policy("fifo"), quantum_s=60.0)), rt, store


def _count_ticks(store: Store) -> list[float]:
    """The times of the loop's ticks, seen as the store's first query of each tick."""
    ticks: list[float] = []
    original = store.searches_needing_controller

    def counted():  # noqa: ANN202
        ticks.append(time.monotonic())
        return original()

    store.searches_needing_controller = counted  # type: ignore[method-assign]
    return ticks


def test_an_idle_loop_rests_between_ticks_instead_of_spinning(tmp_path: Path) -> None:
    ctl, _, store = _controller(tmp_path)
    ticks = _count_ticks(store)
    stop = threading.Event()
    loop = ControllerLoop(ctl, store, tmp_path, tick_s=0.2, stop=stop)
    thread = threading.Thread(target=loop.run)
    thread.start()
    time.sleep(1.0)
    stop.set()
    thread.join(5.0)
    assert not thread.is_alive()
    assert ctl.idle()
    # About one tick per 0.2 s (a few more on a slow machine); spinning made thousands.
    assert 1 <= len(ticks) <= 12, len(ticks)


def test_a_busy_loop_never_rests_and_a_new_search_is_picked_up_within_a_tick(tmp_path: Path) -> None:
    """While a trial is alive the loop steps again as soon as `step` returns (on the simulator's clock
    a step takes no wall time), so it finishes in far less wall time than one tick per step."""
    ctl, rt, store = _controller(tmp_path)
    tid = ctl.add_job("toy", 1000, 1)
    rt.register(tid, JobSpec("toy", 1000, 1, rate=100.0))
    steps = 0

    def count() -> None:
        nonlocal steps
        steps += 1

    tick_s = 1.0
    began = time.monotonic()
    ControllerLoop(ctl, store, tmp_path, tick_s=tick_s).run(until=lambda: not ctl.has_alive(), on_step=count)
    assert ctl.trial(tid).status == "completed"
    assert steps >= 10  # 10 virtual seconds of work, ticked at most every tick_s
    assert time.monotonic() - began < 0.25 * steps * tick_s

    # Idle again: a search queued meanwhile (as the API queues it) starts at the next tick.
    ticks = _count_ticks(store)
    stop = threading.Event()
    thread = threading.Thread(target=ControllerLoop(ctl, store, tmp_path, tick_s=0.3, stop=stop).run)
    thread.start()
    try:
        time.sleep(0.5)
        from quanta.spec import parse_spec

        spec = parse_spec(
            {
                "name": "late",
                "trainable": "tests.trainables:linear",
                "space": {"lr": {"uniform": [0.001, 0.1]}},
                "metric": {"name": "loss", "goal": "minimize"},
                "budget": {"max_trials": 1, "max_steps": 10},
                "config": {"rate": 100.0},  # what the simulator's runtime runs it at
            }
        )
        row = store.create_search(spec.name, spec.model_dump(mode="json"), time.time())
        queued_at = time.monotonic()
        deadline = queued_at + 5
        while store.search(row.id).status == "queued" and time.monotonic() < deadline:  # type: ignore[union-attr]
            time.sleep(0.02)
        # Picked up: running, or already done (10 steps on the simulator's clock take no wall time).
        assert store.search(row.id).status in ("running", "completed")  # type: ignore[union-attr]
        assert time.monotonic() - queued_at < 0.3 + 1.5  # one tick, and a margin for a loaded machine
        assert len(ticks) >= 2
    finally:
        stop.set()
        thread.join(5.0)


def test_an_idle_loop_starts_a_search_its_own_store_creates_at_once_and_stops_within_its_rest(
    tmp_path: Path,
) -> None:
    """A search created through the loop's own store (the API of `quanta serve` shares it) ends the idle
    rest at once: with a 30 s tick it is running within a fraction of a second, not at the next tick. A
    stop set during a rest ends the loop without waiting for the tick either."""
    from quanta.spec import parse_spec

    ctl, _, store = _controller(tmp_path)
    stop = threading.Event()
    thread = threading.Thread(target=ControllerLoop(ctl, store, tmp_path, tick_s=30.0, stop=stop).run)
    thread.start()
    try:
        time.sleep(0.3)  # resting now: the first tick found nothing to do
        spec = parse_spec(
            {
                "name": "posted",
                "trainable": "tests.trainables:linear",
                "space": {"lr": {"uniform": [0.001, 0.1]}},
                "metric": {"name": "loss", "goal": "minimize"},
                "budget": {"max_trials": 1, "max_steps": 10},
                "config": {"rate": 100.0},  # what the simulator's runtime runs it at
            }
        )
        queued_at = time.monotonic()
        row = store.create_search(spec.name, spec.model_dump(mode="json"), time.time())
        while store.search(row.id).status == "queued" and time.monotonic() - queued_at < 10:  # type: ignore[union-attr]
            time.sleep(0.01)
        took = time.monotonic() - queued_at
        assert store.search(row.id).status in ("running", "completed")  # type: ignore[union-attr]
        assert took < 3.0, f"picked up after {took:.1f} s: the loop waited for its tick"  # 30 s otherwise
        while not ctl.idle() and time.monotonic() - queued_at < 10:
            time.sleep(0.01)
        time.sleep(0.2)  # resting again
    finally:
        stopped_at = time.monotonic()
        stop.set()
        thread.join(5.0)
    assert not thread.is_alive() and time.monotonic() - stopped_at < 2.0


def test_a_failing_round_is_retried_by_a_service_and_ends_quanta_run(tmp_path: Path, monkeypatch) -> None:
    ctl, _, store = _controller(tmp_path)
    failures = iter([RuntimeError("database away")])

    def pending() -> list[int]:
        err = next(failures, None)
        if err is not None:
            raise err
        return []

    monkeypatch.setattr(store, "pending_deletes", pending)
    monkeypatch.setattr(service, "RETRY_S", 0.05)
    rounds = 0

    def count() -> None:
        nonlocal rounds
        rounds += 1

    ControllerLoop(ctl, store, tmp_path, tick_s=0.01).run(until=lambda: rounds >= 2, on_step=count)
    assert rounds == 2  # the failed round was logged and the loop went on

    failures = iter([RuntimeError("database away")])
    with pytest.raises(RuntimeError, match="database away"):
        ControllerLoop(ctl, store, tmp_path, tick_s=0.01, retry_failed_ticks=False).run()


def test_a_lost_lease_ends_the_loop_even_when_it_retries_failed_rounds(tmp_path: Path, monkeypatch) -> None:
    ctl, _, store = _controller(tmp_path)

    class Lost:
        checks = 0

        def ensure(self) -> None:
            self.checks += 1
            if self.checks == 1:
                raise OSError("database away")  # a lease that cannot be checked now is checked again later
            raise LeaseHeld("another controller runs on database x")

    monkeypatch.setattr(service, "LEASE_CHECK_S", 0.0)
    lease = Lost()
    with pytest.raises(LeaseHeld):
        ControllerLoop(ctl, store, tmp_path, tick_s=0.01, lease=lease).run()  # type: ignore[arg-type]
    assert lease.checks == 2


def test_an_idle_loop_shows_the_devices_empty_once(tmp_path: Path, monkeypatch) -> None:
    ctl, rt, store = _controller(tmp_path)
    writes = []
    original = store.publish_cluster_view
    monkeypatch.setattr(store, "publish_cluster_view", lambda view: (writes.append(view), original(view)))
    monkeypatch.setattr(service, "SHOW_IDLE_S", 0.0)
    loop = ControllerLoop(ctl, store, tmp_path, tick_s=0.01)
    for _ in range(5):
        loop.show_idle()
    assert len(writes) == 1  # what readers see already shows the devices empty: not written again
    view = store.cluster_view()
    assert view is not None and [d.id for d in view.devices] == [d.id for d in rt.devices()]
    assert all(not d.running and not d.parked for d in view.devices)
