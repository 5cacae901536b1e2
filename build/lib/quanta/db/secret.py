"""The server secret that API tokens are hashed with (HMAC-SHA256), so that a copy of the database alone
does not let anyone check guesses of tokens offline.

Where it comes from, first match wins:
1. `QUANTA_SECRET` in the environment (any string; set it on every process that opens the database,
   `quanta serve` and the `quanta users`/`quanta tokens` commands alike; required in practice when the
   database is PostgreSQL and those run on different machines);
2. for a SQLite database file: the file `<database file>.secret` beside it (e.g. `quanta.db.secret`);
3. otherwise (PostgreSQL, in-memory SQLite): `$XDG_STATE_HOME/quanta/secret` (default
   `~/.local/state/quanta/secret`) of the user running the process.
A file that does not exist is created once with 32 random bytes (hex), mode 0600, atomically: two
processes creating it at once end up with the same secret.

Changing the secret invalidates every stored token (create new ones with `quanta tokens create`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path

ENV = "QUANTA_SECRET"


def secret_path(db_url: str) -> Path:
    """The file the secret of the database at `db_url` is kept in (when `QUANTA_SECRET` is unset)."""
    if db_url.startswith("sqlite"):
        path = db_url.split("///", 1)[-1]
        if path and path != ":memory:" and "///" in db_url:
            return Path(path + ".secret")
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "quanta" / "secret"


def _read_or_create(path: Path) -> bytes:
    try:
        text = path.read_text().strip()
        if text:
            return text.encode()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Written whole into a temporary 0600 file, then linked into place: the link fails when another
    # process got there first, and then its secret is the one read back. Nobody ever reads half a file.
    fd, tmp = tempfile.mkstemp(prefix=".secret.", dir=path.parent)  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        os.unlink(tmp)
    text = path.read_text().strip()
    if not text:
        raise RuntimeError(f"the server secret file {path} is empty: delete it or set {ENV}")
    return text.encode()


def server_secret(db_url: str) -> bytes:
    """The secret tokens of the database at `db_url` are hashed with (see the module's docstring)."""
    env = os.environ.get(ENV)
    if env:
        return env.encode()
    return _read_or_create(secret_path(db_url))
