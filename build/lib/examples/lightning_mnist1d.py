"""MNIST-1D with PyTorch Lightning: an unchanged LightningModule and `Trainer.fit`, run as a Quanta trial
by one callback (`quanta.integrations.lightning.QuantaCallback`).

    quanta run examples/lightning_mnist1d.yaml --devices cpu:2
    python -m examples.lightning_mnist1d          # one standalone fit, with Lightning's progress bar

The model and data are examples/mnist1d.py's (the same 1-D CNN, the data set built locally and cached);
only the training loop is Lightning's. It validates every `eval_every` steps and logs `accuracy` and
`loss` (the search's metric is `accuracy`). The loaders are `ResumableLoader`s: an epoch's order is a
function of (seed, epoch) and Lightning saves the train loader's position in the trial's checkpoint,
so a trial restarted from a checkpoint sees the batches it would have seen without the restart.
Needs the `integrations` extra: `pip install -e ".[integrations]"`.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import TensorDataset

from examples.mnist1d import CNN1D, build_optimizer, load_data
from examples.mnist1d import prepare as prepare  # the template loads the data once before forking
from quanta import Trial
from quanta.integrations.lightning import QuantaCallback, ResumableLoader

DEFAULTS: dict[str, Any] = {
    "lr": 3e-3,
    "channels": 32,
    "dropout": 0.1,
    "optimizer": "adam",
    "batch_size": 64,
    "eval_every": 50,
    "seed": 0,
}

LOG_DIR_ENV = "QUANTA_LIGHTNING_LOGS"  # where the CSV logs go; default .quanta/lightning_logs


class MNIST1DModule(pl.LightningModule):
    """A plain LightningModule: nothing in it knows about Quanta."""

    def __init__(self, channels: int, dropout: float, lr: float, optimizer: Any, weight_decay: float = 0.0):
        super().__init__()
        self.save_hyperparameters()
        self.net = CNN1D(channels, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("loss", nn.functional.cross_entropy(logits, y))
        self.log("accuracy", (logits.argmax(1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        hp = self.hparams
        return build_optimizer(self.parameters(), float(hp.lr), hp.optimizer, float(hp.weight_decay))


def loaders(cfg: dict[str, Any]) -> tuple[ResumableLoader, ResumableLoader]:
    """Train loader (shuffled per epoch from the seed, resumable) and the 1,000 test sequences as one batch."""
    data = load_data()
    train_set = TensorDataset(torch.tensor(data["x"]).unsqueeze(1), torch.tensor(data["y"]))
    test_set = TensorDataset(torch.tensor(data["x_test"]).unsqueeze(1), torch.tensor(data["y_test"]))
    seed = int(cfg["seed"])
    train = ResumableLoader(train_set, int(cfg["batch_size"]), seed=seed, drop_last=True)
    test = ResumableLoader(test_set, len(test_set), shuffle=False, seed=seed)
    return train, test


def train(config: dict[str, Any], trial: Trial) -> None:
    cfg = {**DEFAULTS, **config}
    torch.manual_seed(int(cfg["seed"]))
    module = MNIST1DModule(
        int(cfg["channels"]),
        float(cfg["dropout"]),
        float(cfg["lr"]),
        cfg["optimizer"],
        float(cfg.get("weight_decay", 0)),
    )
    train_loader, val_loader = loaders(cfg)
    steps = min(trial.max_steps, int(cfg.get("max_steps", trial.max_steps)))
    log_dir = Path(os.environ.get(LOG_DIR_ENV) or ".quanta/lightning_logs")
    trainer = pl.Trainer(
        max_steps=steps,
        max_epochs=-1,
        val_check_interval=max(1, int(cfg["eval_every"])),
        check_val_every_n_epoch=None,  # validate every eval_every steps, across epochs
        accelerator="cpu",
        devices=1,
        callbacks=[QuantaCallback(trial)],
        logger=CSVLogger(log_dir, name="lightning_mnist1d", version=f"trial-{trial.id}-pid{os.getpid()}"),
        enable_checkpointing=False,  # Quanta checkpoints the trial
        enable_progress_bar=not trial.controlled,  # a trial's output is a log file: no bar there
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        trainer.fit(module, train_loader, val_loader)


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    t = Trial.standalone({"max_steps": steps}, metric="accuracy")
    train(t.config, t)
    print("reports:", [(step, round(m["accuracy"], 3)) for step, m in t.history])
