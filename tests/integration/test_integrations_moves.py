"""Moving a Lightning or Hugging Face trial to another device (app/integrations/, `Trial._move_state`):
the module and optimizer move with the trial, and so does what the library keeps about the device
(where batches go, running tensors, the fp16 scaler). On CPU every move between two CPU devices runs
that same code (the tensors stay put), and a trial moved at every boundary reports exactly what an
unmoved one does; a move to torch's `meta` device (a real second device on a CPU-only machine) shows
that everything the library would touch next went along. The CUDA versions are in test_cuda.py."""

from __future__ import annotations

import pytest
import torch

from quanta.devices import cpu_devices
from quanta.integrations.moves import move_scaler
from quanta.sdk import Trial
from tests.integration.driver import Driver, hf_train, lightning_train

STEPS = 8
META = torch.device("meta")


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


CASES = {
    "lightning": ({"accumulate": 2, "eval_every": 4}, "accuracy"),
    "hf": ({"accumulate": 2, "eval_every": 2}, "eval_accuracy"),
}


def run(name: str, config: dict, trial: Trial, tmp_path):
    if name == "lightning":
        return lightning_train(config, trial)
    return hf_train(config, trial, tmp_path / "hf")


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_trial_moved_between_devices_reports_what_an_unmoved_one_does(name, tmp_path, one_thread):
    config, metric = CASES[name]
    reference = Trial.standalone(config, max_steps=STEPS, metric=metric)
    run(name, config, reference, tmp_path)

    driver = Driver(cpu_devices(2))  # parked often; cpu:0, cpu:1, cpu:0, ...: a move at every resume
    try:
        trial = driver.trial(config, STEPS, tmp_path / "ckpt.pt", metric)
        run(name, config, trial, tmp_path)
    finally:
        driver.close()
    assert driver.moves >= 2, driver.parks
    assert driver.reports == reference.history  # bit for bit


def _on(device: torch.device, tensors) -> list[str]:
    """The devices of `tensors` that are not `device` (empty: all moved)."""
    return [str(t.device) for t in tensors if t.device != device]


def _optimizer_tensors(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    # Adam's scalar `step` stays on the CPU by design (Trial's `_move`).
    return [
        v for s in opt.state.values() for k, v in s.items() if torch.is_tensor(v) and not (k == "step" and v.dim() == 0)
    ]


def test_lightning_state_follows_a_move(tmp_path, one_thread):
    """After a fit, a move of the trial's state to `meta` takes the module, the optimizer state, the
    strategy's root device (where batches go) and the loops' running metric sums along."""
    trial = Trial.standalone({}, max_steps=4, metric="accuracy")
    trainer = lightning_train({"eval_every": 2}, trial)
    results = [trainer.fit_loop.epoch_loop._results, trainer.fit_loop.epoch_loop.val_loop._results]
    logged = [t for r in results for m in r.values() for t in vars(m).values() if torch.is_tensor(t)]
    assert logged, "the loops keep the logged metrics' running sums"
    trial._move_state(META)  # the one path of every park, resume and migration
    assert _on(META, trainer.lightning_module.parameters()) == []
    opt = _optimizer_tensors(trainer.optimizers[0])
    assert opt and _on(META, opt) == []
    assert trainer.strategy.root_device == META
    assert _on(META, [t for r in results for m in r.values() for t in vars(m).values() if torch.is_tensor(t)]) == []


def test_trainer_state_follows_a_move(tmp_path, one_thread):
    """After `train()`, a move of the trial's state to `meta` takes the model, the optimizer state, the
    arguments' device (where `_prepare_inputs` sends batches), accelerate's device, the train loader's
    device and the running training loss along."""
    from accelerate.state import AcceleratorState

    trial = Trial.standalone({}, max_steps=4, metric="eval_accuracy")
    trainer = hf_train({"eval_every": 2}, trial, tmp_path / "hf")
    try:
        trial._move_state(META)
        assert _on(META, trainer.model.parameters()) == []
        opt = _optimizer_tensors(trainer.optimizer)
        assert opt and _on(META, opt) == []
        assert trainer.args.device == META and trainer.accelerator.device == META
        assert torch.is_tensor(trainer._tr_loss) and trainer._tr_loss.device == META
        loader = trainer.callback_handler.train_dataloader
        assert getattr(loader, "device", META) == META
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)  # process-wide: the next Trainer starts clean


def test_the_gradient_scaler_moves():
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(torch.ones(()))  # creates its scale on the loss's device
    assert scaler._scale is not None and scaler._scale.device.type == "cpu"
    move_scaler(scaler, META)
    assert scaler._scale.device == META and scaler._growth_tracker.device == META
    move_scaler(None, META)  # no scaler (full precision): nothing to move
