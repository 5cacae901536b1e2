"""A small MLP on scikit-learn's breast-cancer data (`load_breast_cancer()`, bundled with
scikit-learn: no download), written only against the SDK's `Trial`, as a new user writes one.

569 tumours of 30 measurements, two classes. A fixed split keeps 426 for training and 143 for the
reported `accuracy`; the features are standardised with the training part's mean and deviation.
A trial runs up to 8,000 mini-batches and reports `accuracy` (and the held-out `loss`) every 100
(at steps 0, 100, ...) and at its last.

    quanta run examples/breast_cancer.yaml --devices cpu:2
    python -m examples.breast_cancer 2000          # one standalone run

The mini-batch at step k depends only on (config seed, k) and the initial weights on the seed, so a
trial restarted from a checkpoint trains exactly as it would have without the restart.
"""

from __future__ import annotations

import functools
import math
import sys
from typing import Any

import numpy as np
import torch
from torch import nn

from quanta import Trial

DEFAULTS: dict[str, Any] = {
    "lr": 1e-3,
    "hidden": 64,
    "layers": 2,
    "dropout": 0.0,
    "weight_decay": 0.0,
    "batch_size": 32,
    "optimizer": "adam",
    "eval_every": 100,
    "seed": 0,
}
N_TEST = 143
SPLIT_SEED = 0  # the split is part of the task, not a hyperparameter


@functools.cache
def load_data() -> dict[str, np.ndarray]:
    """Standardised float32 features and int64 labels: x, y (training), x_test, y_test (held out)."""
    from sklearn.datasets import load_breast_cancer

    bunch = load_breast_cancer()
    x = np.asarray(bunch.data, dtype=np.float64)
    y = np.asarray(bunch.target, dtype=np.int64)
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    train, test = perm[:-N_TEST], perm[-N_TEST:]
    mean, std = x[train].mean(0), x[train].std(0) + 1e-8
    x = ((x - mean) / std).astype(np.float32)
    data = {"x": x[train], "y": y[train], "x_test": x[test], "y_test": y[test]}
    for arr in data.values():
        arr.flags.writeable = False  # shared between forked trials: never modified in place
    return data


def prepare(config: dict[str, Any] | None = None) -> None:
    """Load the data once (numpy only) so that trials forked afterwards share it."""
    load_data()


def build(cfg: dict[str, Any]) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(int(cfg["seed"]))
    layers: list[nn.Module] = []
    width = 30
    for _ in range(max(1, int(cfg["layers"]))):
        layers += [nn.Linear(width, int(cfg["hidden"])), nn.ReLU(), nn.Dropout(float(cfg["dropout"]))]
        width = int(cfg["hidden"])
    layers.append(nn.Linear(width, 2))
    model = nn.Sequential(*layers)
    opts = dict(cfg["optimizer"]) if isinstance(cfg["optimizer"], dict) else {"name": cfg["optimizer"]}
    lr, wd = float(cfg["lr"]), float(cfg["weight_decay"])
    if opts.get("name") == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(
            model.parameters(), lr=lr, momentum=float(opts.get("momentum", 0.9)), weight_decay=wd
        )
    elif opts.get("name") == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd)
    else:
        raise ValueError(f"config.optimizer.name {opts.get('name')!r}: expected sgd or adam")
    return model, opt


@functools.lru_cache(maxsize=2)
def _permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    """Epoch `epoch`'s order of the training rows: a function of (seed, epoch) only."""
    return np.random.default_rng((seed, epoch)).permutation(n)


@torch.no_grad()
def evaluate(model: nn.Module, device: torch.device) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) on the 143 held-out tumours."""
    data = load_data()
    x, y = torch.tensor(data["x_test"]).to(device), torch.tensor(data["y_test"]).to(device)
    model.eval()
    logits = model(x)
    model.train()
    return (logits.argmax(1) == y).float().mean().item(), nn.functional.cross_entropy(logits, y).item()


def train(config: dict[str, Any], trial: Trial) -> None:
    cfg = {**DEFAULTS, **config}
    model, opt = build(cfg)
    trial.track(model=model, optimizer=opt)
    data = load_data()
    n, batch = len(data["y"]), int(cfg["batch_size"])
    x_all, y_all = torch.tensor(data["x"]), torch.tensor(data["y"])
    per_epoch = max(1, n // batch)
    last = trial.max_steps - 1
    every = max(1, int(cfg["eval_every"]))
    for step in trial.steps():
        epoch, i = divmod(step, per_epoch)
        idx = torch.from_numpy(_permutation(int(cfg["seed"]), epoch, n)[i * batch : (i + 1) * batch])
        x, y = x_all[idx].to(trial.device), y_all[idx].to(trial.device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        diverged = not math.isfinite(loss.item())
        if step % every == 0 or step == last or diverged:
            acc, val_loss = evaluate(model, trial.device)
            trial.report(**{k: v for k, v in {"accuracy": acc, "loss": val_loss}.items() if math.isfinite(v)})
        if diverged:  # NaN weights never recover: give the time back
            return


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    torch.set_num_threads(1)  # as a Quanta trial runs: one thread per CPU device
    t = Trial.standalone({}, max_steps=steps, metric="accuracy")
    train(t.config, t)
    print("reports:", [(step, round(m["accuracy"], 3)) for step, m in t.history])
