"""A small 1-D CNN on MNIST-1D (Greydanus 2020): the example where early feedback is honest.

The data set is built locally by `mnist1d.data.make_dataset` (about 1 s, no network) and cached under
`.quanta/cache/` (see `load_data`): 4,000 training and 1,000 test sequences of length 40, ten classes.
Reported metric: `accuracy` on the test split.

    quanta run examples/mnist1d.yaml --devices cpu:2

Conventions every example follows (copy them):

- `prepare()` loads the data with numpy only; Quanta's pre-warmed template calls it once before it
  forks trial processes, so every trial shares the arrays (copy-on-write) instead of rebuilding them.
- The mini-batch at step k depends only on (config seed, k): a per-epoch permutation drawn from
  `np.random.default_rng((seed, epoch))`. A trial restarted from a checkpoint at step k therefore sees
  the same batches it would have seen without the restart. Model initialisation uses
  `torch.manual_seed(seed)`; dropout draws from torch's global generator, which checkpoints save.
- `accuracy` is reported every `eval_every` steps (config, default 50) and at the last step.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from examples.common import batch_indices
from quanta import Trial

DEFAULTS: dict[str, Any] = {
    "lr": 3e-3,
    "channels": 32,
    "dropout": 0.1,
    "optimizer": "adam",
    "batch_size": 64,
    "eval_every": 50,
    "seed": 0,
}


CACHE_ENV = "QUANTA_CACHE_DIR"  # where the built data set is cached; default .quanta/cache in the working dir


@functools.cache
def load_data() -> dict[str, np.ndarray]:
    """MNIST-1D as float32 (N, 40) inputs and int64 labels: keys x, y, x_test, y_test (read-only).

    Building it takes 1-2 s (importing mnist1d pulls in scipy and matplotlib, then `make_dataset`), about
    as long as the rest of Quanta's start-up, so the built arrays are cached in a file
    `$QUANTA_CACHE_DIR/mnist1d-<key>.npz` (default `.quanta/cache/` under the working directory, which
    `quanta run` uses for its own files too). The key hashes everything the arrays depend on: the
    mnist1d package's sources (its default dataset arguments live there), and the numpy and scipy
    versions. A missing or unreadable cache file is rebuilt; delete the directory to force it.
    """
    path = _cache_path()
    if path is not None:
        with contextlib.suppress(Exception):  # a partial or foreign file: rebuild it
            with np.load(path) as npz:
                data = {k: np.ascontiguousarray(npz[k]) for k in ("x", "y", "x_test", "y_test")}
            return _read_only(data)
    data = build_data()
    if path is not None:
        with contextlib.suppress(OSError):  # a read-only working directory: just do not cache
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".npz", dir=path.parent)
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, x=data["x"], y=data["y"], x_test=data["x_test"], y_test=data["y_test"])
            os.replace(tmp, path)  # atomic: concurrent builders never see half a file
    return data


def build_data() -> dict[str, np.ndarray]:
    """Build the data set (no cache): `make_dataset(get_dataset_args())`; never `get_dataset()`, which
    downloads first. `make_dataset` reseeds the global `random` and `np.random`; their states are
    restored here so that loading the data does not change any other code's random numbers."""
    from mnist1d.data import get_dataset_args, make_dataset

    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        raw = make_dataset(get_dataset_args())
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
    data: dict[str, np.ndarray] = {
        "x": np.ascontiguousarray(raw["x"], dtype=np.float32),
        "y": np.ascontiguousarray(raw["y"], dtype=np.int64),
        "x_test": np.ascontiguousarray(raw["x_test"], dtype=np.float32),
        "y_test": np.ascontiguousarray(raw["y_test"], dtype=np.int64),
    }
    return _read_only(data)


def _read_only(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    for arr in data.values():
        arr.flags.writeable = False  # shared between forked trials: never modified in place
    return data


def _cache_path() -> Path | None:
    """The cache file for this mnist1d/numpy/scipy, or None when mnist1d is not installed. Costs a few
    milliseconds: the package is located and its sources hashed, not imported."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("mnist1d")
    if spec is None or spec.origin is None:
        return None
    h = hashlib.sha256(b"quanta-mnist1d-v1")
    for src in sorted(Path(spec.origin).parent.glob("*.py")):
        h.update(src.name.encode() + src.read_bytes())
    for dist in ("numpy", "scipy"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            h.update(f"{dist}={importlib.metadata.version(dist)}".encode())
    return Path(os.environ.get(CACHE_ENV) or ".quanta/cache") / f"mnist1d-{h.hexdigest()[:16]}.npz"


def prepare(config: dict[str, Any] | None = None) -> None:
    """Load the data once (numpy only, no torch compute) so forked trial processes share it."""
    load_data()


def batch(config: dict[str, Any], step: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
    """The training mini-batch at `step` as tensors on `device`: x (B, 1, 40) float32, y (B,) int64."""
    cfg = {**DEFAULTS, **config}
    data = load_data()
    idx = batch_indices(int(cfg["seed"]), step, int(cfg["batch_size"]), len(data["y"]))
    x = torch.from_numpy(data["x"][idx]).unsqueeze(1)
    y = torch.from_numpy(data["y"][idx])
    return x.to(device), y.to(device)


class CNN1D(nn.Module):
    """Three strided 1-D convolutions and a linear classifier (0.9k parameters at 8 channels, 28k at 64)."""

    def __init__(self, channels: int = 32, dropout: float = 0.1, length: int = 40, classes: int = 10):
        super().__init__()
        c = channels
        self.features = nn.Sequential(
            nn.Conv1d(1, c, kernel_size=5, stride=2, padding=2),
            nn.ReLU(),
            nn.Conv1d(c, c, kernel_size=3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv1d(c, c, kernel_size=3, stride=2, padding=1),
            nn.ReLU(),
        )
        out_len = length
        for _ in range(3):
            out_len = (out_len - 1) // 2 + 1
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(dropout), nn.Linear(c * out_len, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _optimizer_settings(value: Any) -> tuple[str, dict[str, Any]]:
    """`optimizer` is a name ("adam") or a mapping from a nested choice ({name: sgd, momentum: 0.9})."""
    if isinstance(value, dict):
        opts = dict(value)
        return str(opts.pop("name", "adam")).lower(), opts
    return str(value).lower(), {}


def build_optimizer(params, lr: float, spec: Any, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    name, opts = _optimizer_settings(spec)
    if name == "sgd":
        return torch.optim.SGD(
            params,
            lr=lr,
            momentum=float(opts.get("momentum", 0.9)),
            nesterov=bool(opts.get("nesterov", False)),
            weight_decay=weight_decay,
        )
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay or 1e-2)
    raise ValueError(f"optimizer {name!r}: expected sgd, adam or adamw")


def build(config: dict[str, Any]) -> tuple[nn.Module, torch.optim.Optimizer]:
    cfg = {**DEFAULTS, **config}
    torch.manual_seed(int(cfg["seed"]))
    model = CNN1D(int(cfg["channels"]), float(cfg["dropout"]))
    opt = build_optimizer(model.parameters(), float(cfg["lr"]), cfg["optimizer"], float(cfg.get("weight_decay", 0)))
    return model, opt


@torch.no_grad()
def evaluate(model: nn.Module, device: torch.device) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) on the 1,000 test sequences."""
    data = load_data()
    x = torch.tensor(data["x_test"]).unsqueeze(1).to(device)  # a copy: the arrays are read-only
    y = torch.tensor(data["y_test"]).to(device)
    was_training = model.training
    model.eval()
    logits = model(x)
    model.train(was_training)
    loss = nn.functional.cross_entropy(logits, y).item()
    acc = (logits.argmax(1) == y).float().mean().item()
    return acc, loss


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
        if diverged:  # the weights are NaN: further steps cannot recover, so give the time back
            return
