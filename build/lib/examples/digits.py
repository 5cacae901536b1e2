"""An MLP on scikit-learn's 8x8 digits (`load_digits()`, bundled with scikit-learn: no download).

1,797 images of 64 pixels, ten classes; a fixed split keeps 1,437 for training and 360 for the
reported `accuracy`. The fastest example: a trial of a few hundred steps takes about a second.

    quanta run examples/digits.yaml --devices cpu:2

Same conventions as `examples/mnist1d.py`: `prepare()` loads the data with numpy only (the pre-warmed
template calls it before forking trials), the mini-batch at step k depends only on (config seed, k),
model initialisation on `torch.manual_seed(seed)`, `accuracy` every `eval_every` steps and at the last.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from examples.common import batch_indices
from quanta import Trial

DEFAULTS: dict[str, Any] = {
    "lr": 3e-3,
    "hidden": 128,
    "layers": 1,
    "dropout": 0.1,
    "optimizer": "adam",
    "batch_size": 32,
    "eval_every": 25,
    "seed": 0,
}
N_TEST = 360
SPLIT_SEED = 0  # the train/test split is fixed: it is not a hyperparameter


@functools.cache
def load_data() -> dict[str, np.ndarray]:
    """Digits as float32 (N, 64) inputs scaled to [0, 1] and int64 labels: x, y, x_test, y_test."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (np.asarray(bunch.data, dtype=np.float32) / 16.0).astype(np.float32)
    y = np.asarray(bunch.target, dtype=np.int64)
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    train, test = perm[:-N_TEST], perm[-N_TEST:]
    data = {
        "x": np.ascontiguousarray(x[train]),
        "y": np.ascontiguousarray(y[train]),
        "x_test": np.ascontiguousarray(x[test]),
        "y_test": np.ascontiguousarray(y[test]),
    }
    for arr in data.values():
        arr.flags.writeable = False  # shared between forked trials: never modified in place
    return data


def prepare(config: dict[str, Any] | None = None) -> None:
    """Load the data once (numpy only, no torch compute) so forked trial processes share it."""
    load_data()


def batch(config: dict[str, Any], step: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
    """The training mini-batch at `step`: x (B, 64) float32, y (B,) int64, on `device`."""
    cfg = {**DEFAULTS, **config}
    data = load_data()
    idx = batch_indices(int(cfg["seed"]), step, int(cfg["batch_size"]), len(data["y"]))
    return torch.from_numpy(data["x"][idx]).to(device), torch.from_numpy(data["y"][idx]).to(device)


def build_model(hidden: int, layers: int, dropout: float) -> nn.Module:
    mods: list[nn.Module] = []
    width = 64
    for _ in range(max(1, layers)):
        mods += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
        width = hidden
    mods.append(nn.Linear(width, 10))
    return nn.Sequential(*mods)


def build_optimizer(params, lr: float, spec: Any, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """`spec` is a name ("adam") or a mapping from a nested choice ({name: sgd, momentum: 0.9})."""
    opts = dict(spec) if isinstance(spec, dict) else {"name": spec}
    name = str(opts.pop("name", "adam")).lower()
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=float(opts.get("momentum", 0.9)), weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"optimizer {name!r}: expected sgd or adam")


def build(config: dict[str, Any]) -> tuple[nn.Module, torch.optim.Optimizer]:
    cfg = {**DEFAULTS, **config}
    torch.manual_seed(int(cfg["seed"]))
    model = build_model(int(cfg["hidden"]), int(cfg["layers"]), float(cfg["dropout"]))
    opt = build_optimizer(model.parameters(), float(cfg["lr"]), cfg["optimizer"], float(cfg.get("weight_decay", 0)))
    return model, opt


@torch.no_grad()
def evaluate(model: nn.Module, device: torch.device) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) on the 360 held-out images."""
    data = load_data()
    x = torch.tensor(data["x_test"]).to(device)  # a copy: the arrays are read-only
    y = torch.tensor(data["y_test"]).to(device)
    was_training = model.training
    model.eval()
    logits = model(x)
    model.train(was_training)
    return (logits.argmax(1) == y).float().mean().item(), nn.functional.cross_entropy(logits, y).item()


def train(config: dict[str, Any], trial: Trial) -> None:
    cfg = {**DEFAULTS, **config}
    model, opt = build(cfg)
    trial.track(model=model, optimizer=opt)
    last = min(trial.max_steps, int(cfg.get("max_steps", trial.max_steps))) - 1
    eval_every = max(1, int(cfg["eval_every"]))
    model.train()
    for step in trial.steps(last + 1):
        x, y = batch(cfg, step, device=trial.device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        train_loss = loss.item()
        diverged = not math.isfinite(train_loss)
        if step % eval_every == 0 or step == last or diverged:
            acc, val_loss = evaluate(model, trial.device)
            metrics = {"accuracy": acc, "loss": val_loss, "train_loss": train_loss}
            trial.report(**{k: v for k, v in metrics.items() if math.isfinite(v)})
        if diverged:  # NaN weights never recover: give the time back
            return
