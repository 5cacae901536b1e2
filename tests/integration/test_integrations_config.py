"""A change of a mutable learning rate reaches the optimizers and LR schedulers the Lightning and Hugging
Face callbacks track (app/integrations/), with the real libraries and tiny models on CPU: changed at a
boundary (`Trial._change_config`, what a `Reconfigure` or a population's exploit does in the trial's
process), the optimizer's parameter groups hold the new rate and the scheduler's base rates follow, so
the schedule goes on from the new rate (its shape kept) instead of putting the old one back at its next
step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from quanta.devices import cpu_devices
from quanta.sdk import Trial

CHANGE_AT, STEPS = 5, 12


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def decay(step: int) -> float:
    """The schedule's factor at `step` (a LambdaLR: the rate is base * decay(step))."""
    return 1.0 / (1.0 + 0.1 * step)


def _tiny_lightning():
    """(module class, watcher callback class) of a tiny Lightning fit: SGD with momentum under a LambdaLR
    stepped every step; the watcher records (global step, lr, momentum, the scheduler's base rates) at
    each batch end and calls `change(trainer)` there (a boundary, where a Reconfigure is taken)."""
    import lightning.pytorch as pl

    class Tiny(pl.LightningModule):
        def __init__(self, lr: float):
            super().__init__()
            self.lr = lr
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("loss", torch.nn.functional.mse_loss(self.net(x), y))

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, decay)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    class Watch(pl.Callback):
        def __init__(self, change=None):
            self.seen: list[tuple[int, float, float, list[float]]] = []
            self.change = change

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            opt, sched = trainer.optimizers[0], trainer.lr_scheduler_configs[0].scheduler
            g = opt.param_groups[0]
            self.seen.append((trainer.global_step, g["lr"], g["momentum"], list(sched.base_lrs)))
            if self.change is not None:
                self.change(trainer)

    return Tiny, Watch


def _fit(trial: Trial, module, watch, steps: int) -> None:
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    from quanta.integrations.lightning import QuantaCallback

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
    trainer = pl.Trainer(
        max_steps=steps,
        max_epochs=-1,
        val_check_interval=steps,
        check_val_every_n_epoch=None,
        accelerator="cpu",
        devices=1,
        callbacks=[QuantaCallback(trial), watch],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, DataLoader(data, batch_size=16), DataLoader(data, batch_size=64))


def test_a_learning_rate_change_reaches_lightnings_optimizer_and_its_schedulers_base_rates(one_thread):
    Tiny, Watch = _tiny_lightning()
    trial = Trial.standalone({"lr": 0.1, "momentum": 0.9}, max_steps=STEPS, metric="loss")

    def change(trainer) -> None:
        if trainer.global_step == CHANGE_AT:
            assert trial._change_config({"lr": 0.01, "momentum": 0.5}) == {"lr": 0.01, "momentum": 0.5}

    watch = Watch(change)
    _fit(trial, Tiny(0.1), watch, STEPS)
    assert trial.config["lr"] == 0.01 and [s for s, _ in trial.history] == [STEPS]
    # Lightning steps a step-interval scheduler before the batch-end hooks: at step s's end the rate is base * decay(s).
    before = [x for x in watch.seen if x[0] <= CHANGE_AT]
    after = [x for x in watch.seen if x[0] > CHANGE_AT]
    assert len(before) == CHANGE_AT and len(after) == STEPS - CHANGE_AT
    for s, lr, m, b in before:
        assert (lr, m, b) == (pytest.approx(0.1 * decay(s)), 0.9, [0.1])
    for s, lr, m, b in after:
        assert b == [pytest.approx(0.01)] and m == 0.5
        assert lr == pytest.approx(0.01 * decay(s)), (s, lr)  # the schedule goes on from the new rate


def test_a_fork_with_a_new_rate_restores_lightnings_optimizer_and_scheduler_at_that_rate(tmp_path: Path, one_thread):
    """A fork's first process restores its parent's state (written under the parent's rate) under its own
    values: the restored optimizer and scheduler are brought to the fork's rate, the schedule's position
    kept."""
    Tiny, Watch = _tiny_lightning()
    ckpt = str(tmp_path / "trial.pt")
    dev = cpu_devices(1)[:1]
    parent = Trial(1, {"lr": 0.1}, CHANGE_AT, dev, checkpoint_path=ckpt, metric="loss", mutable=("lr",))
    _fit(parent, Tiny(0.1), Watch(), CHANGE_AT)
    assert parent.checkpoint() == ckpt and parent.step == CHANGE_AT
    fork = Trial(2, {"lr": 0.01}, STEPS, dev, checkpoint_path=ckpt, resume=True, metric="loss", mutable=("lr",))
    watch = Watch()
    _fit(fork, Tiny(0.1), watch, STEPS)  # the module is built with the parent's rate: the restore changes it
    assert fork.restored_step == CHANGE_AT
    assert [x[0] for x in watch.seen] == list(range(CHANGE_AT + 1, STEPS + 1))
    for s, lr, _m, b in watch.seen:
        assert b == [pytest.approx(0.01)] and lr == pytest.approx(0.01 * decay(s)), (s, lr, b)


def _hf_fit(trial: Trial, out: Path, lr: float, watch) -> None:
    """examples/hf_tiny.py's model under a Trainer with a linear schedule over STEPS steps (the trial's
    budget may end it sooner), `watch` among its callbacks."""
    from transformers import Trainer, TrainingArguments

    from examples.hf_tiny import DEFAULTS, build_model, datasets
    from quanta.integrations.transformers import QuantaTrainerCallback

    cfg = {**DEFAULTS, "hidden": 16, "train_size": 320}
    train_set, eval_set = datasets(int(cfg["train_size"]))
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=STEPS,
        per_device_train_batch_size=32,
        per_device_eval_batch_size=500,
        learning_rate=lr,
        lr_scheduler_type="linear",
        eval_strategy="steps",
        eval_steps=STEPS,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=build_model(cfg),
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        callbacks=[QuantaTrainerCallback(trial), watch],
    )
    trainer.train()


def _hf_watch(change=None):
    """A callback recording (global step, lr, the scheduler's base rates) as each step begins, after
    calling `change(step)` there (a boundary: QuantaTrainerCallback's is there too)."""
    from transformers import TrainerCallback

    class Watch(TrainerCallback):
        def __init__(self):
            self.seen: list[tuple[int, float, list[float]]] = []

        def on_step_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
            if change is not None:
                change(state.global_step)
            inner = getattr(lr_scheduler, "scheduler", lr_scheduler)  # accelerate may wrap it
            self.seen.append((state.global_step, optimizer.param_groups[0]["lr"], list(inner.base_lrs)))

    return Watch()


def linear(step: int) -> float:
    """The Trainer's linear schedule without warm-up, over STEPS steps."""
    return max(0.0, (STEPS - step) / STEPS)


def test_a_learning_rate_change_reaches_the_hugging_face_trainers_optimizer_and_scheduler(tmp_path: Path, one_thread):
    lr0, lr1 = 3e-3, 3e-4
    trial = Trial.standalone({"lr": lr0}, max_steps=STEPS, metric="eval_loss")

    def change(step: int) -> None:
        if step == CHANGE_AT:
            assert trial._change_config({"lr": lr1}) == {"lr": lr1}

    watch = _hf_watch(change)
    _hf_fit(trial, tmp_path / "hf", lr0, watch)
    assert [s for s, _ in trial.history] == [STEPS] and len(watch.seen) == STEPS
    for step, lr, bases in watch.seen:
        base = lr0 if step < CHANGE_AT else lr1
        assert bases == [pytest.approx(base)] * len(bases), (step, bases)
        assert lr == pytest.approx(base * linear(step)), (step, lr)  # the schedule goes on from the new rate


def test_a_fork_with_a_new_rate_restores_the_trainers_optimizer_and_scheduler_at_that_rate(tmp_path: Path, one_thread):
    lr0, lr1 = 3e-3, 3e-4
    ckpt = str(tmp_path / "trial.pt")
    dev = cpu_devices(1)[:1]
    parent = Trial(1, {"lr": lr0}, CHANGE_AT, dev, checkpoint_path=ckpt, metric="eval_loss", mutable=("lr",))
    _hf_fit(parent, tmp_path / "a", lr0, _hf_watch())
    assert parent.checkpoint() == ckpt and parent.step == CHANGE_AT
    fork = Trial(2, {"lr": lr1}, STEPS, dev, checkpoint_path=ckpt, resume=True, metric="eval_loss", mutable=("lr",))
    watch = _hf_watch()
    _hf_fit(fork, tmp_path / "b", lr0, watch)  # the Trainer is built with the parent's rate: the restore changes it
    assert fork.restored_step == CHANGE_AT
    assert [x[0] for x in watch.seen] == list(range(CHANGE_AT, STEPS))
    for step, lr, bases in watch.seen:
        assert bases == [pytest.approx(lr1)] * len(bases) and lr == pytest.approx(lr1 * linear(step)), (step, lr)
