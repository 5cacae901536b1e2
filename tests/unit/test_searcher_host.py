"""Searchers off the controller's thread (`SearcherHost`, `ControllerOptions.searcher_wait_s`): a search
whose searcher is slow to build and to ask delays its own trials, never another search's, and the tick
waits for it a bounded time; a hosted searcher learns exactly what a searcher on the tick does; one that
cannot be built fails its search alone. Slowness is simulated (a searcher that sleeps): nothing trains."""

from __future__ import annotations

import time

import pytest

import quanta.controller.book as book
from quanta.controller import Controller, ControllerOptions
from quanta.controller.searcher_host import SearcherHost
from quanta.db.memory import MemoryStore
from quanta.executor.policy import make_policy
from quanta.search.factory import make_searcher
from quanta.sim.runtime import JobSpec, SimRuntime
from quanta.spec import parse_spec
from quanta.status import SearchStatus

SPEC = {
    "name": "fast",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"uniform": [0.001, 0.1]}, "width": {"choice": [16, 32, 64]}},
    "metric": {"name": "loss", "goal": "minimize"},
    "budget": {"max_trials": 3, "max_steps": 100},
    "parallelism": 3,
    "search": {"algorithm": "tpe", "n_startup": 2},
}
SLOW_SEED, BROKEN_SEED = 7, 13
BUILD_S, ASK_S = 1.0, 0.2


class _Slow:
    """A searcher as a wide space makes it: slow to ask (its build sleeps in `make`)."""

    def __init__(self, inner):
        self.inner = inner

    def ask(self, number):
        time.sleep(ASK_S)
        return self.inner.ask(number)

    def tell(self, number, loss, ok=True):
        self.inner.tell(number, loss, ok)

    def observe(self, number, step, loss):
        self.inner.observe(number, step, loss)


@pytest.fixture
def slow_searchers(monkeypatch):
    """Searches seeded SLOW_SEED build in BUILD_S and ask in ASK_S; BROKEN_SEED ones cannot be built."""

    def make(space, seed, search, **kw):
        if seed == BROKEN_SEED:
            raise ValueError("the searcher refuses this space")
        searcher = make_searcher(space, seed, search, **kw)
        if seed == SLOW_SEED:
            time.sleep(BUILD_S)
            return _Slow(searcher)
        return searcher

    monkeypatch.setattr(book, "make_searcher", make)


def _controller(wait: float | None) -> tuple[Controller, SimRuntime, MemoryStore]:
    rt = SimRuntime(1, 4, max_per_device=1, workload=lambda launch: JobSpec("toy", launch.max_steps, 1, rate=100.0))
    store = MemoryStore()
    options = ControllerOptions(policy=make_policy("fifo"), quantum_s=60.0, searcher_wait_s=wait)
    return Controller(store, rt, options), rt, store


def _submit(store: MemoryStore, name: str, seed: int = 0) -> int:
    spec = parse_spec({**SPEC, "name": name, "seed": seed})
    row = store.create_search(name, spec.model_dump(mode="json"), 0.0)
    assert row.id is not None
    return row.id


def test_a_slow_searcher_holds_no_other_search_s_scheduling(slow_searchers):
    # On the tick's thread (the simulator's way, and every controller's before): one sync waits for the
    # slow search's build and its asks, and the fast search's trials wait with it.
    ctl, _, store = _controller(None)
    slow, fast = _submit(store, "slow", SLOW_SEED), _submit(store, "fast")
    t0 = time.perf_counter()
    ctl.book.sync(0.0)
    assert time.perf_counter() - t0 >= BUILD_S + 3 * ASK_S
    assert len(ctl.trials_of(fast)) == 3

    # Hosted: the sync returns within the bounded wait (per search) and the fast search's trials are made.
    ctl, _, store = _controller(0.05)
    slow, fast = _submit(store, "slow", SLOW_SEED), _submit(store, "fast")
    t0 = time.perf_counter()
    ctl.book.sync(0.0)
    held = time.perf_counter() - t0
    assert held < 0.5 * BUILD_S, f"the tick waited {held:.2f} s for a slow searcher"
    assert len(ctl.trials_of(fast)) == 3 and ctl.trials_of(slow) == []
    # The slow search's trials come at later ticks, numbered in order, once its searcher has answered.
    deadline = time.monotonic() + 30
    while len(ctl.trials_of(slow)) < 3:
        assert time.monotonic() < deadline, "the slow search never got its trials"
        time.sleep(0.1)
        ctl.book.sync(0.0)
    assert sorted(t.number for t in ctl.trials_of(slow)) == [0, 1, 2]
    assert ctl.search(slow).status == SearchStatus.RUNNING
    ctl.stop_search(slow)
    ctl.stop_search(fast)


def test_a_hosted_searcher_learns_what_a_searcher_on_the_tick_learns():
    """The same calls give the same suggestions and history on the host's thread as inline."""
    spec = parse_spec(SPEC)

    def build():
        return make_searcher(spec.space, spec.seed, spec.search, rungs=spec.searcher_rungs())

    inline, host = build(), SearcherHost(build, "test-searcher")
    try:
        for n in range(5):
            host.request(host.next_number(n))
            host.wait(10)
            [(number, got)] = host.ready(1)
            assert number == n and got == inline.ask(n)
            for searcher in (inline, host):
                searcher.observe(n, 10, 1.0 / (n + 1))
                searcher.tell(n, 0.5 / (n + 1))
        assert host.call(lambda s: s.history(), timeout=10) == inline.history()
        assert host.ask(5) == inline.ask(5)  # the protocol's ask, waited for
    finally:
        host.close()
    host.tell(6, 0.1)  # after close: dropped, no error


def test_a_hosted_searcher_that_cannot_be_built_fails_its_search_alone(slow_searchers):
    ctl, _, store = _controller(0.05)
    bad, good = _submit(store, "bad", BROKEN_SEED), _submit(store, "good")
    deadline = time.monotonic() + 10
    while store.search(bad).status != SearchStatus.FAILED:
        assert time.monotonic() < deadline, "the broken search did not fail"
        ctl.book.sync(0.0)
        time.sleep(0.05)
    assert "refuses this space" in (store.search(bad).error or "")
    assert store.search(good).status == SearchStatus.RUNNING and len(ctl.trials_of(good)) == 3


def test_a_hosted_search_runs_to_its_end_on_the_simulator():
    """A whole search through the controller's own loop with hosted searchers: every trial asked once."""
    ctl, rt, store = _controller(0.05)
    spec = parse_spec({**SPEC, "budget": {"max_trials": 6, "max_steps": 50}, "parallelism": 2})
    sid = ctl.submit(spec)
    deadline = time.monotonic() + 60
    state = ctl.search(sid)
    while state.status == SearchStatus.RUNNING:
        assert time.monotonic() < deadline, "the search did not end"
        ctl.step(max_wait=1.0)
    assert state.status == SearchStatus.COMPLETED
    assert sorted(t.number for t in ctl.trials_of(sid)) == list(range(6))
