"""PyTorch Lightning as a Quanta trial: `QuantaCallback`.

    import lightning.pytorch as pl
    from quanta.integrations.lightning import QuantaCallback

    def train(config: dict, trial: Trial) -> None:
        module = MyModule(lr=config["lr"])                       # an unchanged LightningModule
        trainer = pl.Trainer(max_steps=2000, val_check_interval=100, callbacks=[QuantaCallback(trial)])
        trainer.fit(module, train_loader, val_loader)

What the callback does, hook by hook:

- `on_fit_start` (the strategy has built the optimizers and moved the module): `trial.track()` the
  module, each optimizer and LR scheduler, the precision plugin, the fit loop's counters (global step,
  epoch, batch progress and, for a resumable train loader, its position) and the other callbacks'
  states. On a restart this restores them all from the trial's checkpoint before Lightning starts its
  fit loop, so training resumes at the checkpointed global step (Lightning skips its sanity check).
- `on_train_start`: `trial.enter_loop(global_step)`: Quanta measures steps/s from here.
- `on_train_batch_start` of the first batch after a restore: the checkpoint's RNG states are set again,
  so that the DataLoader iterators Lightning created since the restore do not shift them.
- `on_train_batch_end` of a batch that ended with an optimizer step (the global step moved):
  `trial.boundary(global_step)`. Quanta may park the trial here (the call blocks
  until it is resumed), move it, checkpoint it or stop it: `TrialStopped` goes up through
  `Trainer.fit`, which runs its `on_exception` hooks and re-raises it. With gradient accumulation
  (`accumulate_grad_batches=k`) the batches that only accumulate are no boundary: the gradients summed
  so far are in no state a checkpoint holds, so a checkpoint there would restart the step without
  them (a park in memory would keep them, but one boundary rule for both keeps every checkpoint exact).
  When Lightning validates after
  this batch, the boundary is at the end of that validation instead (`on_validation_end`, after the
  report): a restart from a checkpoint taken before the validation would skip it (Lightning resumes a
  batch-end checkpoint with the next batch), one taken after it resumes as Lightning's own
  `ModelCheckpoint` saves do. When the trial's step budget or
  the Trainer's `max_steps` is spent, `trainer.should_stop` is set: Lightning validates once more (so
  the trial's last report is at its last step) and ends the fit.
- `on_validation_end` (not during the sanity check): one `trial.report()` of every finite scalar in
  `trainer.callback_metrics`, at the global step: whatever the module logged (`self.log`), so a search
  with several objectives and constraints gets all of them, e.g. `accuracy` logged in
  `validation_step` beside a `latency_ms` or `params_k` the module measures. Every name the search
  reads (`trial.metrics`: its objectives and constrained values) must be among them (a KeyError naming
  the missing ones and the logged ones otherwise); see `quanta.integrations.metrics` for non-finite
  values.

Moves: Quanta moves the tracked module and optimizers itself (`Trial.track`); Lightning also keeps
where it puts things, and a tracked `_Placement` tells it (`move_to`, which the Trial calls with every
move of the state: a park on an accelerator, a resume, a move to another device): the strategy's root
device (every batch is sent there), the logged-metric collections of the training and validation
loops (running sums on the device) and the mixed-precision gradient scaler's state. One device per
trial (a `SingleDeviceStrategy`): another strategy is refused when the fit starts (a RuntimeError).

Lightning's progress bar, loggers and other callbacks are left as they are. Without a trial
(`QuantaCallback()`) or with `Trial.standalone()` the fit runs as if Quanta were not there and the
reports are kept in `trial.history`.

A restart continues the data where it stopped only if the train DataLoader is resumable: Lightning
keeps the state of a loader with `state_dict()`/`load_state_dict()` in its loop state, and
`ResumableLoader` below is one. With another loader Lightning warns and the interrupted epoch starts
again from its first batch (weights, optimizer and global step are still the checkpoint's). State a
LightningModule keeps in its own `on_save_checkpoint` hook is not saved: keep it in modules or buffers.
Nor are the running aggregates of metrics logged with `on_epoch=True` in `training_step` (as in
Lightning's own checkpoints): a restarted process reports the epoch's mean of the batches since the
restart (parks and moves keep them; validation metrics, computed afresh at each validation, are exact).
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import SingleDeviceStrategy
from torch.utils.data import DataLoader, Dataset, Sampler

from quanta.integrations.metrics import report_metrics, searched_names
from quanta.integrations.moves import move_scaler
from quanta.sdk import checkpoint as ckpt
from quanta.sdk.trial import Trial

__all__ = ["QuantaCallback", "ResumableLoader"]


def _validation_follows(trainer: pl.Trainer) -> bool:
    """Whether Lightning validates right after the current training batch, by its own test (a private
    method of its epoch loop: False on a Lightning without it, which puts the boundary before the
    validation, as before)."""
    check = getattr(trainer.fit_loop.epoch_loop, "_should_check_val_fx", None)
    fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)
    if check is None or fetcher is None:
        return False
    try:
        return bool(check(fetcher))
    except TypeError:  # an older signature without the data fetcher
        return bool(check())


class _FitLoop:
    """Lightning's fit loop as a tracked object: global step, epoch and batch progress, and the state
    of resumable train loaders, through the loop's public `state_dict`/`load_state_dict`."""

    def __init__(self, trainer: pl.Trainer):
        self._trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        return {"fit_loop": self._trainer.fit_loop.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._trainer.fit_loop.load_state_dict(state["fit_loop"])


class _Callbacks:
    """The states of the trainer's other callbacks (early stopping, model checkpoint, ...), keyed by
    their `state_key` as Lightning keys them in its own checkpoints."""

    def __init__(self, trainer: pl.Trainer, own: pl.Callback):
        self._trainer = trainer
        self._own = own

    def _others(self) -> list[pl.Callback]:
        return [cb for cb in self._trainer.callbacks if cb is not self._own]  # type: ignore[attr-defined]

    def state_dict(self) -> dict[str, Any]:
        return {cb.state_key: cb.state_dict() for cb in self._others()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for cb in self._others():
            if cb.state_key in state:
                cb.load_state_dict(state[cb.state_key])


class _Placement:
    """Where Lightning puts the trial's tensors, as a tracked object (no state of its own): `move_to`
    points Lightning at `device` when Quanta moves the module and optimizers there (see the module's
    docstring)."""

    def __init__(self, trainer: pl.Trainer):
        self._trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def move_to(self, device: torch.device) -> None:
        trainer = self._trainer
        strategy = trainer.strategy
        if not isinstance(strategy, SingleDeviceStrategy):
            raise RuntimeError(
                f"QuantaCallback: cannot move a trial whose Lightning strategy is {type(strategy).__name__} "
                "(one device per trial: a SingleDeviceStrategy)"
            )
        # Lightning sends every batch to `root_device`; the strategy has no public setter for it.
        strategy._root_device = device
        epoch_loop = trainer.fit_loop.epoch_loop
        for results in (epoch_loop._results, epoch_loop.val_loop._results):
            results.to(device)  # running sums of the logged metrics, kept on the module's device
        move_scaler(getattr(trainer.precision_plugin, "scaler", None), device)


class QuantaCallback(pl.Callback):
    """Runs `Trainer.fit` as Quanta trial `trial` (see the module docstring). Each report must hold the
    names the search reads (`trial.metrics`: its objectives and constrained values); `metrics` overrides
    them with a list of names, `metric` with one."""

    def __init__(self, trial: Trial | None = None, metric: str | None = None, metrics: list[str] | None = None):
        if trial is not None and not isinstance(trial, Trial):
            raise TypeError(f"QuantaCallback(trial=...): expected the trainable's Trial, got {type(trial).__name__}")
        self.trial = trial if trial is not None else Trial.standalone()
        self.metrics = searched_names(self.trial, metric, metrics)
        self.metric = self.metrics[0] if self.metrics else None
        self._rng_to_restore: dict[str, Any] | None = None
        self._boundary_after_validation = False
        self._stepped_to = 0  # the global step at the last batch end (or at the loop's start)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        objects: dict[str, Any] = {"module": pl_module}
        for i, opt in enumerate(trainer.optimizers):
            objects[f"optimizer{i or ''}"] = opt
        for i, config in enumerate(trainer.lr_scheduler_configs):
            objects[f"lr_scheduler{i or ''}"] = config.scheduler
        objects["precision"] = trainer.precision_plugin
        objects["fit_loop"] = _FitLoop(trainer)
        objects["callbacks"] = _Callbacks(trainer, self)
        objects["placement"] = _Placement(trainer)
        self.trial.track(**objects)  # restores them all when the trial restarts from a checkpoint
        if self.trial.restored_step is not None:
            self._rng_to_restore = ckpt.rng_state()  # as restored: set again before the first batch

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.trial.enter_loop(trainer.global_step)
        self._stepped_to = trainer.global_step

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._rng_to_restore is not None:
            ckpt.set_rng_state(self._rng_to_restore)
            self._rng_to_restore = None

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.trial.advance_to(trainer.global_step)
        stepped = trainer.global_step > self._stepped_to
        self._stepped_to = trainer.global_step
        if not stepped:
            # A batch that only accumulated gradients (no optimizer step): no boundary until the step.
            return
        last = trainer.max_steps is not None and 0 < trainer.max_steps <= trainer.global_step
        if self.trial.budget_spent or last:
            trainer.should_stop = True  # Lightning validates once more: the trial's final metric
        if _validation_follows(trainer):
            # A restart from a checkpoint taken here would skip this validation (Lightning resumes a
            # batch-end checkpoint with the next batch): the boundary comes after it instead.
            self._boundary_after_validation = True
        else:
            self.trial.boundary()  # may park, move, checkpoint or stop the trial

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        report_metrics(self.trial, self.metrics, dict(trainer.callback_metrics), "QuantaCallback")
        if self._boundary_after_validation:
            self._boundary_after_validation = False
            self.trial.boundary()


class _EpochOrder(Sampler[int]):
    """Indices of one epoch: a permutation drawn from `(seed, epoch)` (or 0..n-1 unshuffled), from
    `skip` on. Drawn lazily, when iteration starts, so `set_epoch` may come after `iter()`."""

    def __init__(self, n: int, seed: int, shuffle: bool):
        self.n, self.seed, self.shuffle = n, seed, shuffle
        self.epoch = 0
        self.skip = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        skip, self.skip = self.skip, 0
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            order = torch.randperm(self.n, generator=g).tolist()
        else:
            order = list(range(self.n))
        yield from order[skip:]


class ResumableLoader(DataLoader):
    """A DataLoader whose position survives a restart: epoch `e` visits the data set in an order drawn
    from `(seed, e)` (Lightning calls `set_epoch`), and `state_dict()` says how many batches of the
    current epoch it has served, which Lightning saves in its loop state. Restored, the next iteration
    starts at the batch after the last one served (skipped by index: skipped samples are not loaded).
    Its own generator seeds worker processes, so iterating it draws nothing from torch's global RNG."""

    def __init__(self, dataset: Dataset, batch_size: int = 1, *, shuffle: bool = True, seed: int = 0, **kwargs: Any):
        if not isinstance(dataset, Sized):
            raise TypeError("ResumableLoader: the data set must have a length (a map-style Dataset)")
        for bad in ("sampler", "batch_sampler", "generator"):
            if bad in kwargs:
                raise TypeError(f"ResumableLoader: '{bad}' is chosen by the loader (give shuffle and seed)")
        order = _EpochOrder(len(dataset), int(seed), bool(shuffle))
        super().__init__(
            dataset,
            batch_size=batch_size,
            sampler=order,
            generator=torch.Generator().manual_seed(int(seed)),
            **kwargs,
        )
        self._order = order
        self._served = 0
        self._resume_at = 0

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        start, self._resume_at = self._resume_at, 0
        self._order.skip = start * int(self.batch_size or 1)
        self._served = start
        for batch in super().__iter__():
            self._served += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        return {"served": self._served}

    def load_state_dict(self, state: dict[str, int]) -> None:
        served = int(state.get("served", 0))
        self._served = served
        # A checkpoint after an epoch's last batch resumes with a whole new epoch.
        self._resume_at = served if served < len(self) else 0
