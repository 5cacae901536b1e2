"""Scheduling policies: pure `plan(snapshot) -> Plan` functions, each built the same way, from its knob
model (`quanta.executor.policy.knobs`): `PolicyClass(knobs)`, or `policy_for(knobs)` for a spec's
`scheduler` block.

The names are declared once, by the knob models (`KNOBS`, derived from the `PolicyKnobs` union); a knob
model is served by the policy class whose `Knobs` it is or extends (`HyperbandKnobs` extends
`AshaKnobs`: `AshaPolicy` plans Hyperband). The policy modules are imported on first use, so that the
spec can read the knobs without them (and without numpy).
"""

from __future__ import annotations

import functools
from typing import Any

from quanta.executor.policy.knobs import KNOBS, PolicyKnobs, knobs_for
from quanta.executor.policy.types import ClusterSnapshot, Plan, Policy


def _policy_classes() -> tuple[Any, ...]:
    """Every policy class (each has `Knobs`, its knob model, and is built as `cls(knobs)`)."""
    from quanta.executor.policy.asha import AshaPolicy
    from quanta.executor.policy.fifo import FifoPolicy
    from quanta.executor.policy.freeze_thaw import FreezeThawPolicy
    from quanta.executor.policy.gandiva import GandivaPolicy
    from quanta.executor.policy.pbt import PbtPolicy
    from quanta.executor.policy.timeslice import TimeslicePolicy
    from quanta.executor.policy.tiresias import TiresiasPolicy

    return (FifoPolicy, TimeslicePolicy, GandivaPolicy, TiresiasPolicy, AshaPolicy, FreezeThawPolicy, PbtPolicy)


@functools.cache
def registry() -> dict[str, Any]:
    """Policy name -> the class that plans it, for every member of the knob union (a member no class
    serves is an error here, at the first policy built, not when a search names it)."""
    by_model = {cls.Knobs: cls for cls in _policy_classes()}
    out: dict[str, Any] = {}
    for name, model in KNOBS.items():
        served = [by_model[base] for base in model.__mro__ if base in by_model]
        if not served:
            raise TypeError(f"no policy class serves {model.__name__} (policy '{name}')")
        out[name] = served[0]
    return out


def policy_for(knobs: PolicyKnobs) -> Policy:
    """The policy a spec's `scheduler` block names, configured with that block."""
    policy: Policy = registry()[knobs.policy](knobs)
    return policy


def make_policy(name: str, **knobs: Any) -> Policy:
    """The policy called `name` with these knobs (the rest default). Raises KeyError for an unknown
    policy and ValueError for a knob the policy does not have or a bad value."""
    return policy_for(knobs_for(name, **knobs))


def policy_names() -> list[str]:
    return sorted(KNOBS)


__all__ = ["ClusterSnapshot", "Plan", "Policy", "make_policy", "policy_for", "policy_names", "registry"]
