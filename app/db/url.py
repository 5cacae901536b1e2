"""Reading database URLs without opening them: the file of a SQLite URL, and a URL safe to print.

One parser for every part of Quanta that looks at a URL (the engine, the controller lease, the workdir
rule, the CLI), so `sqlite:///q.db?timeout=5` names the file `q.db` everywhere. Imports nothing heavy
(no SQLAlchemy): the workdir rule and the CLI read URLs before anything else is imported.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def sqlite_file(url: str) -> str | None:
    """The database file of a SQLite URL as written (relative paths are relative to the working
    directory, as SQLite's), without the URL's query; "" for an in-memory database; None when `url` is
    not SQLite."""
    if not url.startswith("sqlite"):
        return None
    path = url.split("///", 1)[1] if "///" in url else ""
    path = path.split("?", 1)[0]
    if not path or path == ":memory:" or path.startswith("file::memory:"):
        return ""
    return path


def redact(url: str) -> str:
    """`url` without its password (for messages and identities): `postgresql://u:***@host/db`. A URL
    without a password is returned as it is."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    cred, _, host = parts.netloc.rpartition("@")
    user, sep, _ = cred.partition(":")
    return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, parts.fragment)) if sep else url
