"""The commands that talk to a running service through the SDK client (`--url`, default $QUANTA_URL or
http://127.0.0.1:8000; token from --token or $QUANTA_TOKEN):

    quanta submit SPEC [--wait]  post a spec; with --wait, wait until the search ends
    quanta status [SEARCH]       the searches (newest first), or one search with its trials
    quanta logs TRIAL            the trial's stdout and stderr as the service keeps them
    quanta stop SEARCH           stop a search (its running trials are stopped)

Exit codes (for CI): 0 done (`submit --wait`: the target was reached, or the search had none and spent
its budget); 3 (`submit --wait`) the search ended without reaching its target; 4 (`submit --wait`) the
search failed; 2 bad input (no token, an unreadable spec, an unknown id, a refused request); 1 the server
cannot be reached, or the wait timed out."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from quanta.cli.output import EXIT_BAD_INPUT, EXIT_UNAVAILABLE, fail, search_exit_code
from quanta.status import SEARCH_ACTIVE, TrialCounts, count_trials

Url = Annotated[str, typer.Option(help="server URL", envvar="QUANTA_URL")]
Token = Annotated[str | None, typer.Option(help="API token (default: QUANTA_TOKEN)", envvar="QUANTA_TOKEN")]
DEFAULT_URL = "http://127.0.0.1:8000"


@contextmanager
def server_client(url: str, token: str | None) -> Iterator[Any]:
    """The SDK client, with the server's answers turned into CLI errors: a refusal (4xx) or what the
    server cannot do (501: a format whose library it lacks) is bad input; no answer or any other error
    means the server is unavailable."""
    import httpx

    from quanta.sdk.client import ApiError, Client

    if not token:
        raise fail("no token: pass --token or set QUANTA_TOKEN")
    try:
        with Client(url, token) as client:
            yield client
    except ApiError as exc:
        refused = 400 <= exc.status_code < 500 or exc.status_code == 501
        raise fail(str(exc), EXIT_BAD_INPUT if refused else EXIT_UNAVAILABLE) from None
    except httpx.HTTPError as exc:
        raise fail(f"cannot reach {url}: {exc}", EXIT_UNAVAILABLE) from None


def submit(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="search spec (.yaml or .json)")],
    url: Url = DEFAULT_URL,
    token: Token = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="wait until the search ends")] = False,
    timeout: Annotated[float | None, typer.Option(help="seconds to wait at most")] = None,
) -> None:
    """Submit a search to a Quanta server.

    With --wait, exit codes: 0 target reached (or no target, and the budget
    spent); 3 target not reached; 4 the search failed."""
    if not spec_path.is_file():
        raise fail(f"{spec_path}: no such file")
    with server_client(url, token) as client:
        try:
            search = client.submit(spec_path)
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(f"{spec_path}: {exc}") from None
        typer.echo(f"search {search.id} ({search.name}) {search.status}: {search.dashboard_url}")
        if not wait:
            return
        try:
            search.wait(timeout=timeout, poll_s=1.0)
        except TimeoutError as exc:
            raise fail(str(exc), EXIT_UNAVAILABLE) from None
    data = search.data
    summary = {
        "id": search.id,
        "status": search.status,
        "reached": search.reached,
        "seconds_to_target": data.get("seconds_to_target"),
        "best": data.get("best"),
        "error": data.get("error"),
        "warning": data.get("warning"),
        "trials": (data.get("progress") or {}).get("trials"),
    }
    typer.echo(json.dumps(summary, indent=2))
    target = (data.get("metric") or {}).get("target")
    raise typer.Exit(search_exit_code(search.status, search.reached, target))


def _num(v: Any) -> str:
    return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


def _flatten(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in params.items():
        out.update(_flatten(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_num(v)}" for k, v in _flatten(params).items())


def _print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for c in columns:
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(*r)
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # logs and pipes: do not wrap at 80 columns
    console.print(table)


def _counts(progress: dict[str, Any]) -> TrialCounts | None:
    """How a search's trials stand, as the server sent it (None: it has not stored that yet)."""
    trials = progress.get("trials")
    return TrialCounts.from_dict(trials) if isinstance(trials, dict) else None


def _evaluated(progress: dict[str, Any]) -> int:
    """Trials ended or judged at a rung (what progress counts; `TrialCounts`), else those ended."""
    counts = _counts(progress)
    return counts.evaluated if counts is not None else int(progress.get("trials_done") or 0)


def _shown_status(trial: dict[str, Any], parked: set[int]) -> str:
    """A trial's status as `quanta status` shows it: `parked` for a running trial parked on its device."""
    return "parked" if trial["status"] == "running" and trial["id"] in parked else str(trial["status"])


def status(
    search_id: Annotated[int | None, typer.Argument(metavar="[SEARCH]", help="a search id (default: all)")] = None,
    url: Url = DEFAULT_URL,
    token: Token = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the server's JSON instead of a table")] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="searches listed at most")] = 20,
) -> None:
    """Show the searches of a running service, or one search with its trials."""
    with server_client(url, token) as client:
        if search_id is None:
            searches = client.searches(limit=limit)
            if as_json:
                typer.echo(json.dumps([s.data for s in searches], indent=2))
                return
            rows = []
            for s in searches:
                d = s.data
                progress = d.get("progress") or {}
                best = (d.get("best") or {}).get("metric")
                counts = _counts(progress)
                rows.append(
                    [
                        str(s.id),
                        s.name,
                        s.status,
                        _num(best),
                        f"{_evaluated(progress)}/{progress.get('max_trials', '?')}",
                        counts.text() if counts is not None else "",
                    ]
                )
            _print_table(f"searches at {url}", ["id", "name", "status", "best", "progress", "trials"], rows)
            return
        search = client.search(search_id)
        trials = search.trials(frame=False)
        if as_json:
            typer.echo(json.dumps({"search": search.data, "trials": trials}, indent=2))
            return
        d = search.data
        metric = d.get("metric") or {}
        best = d.get("best") or {}
        # Trials parked on a device (between quanta, or held at a rung) are `running` in their rows: the
        # controller's published view of the devices tells them apart.
        parked: set[int] = set()
        if search.status in SEARCH_ACTIVE:
            parked = {tid for dev in client.cluster().get("devices", []) for tid in dev.get("parked", [])}
        typer.echo(f"search {search.id} ({search.name}): {search.status}")
        if d.get("error"):
            typer.echo(f"  error: {d['error']}")
        if d.get("warning"):
            typer.echo(f"  warning: {d['warning']}")
        typer.echo(f"  best {metric.get('name')} = {_num(best.get('metric'))} (trial {best.get('trial_id', '-')})")
        target = metric.get("target")
        if target is not None:
            reached = f"reached after {d['seconds_to_target']:.1f} s" if d.get("reached") else "not reached"
            typer.echo(f"  target {target} ({metric.get('goal')}): {reached}")
        shown = [_shown_status(t, parked) for t in trials]
        counts = count_trials((st, st != "queued", st == "running", False) for st in shown)
        typer.echo(f"  trials: {counts.text()}")
        rows = [
            [str(t["id"]), st, _num(t["metric"]), _num(t["best_metric"]), str(t["steps"]),
             _num(t["device_seconds"]), _params(t["params"]), t.get("reason") or t.get("error") or ""]
            for t, st in zip(trials, shown, strict=True)
        ]  # fmt: skip
        _print_table(
            f"trials of search {search.id}",
            ["id", "status", "metric", "best", "steps", "device s", "params", "why it ended"],
            rows,
        )


def logs(
    trial_id: Annotated[int, typer.Argument(metavar="TRIAL", help="a trial id")],
    url: Url = DEFAULT_URL,
    token: Token = None,
    tail: Annotated[int, typer.Option(min=1, help="bytes from the end at most")] = 64 * 1024,
) -> None:
    """Print a trial's stdout and stderr (the last --tail bytes) as the service keeps them."""
    with server_client(url, token) as client:
        text = client.logs(trial_id, tail=tail)
    sys.stdout.write(text)


def stop(
    search_id: Annotated[int, typer.Argument(metavar="SEARCH", help="a search id")],
    url: Url = DEFAULT_URL,
    token: Token = None,
) -> None:
    """Stop a search: its running trials are stopped at the controller's next tick."""
    with server_client(url, token) as client:
        search = client.search(search_id).stop()
    typer.echo(f"search {search.id} ({search.name}): stop requested ({search.status})")


COMMANDS: dict[str, Callable[..., None]] = {"status": status, "logs": logs, "stop": stop}
