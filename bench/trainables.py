"""Trainables used by the benchmarks: fixed-size MLPs doing real forward/backward/Adam steps."""

from __future__ import annotations

import torch

from app.sdk import Trial


def mlp(config: dict, trial: Trial) -> None:
    """An MLP of about `params` parameters trained on random data (batch 128); reports `loss`."""
    torch.manual_seed(config.get("seed", 0))
    width = int(config.get("width", 512))
    depth = int(config.get("depth", 4))
    layers: list[torch.nn.Module] = [torch.nn.Linear(256, width), torch.nn.ReLU()]
    for _ in range(depth - 2):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(width, 10))
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    trial.track(model=model, optimizer=opt)
    x = torch.randn(128, 256)
    y = torch.randint(0, 10, (128,))
    for step in trial.steps(config.get("steps")):
        xb, yb = x.to(trial.device), y.to(trial.device)
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            trial.report(loss=loss.item())


def param_count(width: int, depth: int) -> int:
    return 256 * width + width + (depth - 2) * (width * width + width) + width * 10 + 10
