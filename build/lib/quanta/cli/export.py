"""`quanta export SEARCH --format csv|json|parquet [--output PATH] [--db URL | --url URL]`: a search's
trials as a file, one row per trial (`quanta.db.export`), read from a database or from a running server.

The file is written whole or not at all (a temporary file renamed into place); `--output -` writes csv
or json to standard output. Exit codes: 0 written; 2 bad input (no such search, a format whose library
is missing, a refused token); 1 the server cannot be reached."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from quanta.cli.output import fail, write_atomic
from quanta.cli.remote import server_client


class ExportFormat(StrEnum):
    csv = "csv"
    json = "json"
    parquet = "parquet"


def _from_db(db: str, search_id: int, fmt: str) -> bytes:
    from quanta.db.export import ExportError, render, trial_table
    from quanta.db.store import Store

    if db.startswith("sqlite:///") and not Path(db.removeprefix("sqlite:///")).is_file():
        raise fail(f"no database at {db}")  # (opening it would create an empty one)
    table = trial_table(Store(db), search_id)
    if table is None:
        raise fail(f"search {search_id} not found in {db}")
    try:
        return render(table, fmt)  # type: ignore[arg-type]  # one of ExportFormat's values
    except ExportError as exc:
        raise fail(str(exc)) from None


def _from_server(url: str, token: str | None, search_id: int, fmt: str) -> bytes:
    with server_client(url, token) as client:
        data: bytes = client.search(search_id).export(fmt)
    return data


def export(
    search_id: Annotated[int, typer.Argument(metavar="SEARCH", help="search id")],
    format: Annotated[ExportFormat, typer.Option("--format", "-f", help="csv, json or parquet")] = ExportFormat.csv,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="file to write (default search-ID.FORMAT; - = stdout)")
    ] = None,
    db: Annotated[str | None, typer.Option(help="read this database (default: sqlite:///quanta.db)")] = None,
    url: Annotated[str | None, typer.Option(help="read from this server instead", envvar="QUANTA_URL")] = None,
    token: Annotated[str | None, typer.Option(help="API token (default: QUANTA_TOKEN)", envvar="QUANTA_TOKEN")] = None,
) -> None:
    """Export a search's trials: one row per trial with its flattened params, status, final and best
    metric, steps and device seconds. A search without trials gives a header and no rows."""
    fmt = format.value
    if db and url:
        raise fail("give --db or --url, not both")
    if output == "-" and fmt == "parquet":
        raise fail("parquet is binary: give --output FILE")
    data = _from_server(url, token, search_id, fmt) if url else _from_db(db or "sqlite:///quanta.db", search_id, fmt)
    if output == "-":
        sys.stdout.write(data.decode())
        return
    path = Path(output or f"search-{search_id}.{fmt}")
    try:
        write_atomic(path, data)
    except OSError as exc:
        raise fail(f"cannot write {path}: {exc.strerror}") from None
    typer.echo(f"search {search_id}: {path} ({fmt}, {len(data)} bytes)", err=True)
