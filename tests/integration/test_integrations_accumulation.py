"""Gradient accumulation through the integrations (Lightning's `accumulate_grad_batches=2`, the
Trainer's `gradient_accumulation_steps=2`), with the real libraries and tiny models in this process:
the trial's boundaries (where Quanta parks, moves, checkpoints) are the optimizer steps, each once,
never a micro-batch inside a step; a trial parked at many of them, and one released at its step limit
and restarted from its checkpoint, report exactly what an uninterrupted run reports.

An epoch here is 7 batches, so every fourth step of an accumulating run is a short one (one batch)."""

from __future__ import annotations

import pytest

from quanta.devices import cpu_devices
from quanta.sdk import Trial
from quanta.sdk.trial import TrialReleased
from tests.integration.driver import Driver, hf_train, lightning_train, restored

STEPS = 12


@pytest.fixture
def one_thread():
    """One torch thread, for the reference and the driven runs alike (the same arithmetic)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def run(name: str, config: dict, trial: Trial, tmp_path) -> None:
    if name == "lightning":
        lightning_train(config, trial)
    else:
        hf_train(config, trial, tmp_path / "hf")


# name: (config, metric, the steps at its boundaries, {step limit: the step it parks at}). Lightning's
# boundary is at the end of a step's last batch (global step 1..STEPS), after the validation that
# follows it if any; the Trainer's at the start of a step, before its first micro-batch (global step
# 0..STEPS-1). Lightning validates every 3 batches, so every other validation falls between the two
# batches of a step (after batch 3: step 1 is done, step 2 half): the trial parks at the end of that
# step, not after the validation (a checkpoint there would lose batch 3's gradients).
CASES = {
    "lightning": ({"accumulate": 2, "eval_every": 3}, "accuracy", list(range(1, STEPS + 1)), {1: 2, 5: 5, 6: 7}),
    "hf": ({"accumulate": 2, "eval_every": 2}, "eval_accuracy", list(range(STEPS)), {3: 4, 6: 6}),
}
LIMITS = [(name, until) for name, case in sorted(CASES.items()) for until in case[3]]


@pytest.mark.parametrize("name", sorted(CASES))
def test_boundaries_are_optimizer_steps_and_parking_changes_nothing(name, tmp_path, one_thread):
    config, metric, boundaries, _ = CASES[name]
    reference = Trial.standalone(config, max_steps=STEPS, metric=metric)
    run(name, config, reference, tmp_path)
    assert reference.step == STEPS and len(reference.history) >= 4
    assert all(0.0 <= m[metric] <= 1.0 for _, m in reference.history)

    driver = Driver(cpu_devices(1)[:1])
    try:
        trial = driver.trial(config, STEPS, tmp_path / "ckpt.pt", metric)
        run(name, config, trial, tmp_path)
    finally:
        driver.close()
    # One boundary per optimizer step, none between the two batches of a step (one would repeat a step
    # number: the global step moves once per two batches).
    assert driver.boundaries == boundaries
    assert len(driver.parks) >= 2 and driver.parks[0] == boundaries[0]
    assert set(driver.parks) <= set(boundaries)
    assert driver.reports == reference.history  # bit for bit


@pytest.mark.parametrize(("name", "until"), LIMITS)
def test_restarted_at_its_step_limit_reports_what_an_uninterrupted_run_does(name, until, tmp_path, one_thread):
    """Parked at its step limit (as successive halving parks trials), released (checkpoint, end), then
    restarted from the checkpoint in a new Trial: its reports before and after are the uninterrupted
    run's. A boundary between the two batches of a step would lose the first one's gradients."""
    config, metric, _, parks_at = CASES[name]
    config = {**config, "epoch_mean": False}  # a logged epoch mean starts afresh in a restarted process
    reference = Trial.standalone(config, max_steps=STEPS, metric=metric)
    run(name, config, reference, tmp_path)

    ckpt = tmp_path / "ckpt.pt"
    driver = Driver(cpu_devices(1)[:1], park_often=False, release_at_limit=True)
    try:
        first = driver.trial(config, STEPS, ckpt, metric, until=until)
        with pytest.raises(TrialReleased):
            run(name, config, first, tmp_path)
    finally:
        driver.close()
    at = parks_at[until]
    assert driver.parks == [at] and first.step == at and ckpt.exists()

    second = restored(config, STEPS, ckpt, metric, cpu_devices(1)[0])
    run(name, config, second, tmp_path)
    assert second.restored_step == at and second.step == STEPS
    # The restored trial's history holds the first process's reports (from the checkpoint), then its own.
    assert driver.reports == [r for r in reference.history if r[0] <= at]
    assert second.history == reference.history
