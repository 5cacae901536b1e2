"""The share layer's knobs as command options: `quanta serve` and `quanta controller` take them (each
also from a `QUANTA_*` environment variable) and check them before anything starts.

- `--share-window-s` (QUANTA_SHARE_WINDOW_S), `--favour-worst-rho` (QUANTA_SHARE_FAVOUR_WORST_RHO),
  `--rho-cap` (QUANTA_SHARE_RHO_CAP), `--rho-bound` (QUANTA_SHARE_RHO_BOUND):
  `quanta.executor.policy.share.ShareKnobs`, validated by it.
- `--weight NAME=W`, repeatable (QUANTA_USER_WEIGHTS, space-separated): users' weights, written to the
  users' rows at start (the admin API, `PATCH /users/NAME`, may change them later), each in the range
  `PATCH /users` accepts. Every name must be a user; nothing is written unless all are valid.

A bad value raises `ShareOptionError`, whose message names the option (and the user).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated

import typer

from quanta.cli.output import fail

if TYPE_CHECKING:  # imported where used: `quanta --help` stays fast
    from quanta.db.users import UserQueries
    from quanta.executor.policy.knobs import ShareKnobs

WindowOption = Annotated[
    float | None,
    typer.Option(
        "--share-window-s",
        help="time constant (s) of the share layer's device-time accounts, rho's window [default: 3600]",
        envvar="QUANTA_SHARE_WINDOW_S",
        show_default=False,
    ),
]
FavourOption = Annotated[
    bool,
    typer.Option(
        "--favour-worst-rho/--no-favour-worst-rho",
        help="weigh users by their rho, so those furthest behind their fair share catch up first (Themis)",
        envvar="QUANTA_SHARE_FAVOUR_WORST_RHO",
    ),
]
RhoCapOption = Annotated[
    float | None,
    typer.Option(
        "--rho-cap",
        help="largest weight multiplier --favour-worst-rho gives, >= 1 [default: 4]",
        envvar="QUANTA_SHARE_RHO_CAP",
        show_default=False,
    ),
]
RhoBoundOption = Annotated[
    float | None,
    typer.Option(
        "--rho-bound",
        help="guarantee fair shares only to users whose rho exceeds this (>= 1); divide the rest of the "
        "cluster by demand (Themis's fairness knob) [default: every user's share guaranteed]",
        envvar="QUANTA_SHARE_RHO_BOUND",
        show_default=False,
    ),
]
WeightsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--weight",
        metavar="NAME=W",
        help="a user's share weight (0 < W <= 1000), written to the user at start; repeatable "
        "(QUANTA_USER_WEIGHTS: space-separated)",
        envvar="QUANTA_USER_WEIGHTS",
    ),
]

_OPTION = {
    "window_s": "--share-window-s",
    "favour_worst_rho": "--favour-worst-rho",
    "rho_cap": "--rho-cap",
    "rho_bound": "--rho-bound",
}


class ShareOptionError(ValueError):
    """A share option out of range or malformed; the message names the option."""


def share_knobs(
    window_s: float | None, favour_worst_rho: bool, rho_cap: float | None, rho_bound: float | None = None
) -> ShareKnobs:
    """The knobs (None: `ShareKnobs`'s default), validated by `ShareKnobs` (`ShareOptionError` naming the
    option and the field)."""
    from pydantic import ValidationError

    from quanta.executor.policy.knobs import ShareKnobs

    given: dict[str, float | bool] = {"favour_worst_rho": favour_worst_rho}
    if window_s is not None:
        given["window_s"] = window_s if math.isfinite(window_s) else -1.0  # no window: refused as out of range
    if rho_cap is not None:
        given["rho_cap"] = rho_cap if math.isfinite(rho_cap) else 0.0
    if rho_bound is not None:
        given["rho_bound"] = rho_bound if math.isfinite(rho_bound) else 0.0
    try:
        return ShareKnobs.model_validate(given)
    except ValidationError as exc:
        raise ShareOptionError(
            "; ".join(
                f"{_OPTION.get(str(e['loc'][0]), str(e['loc'][0]))} (share knob {e['loc'][0]}): {e['msg']}"
                for e in exc.errors()
            )
        ) from None


def share_options(
    window_s: float | None,
    favour_worst_rho: bool,
    rho_cap: float | None,
    weight: Iterable[str] | None,
    rho_bound: float | None = None,
) -> tuple[ShareKnobs, dict[str, float]]:
    """The share knobs and user weights a command was started with, checked before anything starts
    (`share_knobs`, `parse_weights`): a bad option prints an error naming it and exits with code 2."""
    try:
        return share_knobs(window_s, favour_worst_rho, rho_cap, rho_bound), parse_weights(weight or [])
    except ShareOptionError as exc:
        raise fail(str(exc)) from None


def parse_weights(items: Iterable[str]) -> dict[str, float]:
    """`NAME=W` items as {name: weight}; `ShareOptionError` naming the item for a malformed one or a
    weight outside the range the users' rows take (0, MAX_WEIGHT]."""
    from quanta.db.public.users import MAX_WEIGHT

    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ShareOptionError(f"--weight {item!r}: expected NAME=W")
        try:
            weight = float(value)
        except ValueError:
            raise ShareOptionError(f"--weight {name}: weight {value!r} is not a number") from None
        if not (math.isfinite(weight) and 0 < weight <= MAX_WEIGHT):
            raise ShareOptionError(f"--weight {name}: weight must be > 0 and <= {MAX_WEIGHT:g}, not {value}")
        out[name] = weight
    return out


def apply_weights(store: UserQueries, weights: dict[str, float]) -> None:
    """Write `weights` to the users' rows; `ShareOptionError` naming the unknown users, before any
    write, when some are not users."""
    unknown = sorted(n for n in weights if store.user(n) is None)
    if unknown:
        raise ShareOptionError(f"--weight: no such user: {', '.join(unknown)} (add with `quanta users add`)")
    for name, weight in weights.items():
        store.update_user(name, weight=weight)
