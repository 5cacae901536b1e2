"""`quanta fork TRIAL [--set NAME=VALUE ...] [--steps N]`: start a new trial of a running service's search
from a trial's state (at its next mini-batch boundary if it runs, else its last checkpoint), with new
values for some of the search's mutable parameters, through the SDK client (`Client.fork`).

Waits until the controller has carried the request out (`--no-wait`: prints the request and returns).
Exit codes: 0 forked (or requested, with --no-wait); 2 bad input, a refusal (422: a parameter that is not
mutable; 409: the trial has no state to fork or its search is not running) or a fork that failed; 1 the
server cannot be reached, or the wait timed out."""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

import typer

from quanta.cli.output import EXIT_BAD_INPUT, EXIT_UNAVAILABLE, fail
from quanta.cli.remote import DEFAULT_URL, Token, Url, server_client

Sets = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="NAME=VALUE", help="a mutable parameter's new value (repeat for more): lr=0.001"),
]


def parse_set(items: list[str]) -> dict[str, Any]:
    """`["lr=0.001", "optimizer.momentum=0.8"]` -> `{"lr": 0.001, "optimizer.momentum": 0.8}`: each value a
    number (an integer when written as one). Raises `typer.Exit` (bad input) naming the item otherwise."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name, text = name.strip(), text.strip()
        if not sep or not name or not text:
            raise fail(f"--set {item!r}: expected NAME=VALUE, e.g. lr=0.001")
        try:
            value: Any = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise fail(f"--set {item!r}: {text!r} is not a number") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise fail(f"--set {item!r}: {text!r} is not a finite number")
        if name in out:
            raise fail(f"--set {item!r}: {name} is set twice")
        out[name] = value
    return out


def fork(
    trial_id: Annotated[int, typer.Argument(metavar="TRIAL", help="the trial to fork (its id)")],
    values: Sets = None,
    steps: Annotated[int | None, typer.Option(min=1, help="mini-batches to run beyond the fork's step")] = None,
    url: Url = DEFAULT_URL,
    token: Token = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="wait until the fork is carried out")] = True,
    timeout: Annotated[float, typer.Option(min=0.1, help="seconds to wait at most")] = 120.0,
    as_json: Annotated[bool, typer.Option("--json", help="print the fork request as JSON")] = False,
) -> None:
    """Fork a trial: a new trial of its search starts from its state with new values for mutable parameters."""
    changes = parse_set(values or [])
    with server_client(url, token) as client:
        try:
            out = client.fork(trial_id, changes, steps, wait=wait, timeout=timeout)
        except TimeoutError as exc:
            raise fail(str(exc), EXIT_UNAVAILABLE) from None
    if as_json:
        typer.echo(json.dumps(out, indent=2))
    shown = ", ".join(f"{k}={v}" for k, v in out["values"].items()) or "the same values"
    if out["status"] == "failed":
        raise fail(f"fork {out['id']} of trial {trial_id} failed: {out['error']}", EXIT_BAD_INPUT)
    if as_json:
        return
    if out["status"] == "done":
        typer.echo(
            f"trial {out['child_id']} forked from trial {trial_id} at step {out['fork_step']} ({shown}); "
            f"search {out['search_id']} schedules it"
        )
    else:
        typer.echo(f"fork {out['id']} of trial {trial_id} requested ({shown}): {out['status']}")
