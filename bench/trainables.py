"""Trainables used by the benchmarks: fixed-size MLPs doing real forward/backward/Adam steps."""

from __future__ import annotations

import time

import torch

from quanta.sdk import Trial


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


def paced(config: dict, trial: Trial) -> None:
    """A small logistic regression that waits `sleep_s` after each mini-batch (as a trial waiting on its
    input pipeline or on an accelerator does): a search that keeps running, reporting `accuracy` every
    `report_every` steps, while leaving the CPU mostly to others (the API under load, bench/load.py)."""
    torch.manual_seed(config.get("seed", 0))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=g)
    y = (x @ torch.randn(16, 1, generator=g) > 0).float()
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.Adam(model.parameters(), lr=float(config.get("lr", 0.01)))
    trial.track(model=model, optimizer=opt)
    sleep, every = float(config.get("sleep_s", 0.005)), int(config.get("report_every", 20))
    for step in trial.steps(config.get("steps")):
        idx = torch.randint(0, 256, (32,), generator=torch.Generator().manual_seed(step))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(sleep)
        if step % every == 0:
            with torch.no_grad():
                trial.report(accuracy=((model(x) > 0).float() == y).float().mean().item(), loss=loss.item())


def mlp_exploit(config: dict, trial: Trial) -> None:
    """The exploit-latency model (bench/exploit_latency.py): the MLP of `mlp` (width x depth, about
    `param_count(width, depth)` parameters) with Adam at `config["lr"]` on one fixed random batch,
    reporting at every step `loss` and `began`, the wall time (time.time()) at which that step's
    mini-batch started: the moment a trial that took another's state computes with it. A mutable `lr`
    reaches the tracked optimizer by itself."""
    torch.manual_seed(config.get("seed", 0))
    width, depth = int(config.get("width", 512)), int(config.get("depth", 4))
    layers: list[torch.nn.Module] = [torch.nn.Linear(256, width), torch.nn.ReLU()]
    for _ in range(depth - 2):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(width, 10))
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.Adam(model.parameters(), lr=float(config.get("lr", 1e-3)))
    trial.track(model=model, optimizer=opt)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(128, 256, generator=g), torch.randint(0, 10, (128,), generator=g)
    for _step in trial.steps(config.get("steps")):
        began = time.time()
        loss = torch.nn.functional.cross_entropy(model(x.to(trial.device)), y.to(trial.device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        trial.report(loss=loss.item(), began=began)
