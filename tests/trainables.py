"""Small trainables for integration tests: real torch training, deterministic in (seed, step)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import torch

from quanta.sdk import Trial


def _data(seed: int, n: int = 256, d: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, 1, generator=g)
    return x, (x @ w > 0).float()


def linear(config: dict, trial: Trial) -> None:
    """Logistic regression on a fixed synthetic set; reports `loss` every step and `accuracy`."""
    torch.manual_seed(config.get("seed", 0))
    x, y = _data(config.get("data_seed", 0))
    model = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], config.get("hidden", 32)),
        torch.nn.ReLU(),
        torch.nn.Linear(config.get("hidden", 32), 1),
    )
    opt = torch.optim.Adam(model.parameters(), lr=config.get("lr", 0.01))
    trial.track(model=model, optimizer=opt)
    bs = config.get("batch", 32)
    sleep = config.get("sleep_s", 0.0)
    crash_at = config.get("crash_at")
    for step in trial.steps(config.get("steps")):
        g = torch.Generator().manual_seed(step)
        idx = torch.randint(0, x.shape[0], (bs,), generator=g)
        xb, yb = x[idx].to(trial.device), y[idx].to(trial.device)
        noise = torch.randn(1).item() * 0  # consumes the global RNG: restored on restart
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(xb), yb) + noise
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sleep:
            time.sleep(sleep)  # stands for an input-pipeline stall
        if crash_at is not None and step == crash_at and _first_to_create(config["crash_marker"]):
            os.kill(os.getpid(), 9)
        report_every = config.get("report_every", 1)
        if step % report_every == 0 or step == trial.max_steps - 1:
            with torch.no_grad():
                acc = ((model(x.to(trial.device)) > 0).float() == y.to(trial.device)).float().mean().item()
            trial.report(loss=loss.item(), accuracy=acc)


def boom(config: dict, trial: Trial) -> None:
    for step in trial.steps(10):
        if step == 3:
            raise ValueError("boom at step 3")


def segfault(config: dict, trial: Trial) -> None:
    import ctypes

    for step in trial.steps(10):
        if step == 2:
            ctypes.string_at(0)


def threads(config: dict, trial: Trial) -> None:
    """Reports torch's thread count at every step (`threads`). With `set_threads`, the trainable
    chooses its own count first, as a trainable that calls `torch.set_num_threads(1)` does."""
    if config.get("set_threads"):
        torch.set_num_threads(int(config["set_threads"]))
    w = torch.zeros(64, 64)
    for step in trial.steps(config.get("steps")):
        w = torch.tanh(w @ torch.randn(64, 64))  # real intra-op work
        time.sleep(config.get("sleep_s", 0.001))
        trial.report(threads=torch.get_num_threads(), step=step)


def _first_to_create(path: str) -> bool:
    """True for exactly one caller across processes: the one whose exclusive create made `path` (trials
    that reach the crash step at the same moment must not both crash)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def hog(config: dict, trial: Trial) -> None:
    """Grows its memory by `mb` MB per step (a leak), up to `max_mb`; reports the step."""
    held = []
    for step in trial.steps():
        if len(held) * config["mb"] < config["max_mb"]:
            block = bytearray(config["mb"] * 2**20)
            block[::4096] = b"\1" * len(block[::4096])  # touch every page: resident, not just reserved
            held.append(block)
        trial.report(step=float(step))
        time.sleep(0.02)


def chatty(config: dict, trial: Trial) -> None:
    """Prints a line to stdout and one to stderr at every step (what `quanta logs` shows) and reports
    `accuracy` rising with the step; no torch compute."""
    import sys

    for step in trial.steps(config.get("steps")):
        print(f"chatty trial {trial.id} stdout step {step}", flush=True)
        print(f"chatty trial {trial.id} stderr step {step}", file=sys.stderr, flush=True)
        trial.report(accuracy=step / max(1, trial.max_steps))


def long_batches(config: dict, trial: Trial) -> None:
    """Mini-batches of `batch_s` seconds of computing each (a busy loop: a trial stays in the middle of
    one for long), after starting a process of its own (`sleep`, as a data loader worker would be).
    Writes "<its pid> <that process's pid>" to `<pid_dir>/trial-<id>-<pid>` before its first step."""
    helper = subprocess.Popen(["sleep", "600"])
    Path(config["pid_dir"], f"trial-{trial.id}-{os.getpid()}").write_text(f"{os.getpid()} {helper.pid}")
    for step in trial.steps():
        end = time.monotonic() + float(config["batch_s"])
        while time.monotonic() < end:
            pass
        trial.report(step=float(step))


def cores(config: dict, trial: Trial) -> None:
    """Mini-batches of `batch_s` seconds of busy computing; after each it reports `cores`, the cores its
    main thread may run on as a bit mask (bit c for core c)."""
    for _ in trial.steps(config.get("steps")):
        end = time.monotonic() + float(config["batch_s"])
        while time.monotonic() < end:
            pass
        trial.report(cores=float(sum(1 << c for c in os.sched_getaffinity(0))))


def mutable_sgd(config: dict, trial: Trial) -> None:
    """SGD with momentum and weight decay on `linear`'s data, deterministic in (seed, step). Reports the
    optimizer's `lr`, `momentum` and `weight_decay` as it computes with them (what a change of mutable
    parameters did to it), `config_lr` (what `trial.config` holds), `hook_calls` (how often its
    `on_config_change` hook ran) and `loss`, at every step. `scale_lr` scales the configured rate when
    the optimizer is built (a trainable that derives its rate from the configured one)."""
    torch.manual_seed(config.get("seed", 0))
    x, y = _data(config.get("data_seed", 0))
    model = torch.nn.Linear(x.shape[1], 1)
    opt = torch.optim.SGD(
        model.parameters(),
        lr=config["lr"] * config.get("scale_lr", 1.0),
        momentum=config.get("momentum", 0.0),
        weight_decay=config.get("weight_decay", 0.0),
    )
    calls: list[dict] = []
    trial.on_config_change(calls.append)
    trial.track(model=model, optimizer=opt)
    for step in trial.steps(config.get("steps")):
        g = torch.Generator().manual_seed(step)
        idx = torch.randint(0, x.shape[0], (32,), generator=g)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        group = opt.param_groups[0]
        trial.report(
            loss=loss.item(),
            lr=group["lr"],
            momentum=group["momentum"],
            weight_decay=group["weight_decay"],
            config_lr=trial.config["lr"],
            hook_calls=len(calls),
        )
        time.sleep(config.get("sleep_s", 0.0))
