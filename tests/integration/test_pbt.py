"""Population-based training on real trial processes (a controller, LocalRuntime, `mutable_sgd`): a trial
in the bottom of its interval takes a top trial's state through the fork machinery, its reports go on
from the source's step with the explored learning rate, and the lineage records it.

Exploits outlive the controller: one cut short while its source's state was being staged is abandoned
(the trial resumes from its own checkpoint, computing exactly as before), one staged whole is completed
after the restart (renamed into place, or only stored when the rename was done), and a PBT search whose
controller restarts goes on with the same population, its exploits and the intervals it judged."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from sqlmodel import select

from quanta.controller import Controller, ControllerOptions
from quanta.db.launch import checkpoint_path
from quanta.db.models import IntentRow
from quanta.db.store import Store
from quanta.devices import parse_devices
from quanta.executor.runtime.local import LocalRuntime
from quanta.sdk.checkpoint import load as load_checkpoint
from quanta.spec import parse_spec
from tests.integration.test_fork import start, step_until

STEPS, INTERVAL = 40, 10


def pbt_spec(
    name: str, population: int, seed: int, lr_max: float, sleep_s: float, steps: int = STEPS, **scheduler
) -> dict:
    """A PBT search of `population` `mutable_sgd` trials run to their budget of `steps` (the target is
    never reached), with `scheduler` knobs beside the population's."""
    return {
        "name": name,
        "trainable": "tests.trainables:mutable_sgd",
        "space": {"lr": {"loguniform": [0.001, lr_max], "mutable": True}},
        "metric": {"name": "loss", "goal": "minimize", "target": -1.0},  # never reached: trials run their budget
        "budget": {"max_trials": population, "max_steps": steps},
        "search": {"algorithm": "random"},
        "seed": seed,
        "scheduler": {
            "policy": "pbt",
            "population": population,
            "interval_steps": INTERVAL,
            "quantile": 0.5,
            "resample_p": 0.0,
            **scheduler,
        },
        "config": {"sleep_s": sleep_s},
    }


def run_to_end(tmp_path: Path, spec: dict, *, tick_after: bool = False) -> tuple[Store, int]:
    """Run `spec` on two CPU devices until it completes; `tick_after`: one tick more once its trials ended."""
    store, _rt, ctl = start(tmp_path)
    try:
        sid = ctl.submit(parse_spec(spec))
        step_until(ctl, lambda: store.search(sid).status == "completed", timeout=90)
        ctl.settle()
        if tick_after:
            ctl.step(max_wait=0.05)
    finally:
        ctl.close()
    return store, sid


def first_reports(store: Store, sid: int) -> dict[int, float | None]:
    """When each trial of search `sid` first reported (for a failure's message: read only then)."""
    return {t.id: min((r.at for r in store.reports(t.id)), default=None) for t in store.trials(sid)}


def test_a_bottom_trial_exploits_a_top_one_and_goes_on_from_its_state_with_new_values(tmp_path: Path):
    spec = pbt_spec("pbt", population=4, seed=3, lr_max=1.0, sleep_s=0.005, quantum_s=0.5)
    store, sid = run_to_end(tmp_path, spec)
    trials = store.trials(sid)
    assert len(trials) == 4 and all(t.status == "completed" for t in trials)  # the population, no more
    exploits = [c for t in trials for c in store.config_changes(t.id) if c.cause == "exploit"]
    assert exploits, "no exploit happened"
    went_on = 0
    for change in exploits:
        target, source, k = change.trial_id, change.source_id, change.step
        # k is the source's step: at an interval when its state was published there, else wherever it was
        # when chosen (a time-sliced member may be parked in the middle of an interval).
        assert source is not None and source != target and k >= 1
        # A rate the source had, perturbed by 0.8 or 1.2 (kept inside the space).
        had = {r.metrics["config_lr"] for r in store.reports(source)}
        new_lr = change.values["lr"]
        assert any(new_lr == pytest.approx(min(1.0, v * f)) for v in had for f in (0.8, 1.2))
        # Its reports until its next change go on from the source's step (as a fork's: the first is at
        # the step it took over), the optimizer at the new rate.
        after = [c.at for c in store.config_changes(target) if c.at > change.at]
        until = min(after, default=float("inf"))
        mine = sorted((r for r in store.reports(target) if change.at < r.at < until), key=lambda r: r.at)
        if mine:
            went_on += 1
            assert mine[0].step == k and [r.step for r in mine] == list(range(k, k + len(mine)))
            assert all(r.metrics["lr"] == pytest.approx(new_lr) for r in mine)
            assert all(r.metrics["config_lr"] == pytest.approx(new_lr) for r in mine)
    assert went_on
    lineage = store.lineage(sid)
    shown = [c for t in lineage.trials for c in t.changes if c.cause == "exploit"]
    assert len(shown) == len(exploits) and {c.source_id for c in shown} == {c.source_id for c in exploits}


def test_a_published_state_is_taken_at_once_and_the_target_runs_on_from_it_bit_for_bit(tmp_path: Path):
    """Two members on two devices: the top one's state is published at each interval it leads and an
    exploit links it, asking its source for nothing (no `Fork` into the target). With its rate unchanged
    (`perturb: [1.0, 1.0]`) the target computes from there exactly what the source computed from the same
    step, and nothing published or staged outlives the search.

    100 steps (nine judged intervals, 1 s a trial): at 40 (three), one run under a loaded suite published
    nothing. A member judged before the other has reported has no one to rank against, and three intervals
    left little room for both to be ranked; the failure message shows when each member first reported."""
    spec = {
        **pbt_spec("published", population=2, seed=4, lr_max=0.1, sleep_s=0.01, steps=100, perturb=[1.0, 1.0]),
        "parallelism": 2,
    }
    store, sid = run_to_end(
        tmp_path, spec, tick_after=True
    )  # the tick after the trials ended: their published states go
    with store.session() as db:
        intents = [a for row in db.exec(select(IntentRow)).all() for a in row.actions]
    published = [a for a in intents if a.get("kind") == "fork" and a.get("into") == a.get("trial_id")]
    asked = [a for a in intents if a.get("kind") == "fork" and a.get("into") != a.get("trial_id")]
    exploits = [c for t in store.trials(sid) for c in store.config_changes(t.id) if c.cause == "exploit"]
    assert published and exploits, (intents, first_reports(store, sid))
    assert len(asked) < len(exploits), intents  # at least one took a published state, asking nothing
    # The first exploit: its source has run one lineage only until then (its first attempt: nothing was
    # exploited before, nothing restarted), so its reports of that attempt from the exploit's step on are
    # what the state it gave computes.
    first = min(exploits, key=lambda c: c.at)
    src = store.reports(first.source_id)
    theirs = {r.step: r.metrics["loss"] for r in src if r.attempt == min(q.attempt for q in src)}
    mine = sorted((r for r in store.reports(first.trial_id) if r.at > first.at), key=lambda r: r.at)
    same = [r for r in mine if r.step in theirs][:3]
    assert same and mine[0].step == first.step
    assert all(r.metrics["loss"] == theirs[r.step] for r in same)
    assert not list(tmp_path.rglob("*.published*")), "a published state outlived its trial"
    assert not list(tmp_path.rglob("*.exploit")), "a staged state outlived its exploit"


# ---- exploits outlive a restart, and never leave a trial half-replaced -------------------------------

PAIR_STEPS = 60


def pair_spec() -> dict:
    """Two `mutable_sgd` trials side by side, checkpointed often, long enough to be cut short mid-run."""
    return {
        "name": "pair",
        "trainable": "tests.trainables:mutable_sgd",
        "space": {"lr": {"loguniform": [0.001, 0.1], "mutable": True}},
        "metric": {"name": "loss", "goal": "minimize", "target": -1.0},
        "budget": {"max_trials": 2, "max_steps": PAIR_STEPS},
        "parallelism": 2,
        "search": {"algorithm": "random"},
        "seed": 5,
        "scheduler": {"policy": "fifo", "checkpoint_every_s": 0.1},
        # 50 ms a step: 3 s a trial, so that a test's exploit meets both mid-run even when the controller
        # waits for a loaded machine (at 20 ms a step, one ran to its end first under a parallel suite).
        "config": {"sleep_s": 0.05},
    }


def run_pair_then_close(tmp_path: Path) -> tuple[Store, Controller, int, int, int]:
    """Start the pair, run both past step 10 with a checkpoint there, and return (store, controller,
    search, target, source) with the controller still open."""
    store, _rt, ctl = start(tmp_path)
    sid = ctl.submit(parse_spec(pair_spec()))
    step_until(ctl, lambda: len(store.trials(sid)) == 2)
    target, source = (t.id for t in store.trials(sid))
    step_until(ctl, lambda: all((store.trial(t).checkpoint_step or 0) >= 10 for t in (target, source)))
    return store, ctl, sid, target, source


def restart_and_finish(tmp_path: Path, store: Store, sid: int) -> Store:
    """A new controller over the same store and working directory, run until the search completes."""
    store2 = Store(store.url)
    rt2 = LocalRuntime(parse_devices("cpu:2"), warm_modules=["tests.trainables"])
    ctl2 = Controller(store2, rt2, ControllerOptions(workdir=tmp_path))
    try:
        ctl2.load()
        step_until(ctl2, lambda: store2.search(sid).status == "completed", timeout=90)
        ctl2.settle()
    finally:
        ctl2.close()
    return store2


def after_restart(store: Store, trial_id: int, attempt_before: int) -> list:
    """The trial's reports by processes started after the restart, by step."""
    return sorted((r for r in store.reports(trial_id) if r.attempt > attempt_before), key=lambda r: r.step)


def test_an_exploit_cut_short_while_staging_is_abandoned_and_the_trial_resumes_from_its_own_state(tmp_path: Path):
    store, ctl, sid, target, source = run_pair_then_close(tmp_path)
    try:
        # The exploit is stored as staging; the controller dies before its source's state is staged whole:
        # what lies at the staging path is a write cut short.
        ctl.forks.exploit(target, source, {"lr": 0.05})
    finally:
        ctl.close()
    (row,) = store.fork_requests(("exploit-staging",))
    assert (row.child_id, row.parent_id) == (target, source)
    ckpt = checkpoint_path(tmp_path, sid, target)
    stage = Path(f"{ckpt}.exploit")
    stage.write_bytes(ckpt.read_bytes()[:100])
    own = load_checkpoint(ckpt, map_location="cpu")  # its last consistent state, as its checkpoint holds it
    own_lr, own_step = own["config"]["lr"], int(own["step"])
    assert own_lr == store.trial(target).params["lr"]
    before = {r.step: r.metrics for r in store.reports(target)}
    attempt = max(r.attempt for r in store.reports(target))

    store2 = restart_and_finish(tmp_path, store, sid)

    (row,) = store2.fork_requests(("exploit-abandoned",))
    assert row.child_id == target and "restarted" in (row.error or "")
    assert not stage.exists() and not [c for c in store2.config_changes(target) if c.cause == "exploit"]
    mine = after_restart(store2, target, attempt)
    # It goes on from its own checkpoint, with its own rate: the steps it ran again before the restart
    # are computed exactly as then (its own state, not the source's nor a mix).
    assert [r.step for r in mine] == list(range(own_step, PAIR_STEPS))
    assert all(r.metrics["lr"] == own_lr and r.metrics["config_lr"] == own_lr for r in mine)
    # (None ran again when its checkpoint was at its last reported step.)
    assert own_step < PAIR_STEPS and own_step <= max(before) + 1
    assert all(r.metrics["loss"] == before[r.step]["loss"] for r in mine if r.step in before)
    t = store2.trial(target)
    assert (t.status, t.steps, t.params["lr"]) == ("completed", PAIR_STEPS, own_lr)


@pytest.mark.parametrize("renamed", [False, True], ids=["staged", "renamed-not-stored"])
def test_an_exploit_staged_before_a_restart_is_completed_after_it(tmp_path: Path, renamed: bool):
    store, ctl, sid, target, source = run_pair_then_close(tmp_path)
    ctl.close()
    # What a controller leaves when it dies once the source's state is staged whole (and, `renamed`, once
    # it is renamed over the target's checkpoint but before the change is stored): the same rate as the
    # source's, so that the target must compute exactly what the source did from that step on.
    ckpt = checkpoint_path(tmp_path, sid, target)
    stage = Path(f"{ckpt}.exploit")
    shutil.copyfile(checkpoint_path(tmp_path, sid, source), stage)
    # The step and rate the staged state holds (the store's checkpoint step may lag a write the closing
    # controller did not hear of).
    held = load_checkpoint(stage, map_location="cpu")
    k, lr = int(held["step"]), held["config"]["lr"]
    row = store.add_exploit(target, source, {"lr": lr}, time.time())
    store.stage_exploit(row.id, k)
    if renamed:
        os.replace(stage, ckpt)
    attempt = max(r.attempt for r in store.reports(target))

    store2 = restart_and_finish(tmp_path, store, sid)

    # The source's reports over both runs: its process may have written the checkpoint at step k and been
    # closed before reporting step k, so steps from k on may come only from its run after the restart
    # (from that same checkpoint, computed as before).
    theirs = {r.step: r.metrics for r in store2.reports(source)}
    assert store2.fork_requests(("exploited",))[0].id == row.id and not stage.exists()
    (change,) = [c for c in store2.config_changes(target) if c.cause == "exploit"]
    assert (change.step, change.source_id, change.values) == (k, source, {"lr": lr})
    mine = after_restart(store2, target, attempt)
    assert [r.step for r in mine] == list(range(k, PAIR_STEPS))
    same = [r for r in mine if r.step in theirs]
    assert same and all(r.metrics["loss"] == theirs[r.step]["loss"] for r in same)
    lineage = {t.id: t for t in store2.lineage(sid).trials}
    assert [c.cause for c in lineage[target].changes] == ["exploit"]
    assert store2.lineage(sid).forks == []  # an exploit is not a fork request


def judged(state: object) -> dict[str, int]:
    """The PBT policy's `judged` map (trial -> last interval judged), wherever the share layer nests it."""
    if isinstance(state, dict):
        if "judged" in state and "scores" in state:
            return {str(k): int(v) for k, v in state["judged"].items()}
        for v in state.values():
            found = judged(v)
            if found:
                return found
    return {}


def test_a_controller_restarted_in_the_middle_of_a_pbt_search_goes_on(tmp_path: Path):
    steps = 60
    spec = {
        "name": "pbt-restart",
        "trainable": "tests.trainables:mutable_sgd",
        "space": {"lr": {"loguniform": [0.001, 1.0], "mutable": True}},
        "metric": {"name": "loss", "goal": "minimize", "target": -1.0},
        "budget": {"max_trials": 4, "max_steps": steps},
        "search": {"algorithm": "random"},
        "seed": 3,
        "scheduler": {
            "policy": "pbt",
            "population": 4,
            "interval_steps": INTERVAL,
            "quantile": 0.5,
            "resample_p": 0.0,
            "quantum_s": 0.5,
            "checkpoint_every_s": 0.2,
        },
        "config": {"sleep_s": 0.01},
    }
    store, _rt, ctl = start(tmp_path)
    try:
        sid = ctl.submit(parse_spec(spec))

        def exploited() -> list:
            return [c for t in store.trials(sid) for c in store.config_changes(t.id) if c.cause == "exploit"]

        step_until(ctl, lambda: exploited() != [], timeout=90)
    finally:
        ctl.close()
    before = exploited()
    members = {t.id for t in store.trials(sid)}
    was_judged = judged(store.policy_state())
    assert len(members) == 4 and was_judged
    restarted_at = time.time()

    store2 = restart_and_finish(tmp_path, store, sid)

    trials = store2.trials(sid)
    assert {t.id for t in trials} == members and all(t.status == "completed" for t in trials)  # the same population
    after = [c for t in trials for c in store2.config_changes(t.id) if c.cause == "exploit"]
    assert {c.id for c in before} <= {c.id for c in after}  # the exploits before the restart are kept
    assert any(c.at > restarted_at for c in after), "no exploit after the restart: PBT did not go on"
    # The intervals judged before the restart were not judged again: each trial's count only went up.
    now_judged = judged(store2.policy_state())
    assert all(now_judged.get(t, 0) >= j for t, j in was_judged.items())
    lineage = {t.id: t for t in store2.lineage(sid).trials}
    assert sum(1 for t in lineage.values() for c in t.changes if c.cause == "exploit") == len(after)
    assert all(t.parent_id is None for t in lineage.values())  # exploits change members, not the tree of trials
