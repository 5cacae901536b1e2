"""Trainables for the multi-node tests. `guarded` audits itself: it holds an exclusive lock on a file per
trial while it runs (a second copy running at the same time leaves a DOUBLE-* marker), and logs every
start (with the step it resumed at) and every report (with a random nonce also sent as a metric), so a
test can check that no report was lost or stored twice."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

import torch

from quanta.sdk import Trial


def _nonce() -> float:
    return float(int.from_bytes(os.urandom(6), "big"))  # exact as a float; independent of restored RNGs


def guarded(config: dict, trial: Trial) -> None:
    audit = Path(config["audit_dir"])
    audit.mkdir(parents=True, exist_ok=True)
    lock = open(audit / f"trial-{trial.id}.lock", "a")  # noqa: SIM115 (held until the process ends)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        (audit / f"DOUBLE-{trial.id}-{os.getpid()}").touch()
    torch.manual_seed(int(config.get("seed", 0)))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 16, generator=g)
    y = (x @ torch.randn(16, 1, generator=g) > 0).float()
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.Adam(model.parameters(), lr=float(config.get("lr", 0.01)))
    trial.track(model=model, optimizer=opt)
    log = open(audit / f"trial-{trial.id}.jsonl", "a")  # noqa: SIM115
    log.write(json.dumps({"event": "start", "step": trial.step, "pid": os.getpid(), "at": time.time()}) + "\n")
    log.flush()
    sleep = float(config.get("sleep_s", 0.0))
    every = int(config.get("report_every", 10))
    last = trial.max_steps - 1
    for step in trial.steps():
        idx = torch.randint(0, 256, (32,), generator=torch.Generator().manual_seed(step))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sleep:
            time.sleep(sleep)
        if step % every == 0 or step == last:
            with torch.no_grad():
                acc = ((model(x) > 0).float() == y).float().mean().item()
            nonce = _nonce()
            trial.report(accuracy=acc, nonce=nonce)
            log.write(json.dumps({"event": "report", "step": step, "nonce": nonce}) + "\n")
            log.flush()
