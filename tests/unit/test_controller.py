"""The controller's public surface on the simulator's runtime: options at construction, the launcher it
binds to its runtime, the cluster view it publishes, and what the service uses to delete a search."""

from __future__ import annotations

import dataclasses
import math

import pytest

from quanta.controller import Controller, ControllerOptions
from quanta.db.memory import MemoryStore
from quanta.db.models import ClusterView
from quanta.executor.policy import make_policy
from quanta.sim.runtime import JobSpec, SimRuntime
from quanta.spec import parse_spec
from quanta.status import TRIAL_FINAL, SearchStatus, TrialStatus


def _controller(**options) -> tuple[Controller, SimRuntime, MemoryStore]:
    rt = SimRuntime(1, 2, max_per_device=1)
    store = MemoryStore()
    ctl = Controller(store, rt, ControllerOptions(policy=make_policy("fifo"), quantum_s=60.0, **options))
    return ctl, rt, store


def test_options_are_frozen_and_checked():
    opts = ControllerOptions(workdir="w")  # type: ignore[arg-type]  # a str is accepted and made a Path
    assert opts.workdir.name == "w"
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.poll_cap_s = math.inf  # type: ignore[misc]
    with pytest.raises(ValueError):
        ControllerOptions(poll_cap_s=0)
    with pytest.raises(ValueError):
        ControllerOptions(publish_every_s=-1)


def test_the_controller_binds_its_launcher_to_the_runtime():
    ctl, rt, _ = _controller()
    assert rt.launcher is ctl.launcher
    tid = ctl.add_job("toy", 10, 1, trainable="tests.trainables:linear", config={"steps": 10})
    launch = ctl.launcher.launch(tid)
    assert launch.trial_id == tid and launch.trainable == "tests.trainables:linear" and launch.max_steps == 10
    with pytest.raises(ValueError):  # a simulated job has no trainable to run for real
        ctl.launcher.launch(ctl.add_job("sim", 10, 1))


def test_each_planning_tick_publishes_the_cluster_view_unless_told_otherwise():
    ctl, rt, store = _controller()
    tid = ctl.add_job("toy", 1000, 1)
    rt.register(tid, JobSpec("toy", 1000, 1, rate=10.0))
    ctl.step(max_wait=5.0)
    view = store.cluster_view()
    assert isinstance(view, ClusterView)
    assert [d.id for d in view.devices] == [d.id for d in rt.devices()]
    assert [tid] in [list(d.running) for d in view.devices]
    assert (view.round_no, ctl.round_no) == (0, 1)  # published with the plan, before its round is recorded

    quiet, rt2, store2 = _controller(publish_every_s=math.inf)  # published at the first plan only
    rt2.register(quiet.add_job("toy", 1000, 1), JobSpec("toy", 1000, 1, rate=10.0))
    quiet.step(max_wait=5.0)
    first = store2.cluster_view()
    rt2.register(quiet.add_job("toy", 1000, 1), JobSpec("toy", 1000, 1, rate=10.0))
    quiet.step()
    assert quiet.round_no == 2 and store2.cluster_view() is first


def test_forget_search_drops_the_search_and_its_trials():
    rt = SimRuntime(1, 2, max_per_device=1)
    ctl = Controller(MemoryStore(), rt)
    spec = parse_spec(
        {
            "name": "s",
            "trainable": "tests.trainables:linear",
            "space": {"lr": {"choice": [0.1, 0.2]}},
            "metric": {"name": "loss", "goal": "minimize", "target": 0.0},
            "budget": {"max_trials": 2, "max_steps": 10},
            "parallelism": 2,
        }
    )
    sid = ctl.submit(spec)
    ctl.book.sync(rt.now())  # creates its trials
    trials = ctl.trials_of(sid)
    assert len(trials) == 2 and ctl.search(sid) is not None and ctl.has_alive()
    ctl.stop_search(sid)
    assert not ctl.has_alive() and all(t.status.final for t in trials)
    ctl.forget_search(sid)
    assert ctl.search(sid) is None and ctl.trials_of(sid) == [] and ctl.searches() == []
    with pytest.raises(KeyError):
        ctl.trial(trials[0].id)


SPEC = {
    "name": "ok",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"uniform": [0.001, 0.1]}},
    "metric": {"name": "loss", "goal": "minimize"},
    "budget": {"max_trials": 4, "max_steps": 100},
    "parallelism": 2,
}


def _broken_searcher(monkeypatch):
    """Searches seeded 13 (the ones named 'bad' below) cannot build their searcher (as a space HyperOpt
    refuses would)."""
    import quanta.controller.book as book

    real = book.make_searcher

    def make(space, seed, search, **kw):
        if seed == BAD_SEED:
            raise RuntimeError("the searcher refuses this space")
        return real(space, seed, search, **kw)

    monkeypatch.setattr(book, "make_searcher", make)


BAD_SEED = 13


def test_a_search_that_cannot_start_fails_alone(monkeypatch):
    _broken_searcher(monkeypatch)
    ctl, rt, store = _controller()
    bad = store.create_search("bad", parse_spec({**SPEC, "name": "bad", "seed": BAD_SEED}).model_dump(mode="json"), 0.0)
    good = store.create_search("ok", parse_spec(SPEC).model_dump(mode="json"), 0.0)
    ctl.book.sync(0.0)  # what a tick does first (the simulated runtime could not run these trials)
    rows = {r.id: r for r in store.searches()}
    assert rows[bad.id].status == "failed" and "refuses this space" in (rows[bad.id].error or "")
    assert rows[good.id].status == "running" and len(ctl.trials_of(good.id)) == 2
    assert ctl.search(bad.id) is None


def test_a_search_that_cannot_be_loaded_after_a_restart_fails_alone(monkeypatch):
    ctl, rt, store = _controller()
    bad = ctl.submit(parse_spec({**SPEC, "name": "bad", "seed": BAD_SEED}))
    good = ctl.submit(parse_spec(SPEC))
    ctl.book.sync(0.0)
    _broken_searcher(monkeypatch)
    again = Controller(store, SimRuntime(1, 2, max_per_device=1), ControllerOptions(policy=make_policy("fifo")))
    again.load()  # does not raise
    rows = {r.id: r for r in store.searches()}
    assert rows[bad].status == "failed" and "cannot be loaded" in (rows[bad].error or "")
    assert again.search(good) is not None and again.search(bad) is None


# ---- say what happened: stopped versus killed ----------------------------------------------------------


class _KillsFirst:
    """A pure policy that judges the search's first trial hopeless (with a verdict) and runs nothing."""

    name = "kills-first"
    judge_knobs = None

    def plan(self, snapshot):
        from quanta.executor.policy.types import Plan

        first = min(t.id for t in snapshot.alive())
        return Plan(stop=(first,), reasons={first: "P(reach target) 0.010 < kill threshold 0.05"})


def test_a_trial_the_policy_judged_is_killed_with_its_verdict_and_the_rest_are_stopped():
    rt = SimRuntime(1, 2, max_per_device=1)
    store = MemoryStore()
    ctl = Controller(store, rt, ControllerOptions(policy=_KillsFirst(), quantum_s=60.0))
    sid = ctl.submit(parse_spec(SPEC))
    ctl.tick()  # creates two trials; the policy kills the first
    first = min(ctl.trials_of(sid), key=lambda t: t.number)
    assert store.trial(first.id).status == "killed"
    assert store.trial(first.id).reason == "P(reach target) 0.010 < kill threshold 0.05"
    # The search ends (as when its target is reached): its other trials were judged by nobody.
    ctl.stop_search(sid, SearchStatus.COMPLETED, "target reached")
    rows = {t.id: t for t in store.trials(sid)}
    alive_then = [t for t in rows.values() if t.id != first.id]
    assert alive_then and all(t.status == "stopped" and t.reason == "target reached" for t in alive_then)
    assert rows[first.id].status == "killed"  # ending the search does not rewrite a verdict
    assert TrialStatus.STOPPED.final and TrialStatus.STOPPED in TRIAL_FINAL


def test_a_solo_profile_measures_the_trial_s_rate_on_its_device_kind():
    rt = SimRuntime(2, 1, kinds=["v100", "k80"], max_per_device=1, profile_after_s=5.0)
    ctl = Controller(MemoryStore(), rt, ControllerOptions(policy=make_policy("fifo"), quantum_s=60.0))
    tid = ctl.add_job("toy", 100_000, 1, kind_rates={"k80": 2.0})  # known beforehand, on the k80 only
    rt.register(tid, JobSpec("toy", 100_000, 1, rate=10.0))
    for _ in range(3):
        ctl.step(max_wait=20.0)
    # No preference yet (a kind without a figure counts as the known mean): the first node, a v100.
    assert rt.residency()[tid].devices == ("s000/g0",)
    rates = ctl.trial(tid).kind_rates
    assert rates["v100"] == pytest.approx(10.0) and rates["k80"] == 2.0  # measured where it ran; the other as given
    with pytest.raises(ValueError, match="kind_rates: the rate on k80 must be a finite number >= 0"):
        ctl.add_job("toy", 10, 1, kind_rates={"k80": -1.0})


def test_a_replayed_report_is_stored_once_even_when_its_original_was_stored_after_the_replay_began():
    """A restarted trial process re-sends its spool (replay) while reports of the process before it are
    still being read: the original of a report may be stored after the replay's first report made the
    recorder read what was stored. Its replay must still be recognised (this lost a distributed fault
    test once: 'a report was stored twice')."""
    from quanta.executor.actions import reported

    ctl, _, store = _controller()
    tid = ctl.add_job("toy", 100, 1)
    ctl.recorder.handle([reported(tid, 5, {"acc": 0.1}, 0.5, replay=True)])  # the replay begins
    ctl.recorder.handle([reported(tid, 10, {"acc": 0.2}, 1.0)])  # the old process's next report, stored
    ctl.recorder.handle([reported(tid, 10, {"acc": 0.2}, 1.0, replay=True)])  # ... and its replay
    ctl.recorder.handle([reported(tid, 5, {"acc": 0.1}, 0.5, replay=True)])  # a replay seen twice
    assert sorted((r.step, r.at) for r in store.reports(tid)) == [(5, 0.5), (10, 1.0)]
