"""The placement board's incremental free-device bookkeeping, and the snapshot hints that let a round
on a large cluster skip its O(queue) work: both must answer exactly what the plain definitions do."""

from __future__ import annotations

import random

import pytest

from quanta.controller import Controller, ControllerOptions
from quanta.db.memory import MemoryStore
from quanta.executor.policy import make_policy
from quanta.executor.policy.placement.board import Board
from quanta.executor.policy.types import ClusterSnapshot, DeviceView, TrialStatus, TrialView
from quanta.sim.runtime import JobSpec, SimRuntime


def cluster(nodes: int, per: int) -> tuple[DeviceView, ...]:
    return tuple(DeviceView(f"n{n}/d{d}", f"n{n}") for n in range(nodes) for d in range(per))


def naive_choose(slots: dict[str, list[int]], node_of: dict[str, str], trial: TrialView) -> tuple[str, ...] | None:
    """The board's choice written out the slow way (the definition it must keep)."""
    free = [d for d, ids in slots.items() if not ids]
    k = trial.devices_needed
    if trial.devices and len(trial.devices) == k and all(d in free for d in trial.devices):
        return tuple(sorted(trial.devices))
    if len(free) < k:
        return None
    by_node: dict[str, list[str]] = {}
    for d in free:
        by_node.setdefault(node_of[d], []).append(d)
    home = {node_of[d] for d in trial.devices}
    fitting = [n for n, ds in by_node.items() if len(ds) >= k]
    if fitting:
        best = min(fitting, key=lambda n: (n not in home, len(by_node[n]), n))
        return tuple(sorted(by_node[best])[:k])
    return tuple(free[:k])


@pytest.mark.parametrize("seed", range(20))
def test_board_choice_matches_the_plain_definition_while_it_fills(seed):
    rng = random.Random(seed)
    devices = cluster(rng.randint(1, 6), rng.choice([1, 2, 4, 8]))
    snap = ClusterSnapshot(now=0.0, devices=devices, trials=())
    board = Board(snap)
    node_of = {d.id: d.node for d in devices}
    for tid in range(40):
        k = rng.choice([1, 1, 1, 2, 4, 8])
        resident = tuple(rng.sample([d.id for d in devices], min(k, len(devices)))) if rng.random() < 0.4 else ()
        t = TrialView(id=tid, devices_needed=k, devices=resident)
        want = naive_choose(board.slots, node_of, t)
        assert board.choose(t) == want
        assert board.free() == [d for d, ids in board.slots.items() if not ids]
        assert board.n_free == len(board.free())
        assert board.free_by_node() == {
            n: [d for d in board.free() if node_of[d] == n]
            for n in dict.fromkeys(node_of.values())
            if any(node_of[d] == n for d in board.free())
        }
        if want is not None:
            board.put(tid, want)
        elif rng.random() < 0.3 and board.free():
            board.put(tid, (rng.choice(board.free()),))  # fragment the cluster


def test_board_fullest_fitting_prefers_the_node_with_fewest_free_devices_that_fit():
    devices = cluster(3, 4)
    board = Board(ClusterSnapshot(now=0.0, devices=devices, trials=()))
    board.put(1, ("n0/d0", "n0/d1", "n0/d2"))  # n0: 1 free
    board.put(2, ("n1/d0", "n1/d1"))  # n1: 2 free, n2: 4 free
    assert board.fullest_fitting(1) == "n0"
    assert board.fullest_fitting(2) == "n1"
    assert board.fullest_fitting(3) == "n2"
    assert board.fullest_fitting(5) is None
    assert board.fullest_fitting(2, skip=["n1"]) == "n2"


def _controller(n_jobs: int) -> tuple[Controller, SimRuntime]:
    rt = SimRuntime(2, 2, max_per_device=1)
    options = ControllerOptions(policy=make_policy("fifo"), quantum_s=60.0, cache_views=True)
    ctl = Controller(MemoryStore(keep_measurements=False), rt, options)
    for i in range(n_jobs):
        tid = ctl.add_job("toy", 1000, 1 + i % 2)
        rt.register(tid, JobSpec("toy", 1000, 1 + i % 2, rate=10.0))
    return ctl, rt


def test_controller_snapshot_hints_describe_its_trials():
    ctl, rt = _controller(9)
    ctl.step(max_wait=5.0)
    snap = ctl.snapshot(rt.now())
    assert snap.in_arrival_order
    plain = ClusterSnapshot(now=snap.now, devices=snap.devices, trials=snap.trials)
    assert snap.alive() == plain.alive()
    assert snap.resident() == plain.resident() == tuple(t for t in plain.alive() if t.devices)
    assert snap.resident()  # something runs, so the check above compared something


def test_a_trial_indexed_out_of_arrival_order_turns_the_hint_off():
    ctl, rt = _controller(3)
    assert ctl.snapshot(rt.now()).in_arrival_order
    late = ctl.alive()[-1]
    early = type(late)(999, 0, 99, {}, {}, -1.0, TrialStatus.QUEUED)  # created before every other trial
    ctl.book.track(None, early)
    snap = ctl.snapshot(rt.now())
    assert not snap.in_arrival_order
    assert snap.alive()[0].id == 999  # the policy's own sort puts it first
