"""Accuracy against model size under a latency bound: a 1-D CNN on MNIST-1D whose width and depth are
searched, with two objectives and a constraint.

    quanta run examples/mnist1d_mo.yaml --devices cpu:2

The data, the mini-batch order and the optimiser are examples/mnist1d.py's (the data set is built
locally by the `mnist1d` package, no download, and cached). The network is `depth` strided 1-D
convolutions of `channels` channels and a linear classifier: from a few hundred parameters (one
convolution of 4 channels) to 39k (four of 64). Every report carries:

- `accuracy` on the 1,000 test sequences (maximised);
- `params_k`: the model's parameter count in thousands (minimised; fixed for a trial);
- `latency_ms`: the model's inference time on a fixed batch of `latency_batch` test sequences (256), in
  eval mode without gradients, on one CPU thread: the fastest of 15 timed passes after 2 warm-up ones,
  measured once when the model is built (the architecture does not change while it trains). One
  thread, so that the figure is the model's and not the trial's share of the cores; the fastest pass,
  because a pass takes well under a scheduler time slice, so on a busy machine a run of passes can be
  preempted wholesale and a median then reads several times slower, while some pass still runs
  undisturbed;
- `loss` (test cross-entropy) and `train_loss`.

They are reported every `eval_every` steps (config, default 50) and at the last step. A diverged run
(a non-finite training loss) reports its objectives as they are (the search ranks it last) and ends.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch import nn

from examples.mnist1d import batch, build_optimizer, evaluate, load_data
from examples.mnist1d import prepare as prepare  # the template loads the data once before forking
from quanta import Trial

DEFAULTS: dict[str, Any] = {
    "lr": 3e-3,
    "channels": 32,
    "depth": 3,
    "batch_size": 64,
    "optimizer": "adam",
    "eval_every": 50,
    "latency_batch": 256,
    "seed": 0,
}


class DepthCNN(nn.Module):
    """`depth` convolutions of `channels` channels, each halving the sequence (kernel 5 for the first,
    3 after), ReLU between, and a linear classifier over the flattened features."""

    def __init__(self, channels: int, depth: int, length: int = 40, classes: int = 10):
        super().__init__()
        if depth < 1 or channels < 1:
            raise ValueError(f"depth ({depth}) and channels ({channels}) must be at least 1")
        layers: list[nn.Module] = []
        c_in, out_len = 1, length
        for i in range(depth):
            k = 5 if i == 0 else 3
            layers += [nn.Conv1d(c_in, channels, kernel_size=k, stride=2, padding=k // 2), nn.ReLU()]
            c_in, out_len = channels, (out_len - 1) // 2 + 1
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(channels * out_len, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def latency_ms(model: nn.Module, n: int = 256, repeats: int = 15, warmup: int = 2) -> float:
    """The fastest wall time in ms of one forward pass over the first `n` test sequences, in eval mode on one
    CPU thread (see the module docstring). The model's mode and torch's thread count are restored."""
    data = load_data()
    x = torch.tensor(data["x_test"][:n]).unsqueeze(1)
    was_training, threads = model.training, torch.get_num_threads()
    device = next(model.parameters()).device
    model.eval()
    torch.set_num_threads(1)
    try:
        x = x.to(device)
        for _ in range(warmup):
            model(x)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
        model.train(was_training)
    return 1000.0 * min(times)


def build(config: dict[str, Any]) -> tuple[DepthCNN, torch.optim.Optimizer]:
    cfg = {**DEFAULTS, **config}
    torch.manual_seed(int(cfg["seed"]))
    model = DepthCNN(int(cfg["channels"]), int(cfg["depth"]))
    opt = build_optimizer(model.parameters(), float(cfg["lr"]), cfg["optimizer"], float(cfg.get("weight_decay", 0)))
    return model, opt


def train(config: dict[str, Any], trial: Trial) -> None:
    cfg = {**DEFAULTS, **config}
    model, opt = build(cfg)
    trial.track(model=model, optimizer=opt)
    size_k = param_count(model) / 1000.0
    latency = latency_ms(model, int(cfg["latency_batch"]))
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
            metrics = {"loss": val_loss, "train_loss": train_loss}
            # The objectives and the constrained value go as they are, finite or not: a search with several
            # objectives stores a non-finite one and ranks the report last.
            trial.report(
                accuracy=acc,
                params_k=size_k,
                latency_ms=latency,
                **{k: v for k, v in metrics.items() if math.isfinite(v)},
            )
        if diverged:  # the weights are NaN: further steps cannot recover, so give the time back
            return


if __name__ == "__main__":
    import sys

    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    t = Trial.standalone({"max_steps": steps}, metrics=("accuracy", "params_k", "latency_ms"))
    train(t.config, t)
    print("reports:", [(s, {k: round(v, 3) for k, v in m.items()}) for s, m in t.history])
