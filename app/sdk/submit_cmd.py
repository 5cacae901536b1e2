"""`quanta submit SPEC --url URL [--token T] [--wait]`: post a spec to a server with the SDK client.

Exit codes (for CI): 0 when the search reached its target (or, without --wait, when it was accepted);
3 when it ended without reaching it; 2 on bad input (unreadable spec, refused by the server); 1 when the
server cannot be reached or the wait timed out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

EXIT_REACHED, EXIT_UNAVAILABLE, EXIT_BAD_INPUT, EXIT_NOT_REACHED = 0, 1, 2, 3


def submit(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="search spec (.yaml or .json)")],
    url: Annotated[str, typer.Option(help="server URL", envvar="QUANTA_URL")] = "http://127.0.0.1:8000",
    token: Annotated[str | None, typer.Option(help="API token (default: QUANTA_TOKEN)", envvar="QUANTA_TOKEN")] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="wait until the search ends")] = False,
    timeout: Annotated[float | None, typer.Option(help="seconds to wait at most")] = None,
) -> None:
    """Submit a search to a Quanta server. With --wait, exit 0 only if the target was reached."""
    import httpx

    from app.sdk.client import ApiError, Client

    def fail(code: int, message: str) -> typer.Exit:
        typer.echo(f"error: {message}", err=True)
        return typer.Exit(code)

    if not spec_path.is_file():
        raise fail(EXIT_BAD_INPUT, f"{spec_path}: no such file")
    if not token:
        raise fail(EXIT_BAD_INPUT, "no token: pass --token or set QUANTA_TOKEN")
    try:
        with Client(url, token) as client:
            search = client.submit(spec_path)
            typer.echo(f"search {search.id} ({search.name}) {search.status}: {url}/?search={search.id}")
            if not wait:
                return
            search.wait(timeout=timeout, poll_s=1.0)
    except ApiError as exc:
        raise fail(EXIT_BAD_INPUT if 400 <= exc.status_code < 500 else EXIT_UNAVAILABLE, str(exc)) from None
    except httpx.HTTPError as exc:
        raise fail(EXIT_UNAVAILABLE, f"cannot reach {url}: {exc}") from None
    except TimeoutError as exc:
        raise fail(EXIT_UNAVAILABLE, str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(EXIT_BAD_INPUT, f"{spec_path}: {exc}") from None
    data = search.data
    typer.echo(
        json.dumps(
            {
                "id": search.id,
                "status": search.status,
                "reached": search.reached,
                "seconds_to_target": data.get("seconds_to_target"),
                "best": data.get("best"),
            },
            indent=2,
        )
    )
    raise typer.Exit(EXIT_REACHED if search.reached else EXIT_NOT_REACHED)
