"""Log hygiene for `quanta serve`: the dashboard's event stream passes its token as `?token=` (EventSource
cannot send headers), and uvicorn's access log (`-v`) prints each request's path with its query. The
filter below rewrites the token's value before the line is formatted."""

from __future__ import annotations

import logging
import re

_SECRET = re.compile(r"((?:^|[?&;])(?:token|access_token)=)[^&;#\s]*", re.IGNORECASE)
REDACTED = "[redacted]"


def redact(text: str) -> str:
    """`text` with the values of `token=` / `access_token=` query parameters replaced."""
    return _SECRET.sub(r"\1" + REDACTED, text)


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
