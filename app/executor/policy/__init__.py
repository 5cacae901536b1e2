"""Scheduling policies: pure `plan(snapshot) -> Plan` functions, chosen by name and built from their
knob model (`app.executor.policy.knobs`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.executor.policy.knobs import KNOBS, PolicyKnobs, knobs_for
from app.executor.policy.types import ClusterSnapshot, Plan, Policy

_REGISTRY: dict[str, Callable[[Any], Policy]] = {}


def register(name: str, factory: Callable[[Any], Policy]) -> None:
    """Make `factory(knobs)` the builder of policy `name`; its knobs are `KNOBS[name]`."""
    if name not in KNOBS:
        raise KeyError(f"policy '{name}' has no knob model in app.executor.policy.knobs")
    _REGISTRY[name] = factory


def policy_for(knobs: PolicyKnobs) -> Policy:
    """The policy a spec's `scheduler` block names, configured with that block."""
    _load_builtin()
    return _REGISTRY[knobs.policy](knobs)


def make_policy(name: str, **knobs: Any) -> Policy:
    """The policy called `name` with these knobs (the rest default). Raises KeyError for an unknown
    policy and ValueError for a knob the policy does not have or a bad value."""
    return policy_for(knobs_for(name, **knobs))


def policy_names() -> list[str]:
    return sorted(KNOBS)


def _load_builtin() -> None:
    if _REGISTRY:
        return
    from app.executor.policy.asha import AshaPolicy
    from app.executor.policy.fifo import FifoPolicy
    from app.executor.policy.gandiva import GandivaPolicy
    from app.executor.policy.timeslice import TimeslicePolicy
    from app.executor.policy.tiresias import TiresiasPolicy

    register("fifo", lambda _: FifoPolicy())
    register("timeslice", lambda _: TimeslicePolicy())
    register("gandiva", GandivaPolicy)
    register("tiresias", TiresiasPolicy)
    register("asha", AshaPolicy)
    register("hyperband", AshaPolicy)


__all__ = ["ClusterSnapshot", "Plan", "Policy", "make_policy", "policy_for", "policy_names", "register"]
