"""How a spec's problems are told: `SpecError` lists each bad field by its dotted path with the reason,
and `field_path` writes a validation error's location as users write the field."""

from __future__ import annotations

from typing import Any

from quanta.executor.policy.knobs import KNOBS


class SpecError(ValueError):
    """A spec failed validation. `errors` is a list of (field path, reason)."""

    def __init__(self, errors: list[tuple[str, str]], source: str | None = None):
        self.errors = errors
        self.source = source
        where = f"{source}: " if source else ""
        lines = "; ".join(f"{path}: {reason}" for path, reason in errors)
        super().__init__(f"{where}invalid spec: {lines}")


def field_path(loc: tuple[Any, ...], kind: str = "") -> str:
    """A pydantic error location as the dotted field path users write (``budget.max_steps``,
    ``space.optimizer.choice[0]``; ``spec`` for the whole document)."""
    # The scheduler union puts the policy name into the path (``scheduler.gandiva.top_m``): a user
    # wrote ``scheduler.top_m``. An unknown or missing policy is an error of ``scheduler.policy``.
    if len(loc) >= 2 and loc[0] == "scheduler" and loc[1] in KNOBS:
        loc = (loc[0], *loc[2:])
    if kind.startswith("union_tag") and loc == ("scheduler",):
        loc = ("scheduler", "policy")
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "spec"
