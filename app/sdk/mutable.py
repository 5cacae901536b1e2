"""How a trial's configuration changes at a boundary: dotted names in a nested configuration, and the
optimizer hyperparameters a tracked optimizer follows by itself (`follow_optimizers`). Pure functions of
their arguments (they change only the objects given)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

# Setting a dotted name is the search space's own rule (nested spaces are nested mappings).
from quanta.search.space import set_dotted as set_value

__all__ = ["OPTIMIZER_KEYS", "ConfigHook", "follow", "follow_optimizers", "get_value", "set_value"]

# The optimizer hyperparameters a tracked optimizer follows by itself when a mutable parameter of that
# (top-level) name changes.
OPTIMIZER_KEYS = ("lr", "momentum", "weight_decay")

ConfigHook = Callable[[dict[str, Any]], None]


def get_value(config: Mapping[str, Any], name: str) -> Any:
    """The value of dotted `name` in a nested configuration (None when absent)."""
    node: Any = config
    for part in name.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def follow(value: Any, old: Any, new: Any) -> Any:
    """An optimizer's hyperparameter after its configured value went from `old` to `new`: `new` where
    it still held `old` (or `old` was 0 or unknown), else scaled by new/old (a schedule, or a trainable
    that derived it from the configured value, keeps its shape)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return value
    if not isinstance(old, int | float) or old == 0 or value == old or not math.isfinite(value):
        return new
    return value * (new / old)


def follow_optimizers(objects: Sequence[Any], changes: Mapping[str, tuple[Any, Any]]) -> None:
    """Apply changed `OPTIMIZER_KEYS` ((old, new) per name) to tracked optimizers' parameter groups and
    to tracked LR schedulers' base rates."""
    keys = {k: v for k, v in changes.items() if k in OPTIMIZER_KEYS and isinstance(v[1], int | float)}
    if not keys:
        return
    for obj in objects:
        if isinstance(obj, torch.optim.Optimizer):
            for group in obj.param_groups:
                for key, (old, new) in keys.items():
                    if key in group:
                        group[key] = follow(group[key], old, new)
                if "lr" in keys and "initial_lr" in group:  # where a scheduler starts from
                    group["initial_lr"] = follow(group["initial_lr"], *keys["lr"])
        elif "lr" in keys and isinstance(getattr(obj, "base_lrs", None), list):  # an LR scheduler
            obj.base_lrs = [follow(b, *keys["lr"]) for b in obj.base_lrs]
