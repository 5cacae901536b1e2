"""A trainable whose learning rate decides whether it reaches the target: for early-feedback tests.

Logistic regression (one linear layer, plain SGD) on a fixed synthetic set with 5 % label noise, so
accuracy saturates near 0.95 for a well-tuned run. A small learning rate learns slowly and stays far
below the target within the step budget; a large one gets there in a few dozen steps. Deterministic
in (seed, data_seed, step). `stall_s` sleeps after each mini-batch (it stands for an input pipeline
stall), which keeps a step at a few milliseconds on a loaded machine, so that a scheduling quantum
covers a small share of a trial's budget.
"""

from __future__ import annotations

import time

import torch

from quanta.sdk import Trial


def _data(seed: int, n: int = 512, d: int = 20, noise: float = 0.05) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, 1, generator=g)
    y = (x @ w > 0).float()
    flip = torch.rand(n, 1, generator=g) < noise
    return x, torch.where(flip, 1.0 - y, y)


def logreg(config: dict, trial: Trial) -> None:
    """Reports `accuracy` on the whole set every `report_every` steps (and at the last step)."""
    torch.manual_seed(config.get("seed", 0))
    x, y = _data(config.get("data_seed", 0))
    model = torch.nn.Linear(x.shape[1], 1)
    with torch.no_grad():  # a random start far from the solution: the step size decides the pace
        g = torch.Generator().manual_seed(config.get("init_seed", 1))
        model.weight.copy_(torch.randn(model.weight.shape, generator=g) * float(config.get("init_scale", 1.0)))
        model.bias.zero_()
    opt = torch.optim.SGD(model.parameters(), lr=float(config["lr"]))
    trial.track(model=model, optimizer=opt)
    bs = int(config.get("batch", 32))
    stall = float(config.get("stall_s", 0.0))
    every = int(config.get("report_every", 10))
    for step in trial.steps(config.get("steps")):
        g = torch.Generator().manual_seed(step)
        idx = torch.randint(0, x.shape[0], (bs,), generator=g)
        xb, yb = x[idx].to(trial.device), y[idx].to(trial.device)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if stall:
            time.sleep(stall)
        if (step + 1) % every == 0 or step == trial.max_steps - 1:
            with torch.no_grad():
                acc = ((model(x.to(trial.device)) > 0).float() == y.to(trial.device)).float().mean().item()
            trial.report(accuracy=acc, loss=loss.item())
