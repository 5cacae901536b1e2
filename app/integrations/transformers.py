"""The Hugging Face `transformers.Trainer` as a Quanta trial: `QuantaTrainerCallback`.

    from transformers import Trainer, TrainingArguments
    from quanta.integrations.transformers import QuantaTrainerCallback

    def train(config: dict, trial: Trial) -> None:
        model = build_model(config)
        args = TrainingArguments(output_dir=..., max_steps=600, eval_strategy="steps", eval_steps=50, ...)
        trainer = Trainer(model=model, args=args, train_dataset=..., eval_dataset=...,
                          callbacks=[QuantaTrainerCallback(trial)])
        trainer.train()

What the callback does, event by event:

- `on_train_begin` (the Trainer has built its optimizer and scheduler): `trial.track()` the model,
  the optimizer, the LR scheduler and the Trainer's state (global step, epoch, log history, best
  metric). On a restart this restores them from the trial's checkpoint, so training goes on at the
  checkpointed global step; then `trial.enter_loop(global_step)`.
  After a restore the train DataLoader is pointed at the checkpointed step before the Trainer
  iterates it: the Trainer's seedable sampler orders epoch `e` by seed + `e`, so its seed moves on by
  the epochs done, and the first epoch skips the batches already trained through the Trainer's own
  resume path (its `_run_epoch` told how many batches of the epoch were trained, as when it resumes
  from one of its checkpoints).
- `on_step_begin` (the step's batches are fetched, nothing of the step is computed):
  `trial.boundary(global_step)`. Quanta may park the trial here (the call blocks until it is resumed),
  move it, checkpoint it or stop it (`TrialStopped` goes up through `trainer.train()`). The boundary
  is the start of a step rather than the end of the previous one so that a checkpoint holds the RNG
  states the next step starts from, after any evaluation in between: a restart then computes exactly
  what an uninterrupted run computes. After a restore, the first step sets the checkpoint's RNG states
  again (the DataLoader iterators created since drew from them).
- `on_step_end`: `trial.advance_to(global_step)` (an evaluation that follows reports at this step);
  when the trial's step budget is spent, the Trainer is told to evaluate once more and stop.
- `on_evaluate`: one `trial.report()` of every finite scalar of the evaluation's metrics, at the
  global step (less the evaluation's timings and epoch): the loss and all that `compute_metrics`
  returns, so a search with several objectives and constraints gets all of them (an accuracy beside a
  latency or parameter count `compute_metrics` measures). Every name the search reads
  (`trial.metrics`: its objectives and constrained values) must be among them (a KeyError naming the
  missing ones and the logged ones otherwise); see `quanta.integrations.metrics` for non-finite values.
  The Trainer prefixes evaluation metrics with `eval_`, so a search on `eval_loss` names it so (and on
  a latency `compute_metrics` returns as `latency_ms`, `eval_latency_ms`).

Moves: Quanta moves the tracked model and optimizer itself (`Trial.track`); a tracked `_Placement`
tells the Trainer (its `move_to` is called with every move of the state: a park on an accelerator, a
resume, a move to another device) where the next batches and running tensors go: the arguments'
`device` (where `_prepare_inputs` sends every batch), accelerate's state device and the train
loader's device (where a prepared loader sends its batches), the Trainer's running training loss
(`_tr_loss`, which the Trainer requires on the loss's device) and the fp16 gradient scaler's state.
The Trainer gives its callbacks no reference to itself: `on_train_begin` finds it among its callers.
With gradient accumulation (`gradient_accumulation_steps=k`) the Trainer calls `on_step_begin` once per
optimizer step, before its first micro-batch, so the boundary never falls between the micro-batches of
one step: no checkpoint misses gradients summed so far.

The Trainer's logging, progress bar and its own callbacks are left as they are. Without a trial
(`QuantaTrainerCallback()`) or with `Trial.standalone()` training runs as if Quanta were not there.
"""

from __future__ import annotations

import inspect
import os
import sys
from types import FrameType
from typing import Any

import torch
from torch.utils.data import BatchSampler, SequentialSampler
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from quanta.integrations.metrics import report_metrics, searched_names
from quanta.integrations.moves import move_scaler
from quanta.sdk import checkpoint as ckpt
from quanta.sdk.trial import Trial

__all__ = ["QuantaTrainerCallback"]

# The parts of a TrainerState that a run accumulates (the rest is set from the TrainingArguments at the
# start of every run and must not be overwritten by an old run's values).
_STATE_FIELDS = (
    "global_step",
    "epoch",
    "log_history",
    "best_metric",
    "best_global_step",
    "best_model_checkpoint",
    "total_flos",
    "num_input_tokens_seen",
)


# Timings the Trainer adds to every evaluation's metrics: not the model's, and different in every run.
_TIMINGS = ("_runtime", "_samples_per_second", "_steps_per_second", "epoch")


class _TrainerState:
    """The Trainer's `TrainerState` as a tracked object (what the Trainer writes to trainer_state.json)."""

    def __init__(self, state: TrainerState):
        self._state = state

    def state_dict(self) -> dict[str, Any]:
        return {name: getattr(self._state, name) for name in _STATE_FIELDS if hasattr(self._state, name)}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        for name, value in saved.items():
            if hasattr(self._state, name):
                setattr(self._state, name, value)


def _epoch_sampler(loader: Any) -> Any:
    """The sampler that orders an epoch of `loader` (under accelerate's batch sampler wrappers)."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    for candidate in (
        getattr(batch_sampler, "sampler", None),
        getattr(getattr(batch_sampler, "batch_sampler", None), "sampler", None),
        getattr(loader, "sampler", None),
    ):
        if candidate is not None and not isinstance(candidate, BatchSampler):
            return candidate
    return None


def _updates_per_epoch(args: TrainingArguments, dataloader: Any) -> int | None:
    """Optimizer steps in one epoch (as the Trainer counts them), or None for a loader without a length."""
    try:
        batches = len(dataloader)
    except TypeError:
        return None
    accum = max(1, int(args.gradient_accumulation_steps))
    return max(1, batches // accum + int(batches % accum > 0))


def _calling_trainer() -> Any:
    """The `Trainer` whose `train()` is running on this thread (found among the callers of a callback
    event; it hands callbacks no reference to itself), or None."""
    from transformers import Trainer

    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, Trainer):
            return owner
        frame = frame.f_back
    return None


class _Placement:
    """Where the Trainer puts batches and its running tensors, as a tracked object (no state of its
    own): `move_to` points it at `device` when Quanta moves the model and optimizer there (see the
    module's docstring)."""

    def __init__(self, args: TrainingArguments, loader: Any, trainer: Any):
        self._args = args
        self._loader = loader
        self._trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def move_to(self, device: torch.device) -> None:
        from accelerate.state import AcceleratorState, PartialState  # type: ignore[import-untyped]

        # `args.device` is a cached property over `_setup_devices`: the cached value is the one to change.
        self._args.__dict__["_setup_devices"] = device
        for state in (PartialState, AcceleratorState):
            if state._shared_state:  # process-wide: one trial per process
                state._shared_state["device"] = device
        if getattr(self._loader, "device", None) is not None:  # accelerate's DataLoaderShard
            self._loader.device = device
        trainer = self._trainer
        if trainer is None:
            return
        loss = getattr(trainer, "_tr_loss", None)
        if torch.is_tensor(loss):
            trainer._tr_loss = loss.to(device)
        move_scaler(getattr(getattr(trainer, "accelerator", None), "scaler", None), device)


_RESUME_ARGS = ("epoch", "resume_from_checkpoint", "epochs_trained", "steps_trained_in_current_epoch")


def _resume_epoch(trainer: Any, skip: int) -> None:
    """Make the Trainer's next epoch start `skip` batches in, as its own resume from a checkpoint does
    (`Trainer._run_epoch` given the batches trained in the current epoch): it skips them at the loader,
    counts the epoch's batches from there and starts at the right optimizer step. Skipping at the loader
    alone is not enough with gradient accumulation: the Trainer ends an epoch whose batch count is not a
    multiple of `gradient_accumulation_steps` with a short step, which it finds by counting the epoch's
    batches from its first, so a restart in such an epoch would miss that step. The checkpoint path it is
    given has no RNG file (the callback sets the RNG states itself at the first step)."""
    run_epoch = getattr(trainer, "_run_epoch", None)
    if run_epoch is None or not set(_RESUME_ARGS) <= set(inspect.signature(run_epoch).parameters):
        raise RuntimeError(
            "QuantaTrainerCallback: cannot resume mid-epoch: this transformers version's Trainer has no "
            "_run_epoch(epoch, resume_from_checkpoint, epochs_trained, steps_trained_in_current_epoch)"
        )

    def first_epoch(**kwargs: Any) -> Any:
        del trainer._run_epoch  # the epochs after this one run as usual
        kwargs.update(
            resume_from_checkpoint=os.devnull,  # no RNG file there: the Trainer leaves the RNG alone
            epochs_trained=kwargs["epoch"],
            steps_trained_in_current_epoch=skip,
        )
        return run_epoch(**kwargs)

    trainer._run_epoch = first_epoch


class QuantaTrainerCallback(TrainerCallback):
    """Runs `Trainer.train()` as Quanta trial `trial` (see the module docstring). Each report must hold
    the names the search reads (`trial.metrics`: its objectives and constrained values); `metrics`
    overrides them with a list of names, `metric` with one."""

    def __init__(self, trial: Trial | None = None, metric: str | None = None, metrics: list[str] | None = None):
        if trial is not None and not isinstance(trial, Trial):
            raise TypeError(
                f"QuantaTrainerCallback(trial=...): expected the trainable's Trial, got {type(trial).__name__}"
            )
        self.trial = trial if trial is not None else Trial.standalone()
        self.metrics = searched_names(self.trial, metric, metrics)
        self.metric = self.metrics[0] if self.metrics else None
        self._rng_to_restore: dict[str, Any] | None = None
        self._per_epoch: int | None = None  # optimizer steps per epoch, in a restored run

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        lr_scheduler: Any = None,
        train_dataloader: Any = None,
        **kwargs: Any,
    ) -> None:
        if model is None or optimizer is None:
            raise RuntimeError("QuantaTrainerCallback: the Trainer gave no model or optimizer at on_train_begin")
        objects: dict[str, Any] = {"model": model, "optimizer": optimizer, "trainer_state": _TrainerState(state)}
        if lr_scheduler is not None and hasattr(lr_scheduler, "state_dict"):
            objects["lr_scheduler"] = lr_scheduler
        trainer = _calling_trainer()
        objects["placement"] = _Placement(args, train_dataloader, trainer)
        self.trial.track(**objects)  # restores them all when the trial restarts from a checkpoint
        restored = self.trial.restored_step
        if restored is not None and restored > 0:
            self._rng_to_restore = ckpt.rng_state()  # as restored: set again before the first step
            self._per_epoch = _updates_per_epoch(args, train_dataloader)
            self._resume_data(args, state.global_step, train_dataloader, trainer)
        self.trial.enter_loop(state.global_step)

    def _resume_data(self, args: TrainingArguments, step: int, loader: Any, trainer: Any) -> None:
        """Point the train loader at the checkpointed step before the Trainer iterates it: epoch `e` of
        the restored run draws the order of epoch `e + epochs done` (the seedable sampler's seed moves
        on by the epochs done; the Trainer seeds an epoch's order with seed + epoch), and the first
        epoch skips the batches already trained through the Trainer's own resume path (`_resume_epoch`)."""
        if self._per_epoch is None:
            raise RuntimeError(
                "QuantaTrainerCallback: cannot resume a train DataLoader without a length (an IterableDataset)"
            )
        epochs, steps = divmod(step, self._per_epoch)
        sampler = _epoch_sampler(loader)
        if epochs and sampler is not None and hasattr(sampler, "initial_seed"):
            sampler.initial_seed += epochs
        elif epochs and not isinstance(sampler, SequentialSampler):
            raise RuntimeError(
                f"QuantaTrainerCallback: cannot set the train sampler ({type(sampler).__name__}) to epoch {epochs}: "
                "keep the Trainer's default (seedable) sampler"
            )
        skip = steps * max(1, int(args.gradient_accumulation_steps))
        if skip:
            _resume_epoch(trainer, skip)

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._rng_to_restore is not None:
            ckpt.set_rng_state(self._rng_to_restore)
            self._rng_to_restore = None
        self.trial.boundary(state.global_step)  # may park, move, checkpoint or stop the trial

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self.trial.advance_to(state.global_step)  # the evaluation that may follow reports at this step
        if self._per_epoch:  # a restored run: the Trainer counts this run's epochs only
            state.epoch = state.global_step / self._per_epoch
        if self.trial.budget_spent and not control.should_training_stop:
            control.should_training_stop = True
            if args.eval_strategy != "no":
                control.should_evaluate = True  # the last step's metric is the trial's final one

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        report_metrics(self.trial, self.metrics, dict(metrics or {}), "QuantaTrainerCallback", skip=_TIMINGS)
