"""Log hygiene for `quanta serve`: the dashboard's event stream passes its token as `?token=` (EventSource
cannot send headers), and uvicorn's access log (`-v`) prints each request's path with its query. The
filter below rewrites the token's value before the line is formatted."""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

# A query parameter: its name and its value, as they appear in a request line (still percent-encoded).
_PARAM = re.compile(r"(?P<head>(?:^|[?&;])(?P<name>[^=&;#?\s]+)=)(?P<value>[^&;#\s]*)")
SECRET_NAMES = frozenset({"token", "access_token"})
REDACTED = "[redacted]"


def _decoded(name: str) -> str:
    """A parameter's name as the server reads it: percent-decoded (Starlette decodes once; decoding until
    nothing changes also catches a name encoded twice), case folded."""
    for _ in range(4):
        plain = unquote_plus(name)
        if plain == name:
            break
        name = plain
    return name.casefold()


def _hide(match: re.Match[str]) -> str:
    if _decoded(match.group("name")) in SECRET_NAMES:
        return match.group("head") + REDACTED
    return match.group(0)


def redact(text: str) -> str:
    """`text` with the values of `token=` / `access_token=` query parameters replaced, however their names
    are spelled (`TOKEN=`, `%74oken=`: the server reads both as `token`)."""
    return _PARAM.sub(_hide, text)


class RedactTokens(logging.Filter):
    """Redacts tokens in a record's arguments (uvicorn's access log: client, method, path, version,
    status) and message. Never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


def install(logger_names: tuple[str, ...] = ("uvicorn.access", "uvicorn.error")) -> None:
    """Add `RedactTokens` to these loggers (call after uvicorn has configured logging)."""
    for name in logger_names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokens) for f in logger.filters):
            logger.addFilter(RedactTokens())
