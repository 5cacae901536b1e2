"""What Quanta does to a trial's tracked objects: move them between devices (`move`), and check that a
state taken from elsewhere fits them before any is changed (`check_fits`); and the process's resident
memory (`rss_mb`), which a trial's profile reports."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["check_fits", "move", "rss_mb"]


def rss_mb() -> float:
    """This process's resident memory in MB (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0


def move(obj: Any, device: torch.device) -> None:
    """Move a tracked object's tensors to `device` in place (modules and optimizers); any other object
    with a `move_to(device)` method is asked to follow (a training library's own idea of the device)."""
    if isinstance(obj, torch.nn.Module):
        obj.to(device)
    elif isinstance(obj, torch.optim.Optimizer):
        for state in obj.state.values():
            for key, value in state.items():
                # Adam's `step` counter stays on the CPU by design unless capturable.
                if torch.is_tensor(value) and not (key == "step" and value.dim() == 0):
                    state[key] = value.to(device, non_blocking=False)
    elif callable(getattr(obj, "move_to", None)):
        obj.move_to(device)


def check_fits(tracked: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    """ValueError when `payload`'s state does not fit the `tracked` objects (a module's tensors by name
    and shape, an optimizer's parameter groups by size): found before any of them is changed."""
    state = payload.get("state")
    if not isinstance(state, Mapping) or "step" not in payload or "rng" not in payload:
        raise ValueError("not a trial state")
    for name, obj in tracked.items():
        theirs = state.get(name)
        if theirs is None:
            continue
        if isinstance(obj, torch.nn.Module):
            mine = {k: tuple(v.shape) for k, v in obj.state_dict().items()}
            other = {k: tuple(v.shape) for k, v in theirs.items() if torch.is_tensor(v)}
            if mine != other:
                diff = sorted(set(mine.items()) ^ set(other.items()))[:3]
                raise ValueError(f"tracked module {name!r} differs from the state: {diff}")
        elif isinstance(obj, torch.optim.Optimizer):
            sizes = [len(g["params"]) for g in obj.param_groups]
            if sizes != [len(g["params"]) for g in theirs.get("param_groups", [])]:
                raise ValueError(f"tracked optimizer {name!r} has other parameter groups than the state")
