"""Scheduling policies: pure `plan(snapshot) -> Plan` functions, chosen by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.executor.policy.types import ClusterSnapshot, Plan, Policy

_REGISTRY: dict[str, Callable[..., Policy]] = {}


def register(name: str, factory: Callable[..., Policy]) -> None:
    _REGISTRY[name] = factory


def make_policy(name: str, **knobs: Any) -> Policy:
    """The policy called `name`, configured with the spec's scheduler knobs it understands."""
    _load_builtin()
    if name not in _REGISTRY:
        raise KeyError(f"unknown policy '{name}' (known: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[name](**knobs)


def policy_names() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def _load_builtin() -> None:
    if _REGISTRY:
        return
    from app.executor.policy.fifo import FifoPolicy
    from app.executor.policy.gandiva import GandivaPolicy
    from app.executor.policy.timeslice import TimeslicePolicy
    from app.executor.policy.tiresias import TiresiasPolicy

    register("fifo", lambda **_: FifoPolicy())
    register("timeslice", lambda **_: TimeslicePolicy())
    register("gandiva", lambda **k: GandivaPolicy.from_knobs(**k))
    register("tiresias", lambda **k: TiresiasPolicy(**k))


__all__ = ["ClusterSnapshot", "Plan", "Policy", "make_policy", "policy_names", "register"]
