"""In-process drivers for the integrations' tests: `Driver`, a stand-in for the runtime that parks,
moves and releases a `Trial` over a real control connection, and two tiny trainables (a Lightning fit,
a Hugging Face `Trainer.train()`) whose device, gradient accumulation and evaluation interval are config.

`Driver` speaks the runtime's protocol (`app/executor/runtime/child.py`: "suspend", "resume" with
devices, "release"; the trial answers "profile", "parked", "resumed", "report", ...) over a
`multiprocessing.Pipe`, so the Trial under test runs its real park, move, checkpoint and release code,
in this process: a test takes seconds.
"""

from __future__ import annotations

import contextlib
import os
import threading
from multiprocessing import Pipe
from pathlib import Path
from typing import Any

import torch

from quanta.devices import Device
from quanta.sdk import Trial


class Driver:
    """Drives the trial it makes (`trial()`), recording every message in order.

    `park_often`: a "suspend" waits for the trial's first boundary, and after each resume the next is
    sent as soon as the trial reports a profile (it profiles at every boundary), so it parks again at
    one of the next boundaries, wherever the two threads' timing puts it; each resume is on the next
    of `devices` in turn (a move when they differ). `release_at_limit`: a trial parked at its step
    limit (`until`) is released (it writes its checkpoint and raises `TrialReleased`).

    `boundaries` are the trial's steps at each of its boundaries (one profile each); `parks` the
    steps it parked at. `close()` ends the driver and gives this process its CPU affinity back (a
    resume pins the process to the device's cores, as it pins a trial's process)."""

    def __init__(self, devices: list[Device], *, park_often: bool = True, release_at_limit: bool = False):
        self.devices = list(devices)
        self.park_often = park_often
        self.release_at_limit = release_at_limit
        self.messages: list[tuple[str, dict[str, Any]]] = []
        self.moves = 0  # resumes on another device than the last
        self._affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        self._conn, self._trial_conn = Pipe()
        self._suspend_sent = park_often
        if park_often:
            self._conn.send(("suspend", {}))
        self._thread = threading.Thread(target=self._drive, daemon=True)
        self._thread.start()

    def trial(
        self, config: dict[str, Any], max_steps: int, checkpoint: Path, metric: str, until: int | None = None
    ) -> Trial:
        """The trial to drive, on the first device: it profiles at every boundary, checkpoints only when
        released (not by time or park count) and parks itself after its first report at or past `until`."""
        return Trial(
            1,
            config,
            max_steps,
            self.devices[:1],
            conn=self._trial_conn,
            checkpoint_path=str(checkpoint),
            checkpoint_every_quanta=10**9,
            checkpoint_every_s=1e9,
            profile_every_s=0.0,
            until=until,
            metric=metric,
        )

    @property
    def reports(self) -> list[tuple[int, dict[str, float]]]:
        return [(int(m["step"]), dict(m["metrics"])) for k, m in self.messages if k == "report"]

    @property
    def parks(self) -> list[int]:
        return [int(m["step"]) for k, m in self.messages if k == "parked"]

    @property
    def boundaries(self) -> list[int]:
        """The step at each boundary: every boundary sends one profile, and a park one more just before
        its "parked" (left out here)."""
        out = []
        for i, (kind, msg) in enumerate(self.messages):
            parks_next = i + 1 < len(self.messages) and self.messages[i + 1][0] == "parked"
            if kind == "profile" and not parks_next:
                out.append(int(msg["step"]))
        return out

    def _drive(self) -> None:
        at = 0
        while True:
            try:
                kind, msg = self._conn.recv()
            except (EOFError, OSError):
                return
            self.messages.append((kind, msg))
            if kind == "profile" and self.park_often and not self._suspend_sent:
                self._conn.send(("suspend", {}))
                self._suspend_sent = True
            elif kind == "parked":
                self._suspend_sent = False
                if self.release_at_limit and msg.get("at_limit"):
                    self._conn.send(("release", {}))
                    continue
                nxt = (at + 1) % len(self.devices)
                self.moves += int(self.devices[nxt] != self.devices[at])
                at = nxt
                self._conn.send(("resume", {"devices": [self.devices[at]]}))

    def close(self) -> None:
        self._trial_conn.close()
        self._thread.join(10)
        self._conn.close()
        if self._affinity is not None:
            for tid in os.listdir("/proc/self/task"):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(tid), self._affinity)


def restored(config: dict[str, Any], max_steps: int, checkpoint: Path, metric: str, device: Device) -> Trial:
    """A new trial of the same id restoring from `checkpoint` (a restart), with no controller."""
    return Trial(1, config, max_steps, [device], checkpoint_path=str(checkpoint), resume=True, metric=metric)


# ---- a tiny Lightning fit ---------------------------------------------------------------------------

TRAIN_N, BATCH = 224, 32  # 7 batches an epoch: with accumulation over 2, each epoch ends on a short step


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2 * TRAIN_N, 8, generator=g)
    return x, (x[:, 0] + x[:, 1] * x[:, 2] > 0).long()


def lightning_train(config: dict[str, Any], trial: Trial) -> Any:
    """`Trainer.fit` of a 2-layer MLP (with dropout: the RNG must resume too) for `trial.max_steps`
    optimizer steps, `accumulate` batches a step, validating every `eval_every` batches, logging the
    training loss per step and (unless `epoch_mean` is False) its epoch mean; on
    `config["accelerator"]` (cpu or cuda, on the trial's device). Returns the trainer."""
    import lightning.pytorch as pl
    from torch import nn
    from torch.utils.data import TensorDataset

    from quanta.integrations.lightning import QuantaCallback, ResumableLoader

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 2))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = nn.functional.cross_entropy(self.net(x), y)
            # An epoch mean lives in Lightning's logged-metric collection (moved with the trial), which no
            # checkpoint holds: a restarted process starts the epoch's mean afresh (`epoch_mean: False`).
            self.log("train_loss", loss, on_step=True, on_epoch=bool(config.get("epoch_mean", True)))
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            logits = self.net(x)
            self.log("loss", nn.functional.cross_entropy(logits, y))
            self.log("accuracy", (logits.argmax(1) == y).float().mean())

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=float(config.get("lr", 0.01)))

    torch.manual_seed(0)
    module = Tiny()
    x, y = _data()
    train = ResumableLoader(TensorDataset(x[:TRAIN_N], y[:TRAIN_N]), BATCH, seed=0, drop_last=True)
    val = ResumableLoader(TensorDataset(x[TRAIN_N:], y[TRAIN_N:]), TRAIN_N, shuffle=False)
    accelerator = config.get("accelerator", "cpu")
    trainer = pl.Trainer(
        max_steps=trial.max_steps,
        max_epochs=-1,
        val_check_interval=int(config.get("eval_every", 4)),
        check_val_every_n_epoch=None,
        accumulate_grad_batches=int(config.get("accumulate", 1)),
        accelerator=accelerator,
        devices=[trial.device.index or 0] if accelerator == "cuda" else 1,
        precision=config.get("precision", "32-true"),
        callbacks=[QuantaCallback(trial)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, train, val)
    return trainer


# ---- a tiny Hugging Face Trainer -----------------------------------------------------------------------


def hf_train(config: dict[str, Any], trial: Trial, output: Path) -> Any:
    """`Trainer.train()` of examples/hf_tiny.py's model (hidden 16) on 224 sequences (7 batches an
    epoch) for `trial.max_steps` optimizer steps, `accumulate` batches a step, evaluating every
    `eval_every` steps on 200; on the CPU unless `config["cuda"]`. Returns the trainer."""
    from transformers import Trainer, TrainingArguments

    from examples.hf_tiny import DEFAULTS, CountingTask, accuracy, build_model
    from quanta.integrations.transformers import QuantaTrainerCallback

    cfg = {**DEFAULTS, "hidden": 16, **config}
    model = build_model(cfg)
    args = TrainingArguments(
        output_dir=str(output),
        max_steps=trial.max_steps,
        per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=200,
        gradient_accumulation_steps=int(cfg.get("accumulate", 1)),
        learning_rate=float(cfg.get("lr", 3e-3)),
        eval_strategy="steps",
        eval_steps=int(cfg.get("eval_every", 2)),
        logging_steps=int(cfg.get("eval_every", 2)),
        save_strategy="no",
        report_to="none",
        use_cpu=not cfg.get("cuda", False),
        fp16=bool(cfg.get("fp16", False)),
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=CountingTask(TRAIN_N, seed=1),
        eval_dataset=CountingTask(200, seed=2),
        compute_metrics=accuracy,
        callbacks=[QuantaTrainerCallback(trial)],
    )
    trainer.train()
    return trainer
