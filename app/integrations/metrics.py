"""What both integrations report: the one-number values of a library's metrics mapping.

A report carries every finite scalar the library logged (validation accuracy, a latency or parameter
count the user logs beside it, losses, ...), so a search with several objectives and constraints gets
all of its values from each report. The names the search reads (`Trial.metrics`: its objectives and
constrained values) must all have been logged: a missing one is a KeyError naming it. A non-finite value
of one of those names is sent as it is when the search reads several (the search stores it as such and
ranks that report last); a single-objective search's objective is left out instead, as before (a
diverged run's report is the other metrics alone).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from quanta.sdk.trial import Trial


def _number(value: Any) -> float | None:
    """`value` as a float when it is one number (a tensor of one element, an int, a float), else None."""
    if torch.is_tensor(value):
        if value.numel() != 1:
            return None
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def scalar_metrics(metrics: dict[str, Any], skip: tuple[str, ...] = ()) -> dict[str, float]:
    """The finite one-number values of a metrics mapping (tensors of one element, ints, floats), less
    the names that end with one of `skip`."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if str(key).endswith(skip) and skip:
            continue
        number = _number(value)
        if number is not None and math.isfinite(number):
            out[str(key)] = number
    return out


def searched_names(trial: Trial, metric: str | None = None, metrics: Sequence[str] | None = None) -> tuple[str, ...]:
    """The names a callback checks for: `metrics` when given, else `metric` alone when given, else the
    search's (`trial.metrics`)."""
    if metrics is not None:
        if isinstance(metrics, str):
            raise TypeError(f"metrics={metrics!r}: expected a list of names, not one string (use metric=...)")
        return tuple(dict.fromkeys(str(m) for m in metrics))
    if metric is not None:
        return (metric,)
    return trial.metrics


def report_metrics(
    trial: Trial, names: Sequence[str], metrics: dict[str, Any], where: str, skip: tuple[str, ...] = ()
) -> None:
    """Report the finite scalars of `metrics` (less names ending with one of `skip`) in one report. Each
    of `names` (the search's objectives and constrained values) must be among the logged names, or a
    KeyError names the missing ones and what was logged. With several `names`, a non-finite value of one
    of them is reported as it is (see the module docstring); with one, it is left out."""
    missing = [n for n in names if n not in metrics]
    if missing:
        what = "metric" if len(names) == 1 else ("metric" if len(missing) == 1 else "metrics")
        raise KeyError(
            f"{where}: the search's {what} {', '.join(map(repr, missing))} "
            f"{'was' if len(missing) == 1 else 'were'} not logged; logged: {sorted(map(str, metrics)) or 'nothing'}"
        )
    scalars = scalar_metrics(metrics, skip)
    if len(names) > 1:
        for name in names:
            number = _number(metrics[name])
            if number is not None and not math.isfinite(number):
                scalars[name] = number
    if scalars:
        trial.report(**scalars)
