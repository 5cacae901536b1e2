"""One workdir per database: the folder that holds a database's checkpoints, trial logs and report spools.

Searches are numbered per database, and their files go to `<workdir>/search-<id>/`, so two databases
sharing a workdir would write each other's `search-1/`. Two rules keep them apart:

- `quanta run` (and `quanta.sdk.run`) without `--workdir` use a folder of the database's own under
  `.quanta/`: `.quanta/<name>-<hash>/`, the database's file name (or name on its server) and a short hash
  of where it is (`database_key`). Running one spec against `a.db` and then `b.db` in one folder just works.
- A workdir named explicitly is used as given, and claimed: a file `DATABASE` in it names the database
  it belongs to (`claim_workdir`), and a command started on another database with the same workdir is
  refused, naming both, before it stores or writes anything.

Ground floor: imports nothing from `quanta` but its URL parser (`quanta.db.url`).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from quanta.db.url import sqlite_file

DEFAULT_ROOT = Path(".quanta")
MARKER = "DATABASE"


class WorkdirTaken(ValueError):
    """The workdir holds another database's checkpoints and logs."""


def _sqlite_file(url: str) -> str | None:
    """The absolute path of a SQLite URL's database file; "" for an in-memory database; None when `url`
    is not SQLite."""
    path = sqlite_file(url)
    return os.path.realpath(path) if path else path  # relative paths: to the working directory, as SQLite's


def database_identity(url: str) -> str:
    """Where the database is, without its password: `sqlite:////abs/path/q.db` for a SQLite file (a
    relative path resolved against the working directory), the URL less its password otherwise."""
    file = _sqlite_file(url)
    if file is not None:
        return f"sqlite:///{file}" if file else "sqlite://:memory:"
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def database_key(url: str) -> str:
    """A folder name for the database's own workdir: its file's stem (or its name on the server) and 8
    hex digits of a hash of `database_identity`, e.g. `quanta-3f2a91c0`. An in-memory database (private
    to its process, so new each time) gets a random one."""
    file = _sqlite_file(url)
    if file == "":
        return f"memory-{secrets.token_hex(4)}"
    identity = database_identity(url)
    name = Path(file).stem if file else (urlsplit(url).path.strip("/").rpartition("/")[2] or urlsplit(url).hostname)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", name or "db")[:40].strip("._") or "db"
    return f"{name}-{hashlib.sha256(identity.encode()).hexdigest()[:8]}"


def workdir_for(db_url: str, workdir: str | Path | None, root: Path = DEFAULT_ROOT) -> Path:
    """The workdir a command on `db_url` uses: `workdir` as given, or (None) `root/<database_key>`."""
    return Path(workdir) if workdir is not None else root / database_key(db_url)


def claim_workdir(workdir: str | Path, db_url: str, *, write: bool = True) -> None:
    """Make `workdir` the database's, or raise `WorkdirTaken` when it is another database's. The first
    claim writes the file `DATABASE` in it (creating the folder); a workdir without one (made before this
    rule, or empty) is claimed as it is. `write=False` only checks: a command that may still refuse its
    input checks first and claims once nothing else can refuse it, so a refused command writes nothing."""
    folder = Path(workdir)
    identity = database_identity(db_url)
    marker = folder / MARKER
    try:
        first = marker.read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        first = None
    if first is not None:
        if first != identity:
            raise WorkdirTaken(
                f"workdir {folder} holds the checkpoints and trial logs of another database ({first}), and "
                f"this one ({identity}) would overwrite them (both number their searches from 1): give it "
                f"another --workdir, or leave --workdir out to use a folder of its own under {DEFAULT_ROOT}/"
            )
        return
    if not write:
        return
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{MARKER}.", dir=folder)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{identity}\n# The Quanta database whose checkpoints and trial logs this folder holds.\n")
        os.replace(tmp, marker)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
