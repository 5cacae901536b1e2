"""What both integrations report: the finite one-number values of a library's metrics mapping."""

from __future__ import annotations

import math
from typing import Any

import torch

from quanta.sdk.trial import Trial


def scalar_metrics(metrics: dict[str, Any], skip: tuple[str, ...] = ()) -> dict[str, float]:
    """The finite one-number values of a metrics mapping (tensors of one element, ints, floats), less
    the names that end with one of `skip`."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if str(key).endswith(skip) and skip:
            continue
        if torch.is_tensor(value):
            if value.numel() != 1:
                continue
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(float(value)):
            out[str(key)] = float(value)
    return out


def report_metrics(
    trial: Trial, metric: str | None, metrics: dict[str, Any], where: str, skip: tuple[str, ...] = ()
) -> None:
    """Report the finite scalars of `metrics` (less names ending with one of `skip`); the objective
    `metric` (when known) must be among the logged names, or a KeyError names it and what was logged.
    A non-finite objective (a diverged run) is left out of the report rather than sent as NaN."""
    scalars = scalar_metrics(metrics, skip)
    if metric is not None and metric not in metrics:
        raise KeyError(
            f"{where}: the search's metric {metric!r} was not logged; logged: {sorted(map(str, metrics)) or 'nothing'}"
        )
    if scalars:
        trial.report(**scalars)
