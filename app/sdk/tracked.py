"""What Quanta does to a trial's tracked objects: move them between devices (`move`), check that a
state taken from elsewhere fits them before any is changed (`check_fits`) and load a state into them
(`restore_into`); and the process's resident memory (`rss_mb`), which a trial's profile reports."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["check_fits", "move", "restore_into", "rss_mb"]


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


def restore_into(obj: Any, state: Any, device: torch.device) -> None:
    """Load `state` (the object's part of a checkpoint read `mapped`: tensors backed by the file) into the
    tracked object `obj`, so that none of its tensors stays backed by the file afterwards: a module copies
    into its own tensors (`load_state_dict`); an optimizer's state tensors are copied into the ones it
    holds where they fit (shape, dtype; an adoption's case: no memory allocated anew) and copied anew where
    it holds none (a restart's); any other object gets copies of every tensor on `device` (the trial's, as
    a checkpoint read onto it would give). A failure part-way leaves `obj` part-changed: the caller ends
    the process without a checkpoint (`Trial._adopt`) or fails the start (a restart's restore)."""
    if isinstance(obj, torch.nn.Module):
        obj.load_state_dict(state)
    elif isinstance(obj, torch.optim.Optimizer):
        obj.load_state_dict(_into_optimizer_state(obj, state))
    else:
        obj.load_state_dict(_copied(state, device))


def _into_optimizer_state(opt: torch.optim.Optimizer, saved: Mapping[str, Any]) -> dict[str, Any]:
    """`saved` (an optimizer's state dict) with each per-parameter tensor replaced by the tensor `opt`
    holds in its place, after copying the saved values into it; a tensor without a counterpart of the
    same shape and dtype is copied anew. `load_state_dict` then keeps the tensors given (it casts
    only where dtype or device differ, which copies too)."""
    mine = opt.state_dict()["state"]  # the live per-parameter tensors, keyed as in `saved`
    state: dict[Any, dict[str, Any]] = {}
    for key, theirs in saved["state"].items():
        held = mine.get(key, {})
        state[key] = {}
        for name, value in theirs.items():
            own = held.get(name)
            tensors = torch.is_tensor(value) and torch.is_tensor(own)
            if tensors and own.shape == value.shape and own.dtype == value.dtype:
                own.copy_(value)
                state[key][name] = own
            else:
                state[key][name] = _copied(value)
    return {**saved, "state": state, "param_groups": _copied(saved["param_groups"])}


def _copied(value: Any, device: torch.device | None = None) -> Any:
    """`value` with every tensor in it (in dicts, lists and tuples) replaced by a copy of its own (on
    `device`, or where it is)."""
    if torch.is_tensor(value):
        return value.to(device, copy=True) if device is not None else value.clone()
    if isinstance(value, Mapping):
        return {k: _copied(v, device) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = [_copied(v, device) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)  # namedtuples too
    return value
