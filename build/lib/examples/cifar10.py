"""A small ResNet on CIFAR-10, read from the standard python pickle batches.

`config["data_dir"]` is the `cifar-10-batches-py` directory (or a directory containing it) with
`data_batch_1` ... `data_batch_5`, `test_batch` and `batches.meta`, as unpacked from
https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz. Quanta never downloads it: fetch it yourself,
or generate a stand-in with the same format in seconds (`python -m examples.cifar10_fake DIR`, see
`examples/cifar10_fake.py`; `examples/ci/cifar10-tiny.yaml` searches on such data).

    quanta run examples/cifar10.yaml --devices cuda:all

Same conventions as `examples/mnist1d.py`: `prepare(config)` loads the arrays with numpy only, the
mini-batch at step k (including its random crops and flips) depends only on (config seed, k), model
initialisation on `torch.manual_seed(seed)`, `accuracy` every `eval_every` steps and at the last step.

The batches are pickles, and a pickle can run code when loaded: they are read with a restricted
unpickler that builds only what the format holds (a dict of bytes, lists, numbers and numpy arrays),
and only from under the data root, `$QUANTA_DATA_ROOT` (default `./data` of the process's working
directory), so a search cannot point a trial at a file someone placed elsewhere (a temp directory, the
shared checkpoint folder).
"""

from __future__ import annotations

import functools
import math
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from examples.common import batch_indices
from quanta import Trial

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
META_FILE = "batches.meta"
SUBDIR = "cifar-10-batches-py"

DEFAULTS: dict[str, Any] = {
    "lr": 0.05,
    "width": 16,
    "blocks": 1,
    "stem_stride": 1,  # 2 halves the resolution at once: 4x cheaper, a little less accurate
    "weight_decay": 5e-4,
    "optimizer": {"name": "sgd", "momentum": 0.9},
    "batch_size": 128,
    "augment": True,
    "eval_every": 500,
    "eval_size": None,  # evaluate on the first N test images (None: all of them)
    "seed": 0,
}


def data_root() -> Path:
    """The directory every `data_dir` must lie under: `$QUANTA_DATA_ROOT`, default `./data`."""
    return Path(os.environ.get("QUANTA_DATA_ROOT") or "data").expanduser().resolve()


def _resolve(data_dir: str | os.PathLike[str]) -> Path:
    """`data_dir` itself, or its `cifar-10-batches-py` subdirectory when that is where the files are,
    resolved (links followed). Raises ValueError naming `config.data_dir` when it lies outside the data
    root."""
    root = Path(data_dir).expanduser()
    if not (root / TEST_FILE).exists() and (root / SUBDIR / TEST_FILE).exists():
        root = root / SUBDIR
    resolved, allowed = root.resolve(), data_root()
    if not resolved.is_relative_to(allowed):
        raise ValueError(
            f"config.data_dir {str(data_dir)!r} is outside the data root {allowed}: CIFAR-10 batches are read "
            "only from under $QUANTA_DATA_ROOT (default ./data)"
        )
    return resolved


# What a CIFAR-10 python batch may build when unpickled: numpy arrays (old and new numpy module
# paths, and protocol 5's buffer form), whose raw bytes protocol-2 pickles made by Python 3 carry through
# `_codecs.encode(text, "latin1")` (it only turns a str into bytes). Everything else (os.system,
# builtins.eval, ...) is refused.
_SAFE_GLOBALS = frozenset(
    {
        ("_codecs", "encode"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
    }
)


class _BatchUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused global {module}.{name}: not part of a CIFAR-10 batch")


def _read_pickle(path: Path) -> dict[Any, Any]:
    with path.open("rb") as fh:
        try:  # the official files are Python 2 pickles: their str are read as bytes
            obj = _BatchUnpickler(fh, encoding="bytes").load()
        except pickle.UnpicklingError as exc:
            raise ValueError(f"{path}: not a CIFAR-10 batch ({exc})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a pickled dict, found {type(obj).__name__}")
    return obj


def _field(obj: dict[Any, Any], key: str, path: Path) -> Any:
    for k in (key.encode(), key):  # bytes keys in the official files; str keys if re-pickled
        if k in obj:
            return obj[k]
    raise ValueError(f"{path}: no {key!r} entry (keys: {sorted(map(str, obj))})")


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    obj = _read_pickle(path)
    data = np.asarray(_field(obj, "data", path))
    labels = np.asarray(_field(obj, "labels", path), dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise ValueError(f"{path}: 'data' must be uint8 of shape (N, 3072), found {data.dtype} {data.shape}")
    if labels.shape != (data.shape[0],):
        raise ValueError(f"{path}: {labels.shape[0]} labels for {data.shape[0]} images")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"{path}: labels must lie in 0..9")
    # Each row holds the red, green then blue 32x32 planes, each row-major.
    return data.reshape(-1, 3, 32, 32), labels


def load_cifar10(data_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Read CIFAR-10's python batches. Returns x (N, 3, 32, 32) uint8, y (N,) int64, x_test, y_test,
    label_names (list of str), mean and std (per-channel float32 statistics of the training images
    in [0, 1]). Raises FileNotFoundError naming every missing file. Cached per resolved directory."""
    return _load_cached(str(_resolve(data_dir)))


@functools.cache
def _load_cached(root_str: str) -> dict[str, Any]:
    root = Path(root_str)
    needed = [*TRAIN_FILES, TEST_FILE, META_FILE]
    missing = [name for name in needed if not (root / name).is_file()]
    if missing:
        first = root / missing[0]
        raise FileNotFoundError(
            2,
            f"CIFAR-10 data incomplete: missing {', '.join(missing)} in {root} (expected the python "
            f"batches {', '.join(needed)}; download cifar-10-python.tar.gz and unpack it, or generate "
            f"fake data with `python -m examples.cifar10_fake {root}`)",
            str(first),
        )
    parts = [_read_batch(root / name) for name in TRAIN_FILES]
    x = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    x_test, y_test = _read_batch(root / TEST_FILE)
    meta = _read_pickle(root / META_FILE)
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in _field(meta, "label_names", root / META_FILE)]
    # Per-channel statistics, computed in chunks to keep the float copy small.
    sums = np.zeros(3)
    sq = np.zeros(3)
    for i in range(0, len(x), 5000):
        chunk = x[i : i + 5000].astype(np.float64) / 255.0
        sums += chunk.sum(axis=(0, 2, 3))
        sq += (chunk**2).sum(axis=(0, 2, 3))
    count = max(1, len(x) * 32 * 32)
    mean = sums / count
    std = np.sqrt(np.maximum(sq / count - mean**2, 1e-12))
    out = {
        "x": x,
        "y": y,
        "x_test": x_test,
        "y_test": y_test,
        "label_names": names,
        "mean": mean.astype(np.float32),
        "std": std.astype(np.float32),
    }
    for value in out.values():
        if isinstance(value, np.ndarray):
            value.flags.writeable = False  # shared between forked trials: never modified in place
    return out


def prepare(config: dict[str, Any] | None = None) -> None:
    """Load the data once before trials fork (numpy only). The directory comes from
    `config["data_dir"]` or the CIFAR10_DIR environment variable; without either, nothing to do."""
    data_dir = (config or {}).get("data_dir") or os.environ.get("CIFAR10_DIR")
    if data_dir:
        load_cifar10(data_dir)


# ---- mini-batches -----------------------------------------------------------------------------


def augment(images: np.ndarray, seed: int, step: int, pad: int = 4) -> np.ndarray:
    """Random crops (zero padding `pad`) and horizontal flips, drawn from `default_rng((seed, step, 1))`."""
    rng = np.random.default_rng((seed, step, 1))
    n = len(images)
    padded = np.pad(images, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    dx = rng.integers(0, 2 * pad + 1, n)
    dy = rng.integers(0, 2 * pad + 1, n)
    flip = rng.random(n) < 0.5
    out = np.empty_like(images)
    for i in range(n):
        crop = padded[i, :, dy[i] : dy[i] + 32, dx[i] : dx[i] + 32]
        out[i] = crop[:, :, ::-1] if flip[i] else crop
    return out


def _to_tensor(images: np.ndarray, data: dict[str, Any], device: torch.device | str) -> torch.Tensor:
    x = torch.tensor(images).to(device).float().div_(255.0)  # a copy: the arrays are read-only
    mean = torch.from_numpy(data["mean"].copy()).to(device).view(1, 3, 1, 1)
    std = torch.from_numpy(data["std"].copy()).to(device).view(1, 3, 1, 1)
    return (x - mean) / std


def batch(config: dict[str, Any], step: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
    """The training mini-batch at `step`: x (B, 3, 32, 32) float32 normalised, y (B,) int64."""
    cfg = {**DEFAULTS, **config}
    data = load_cifar10(cfg["data_dir"])
    seed = int(cfg["seed"])
    idx = batch_indices(seed, step, int(cfg["batch_size"]), len(data["y"]))
    images = data["x"][idx]
    if cfg["augment"]:
        images = augment(images, seed, step)
    return _to_tensor(images, data, device), torch.from_numpy(data["y"][idx]).to(device)


# ---- model ------------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """Stem, three stages of `blocks` basic blocks (widths w, 2w, 4w; strides 1, 2, 2), average pool,
    linear: ResNet-8 for blocks=1, ResNet-14 for blocks=2 (0.08M parameters at w=16, blocks=1)."""

    def __init__(self, width: int = 16, blocks: int = 1, classes: int = 10, stem_stride: int = 1):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, stem_stride, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
        layers: list[nn.Module] = []
        c_in = w
        for stage, c_out in enumerate((w, 2 * w, 4 * w)):
            for b in range(max(1, blocks)):
                layers.append(BasicBlock(c_in, c_out, 2 if (stage > 0 and b == 0) else 1))
                c_in = c_out
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def build_optimizer(params, lr: float, spec: Any, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """`spec` is a name ("adam") or a mapping from a nested choice ({name: sgd, momentum: 0.9})."""
    opts = dict(spec) if isinstance(spec, dict) else {"name": spec}
    name = str(opts.pop("name", "sgd")).lower()
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
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"optimizer {name!r}: expected sgd, adam or adamw")


def build(config: dict[str, Any]) -> tuple[nn.Module, torch.optim.Optimizer]:
    cfg = {**DEFAULTS, **config}
    torch.manual_seed(int(cfg["seed"]))
    model = ResNet(int(cfg["width"]), int(cfg["blocks"]), stem_stride=int(cfg["stem_stride"]))
    opt = build_optimizer(model.parameters(), float(cfg["lr"]), cfg["optimizer"], float(cfg["weight_decay"]))
    return model, opt


@torch.no_grad()
def evaluate(
    model: nn.Module, data: dict[str, Any], device: torch.device, limit: int | None = None, chunk: int = 1000
) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) on the first `limit` test images (all when None)."""
    n = len(data["y_test"]) if limit is None else min(int(limit), len(data["y_test"]))
    was_training = model.training
    model.eval()
    correct, loss_sum = 0, 0.0
    for i in range(0, n, chunk):
        j = min(n, i + chunk)
        x = _to_tensor(data["x_test"][i:j], data, device)
        y = torch.from_numpy(data["y_test"][i:j].copy()).to(device)
        logits = model(x)
        correct += int((logits.argmax(1) == y).sum())
        loss_sum += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
    model.train(was_training)
    return correct / max(1, n), loss_sum / max(1, n)


def train(config: dict[str, Any], trial: Trial) -> None:
    cfg = {**DEFAULTS, **config}
    if not cfg.get("data_dir"):
        raise ValueError("config['data_dir'] is required: the directory holding CIFAR-10's python batches")
    data = load_cifar10(cfg["data_dir"])
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
            acc, val_loss = evaluate(model, data, trial.device, cfg["eval_size"])
            metrics = {"accuracy": acc, "loss": val_loss, "train_loss": train_loss}
            trial.report(**{k: v for k, v in metrics.items() if math.isfinite(v)})
        if diverged:  # NaN weights never recover: give the time back
            return
