"""The service settings: the trainable allowlist matches whole package components, QUANTA_TOKEN has a
minimum length; the access log keeps tokens out however they are spelled."""

from __future__ import annotations

import pytest

from quanta.api.settings import Settings


@pytest.mark.parametrize("prefixes", ["examples", "examples.", " examples. ,other"])
@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        ("examples", True),
        ("examples.mnist1d", True),
        ("examples.sub.deep", True),
        ("examples_evil", False),
        ("examplesx.mod", False),
        ("evil.examples", False),
    ],
)
def test_allowlist_prefixes_name_whole_packages(prefixes, module, allowed):
    assert Settings(trainable_allowlist=prefixes).allows(module) is allowed


def test_a_quanta_token_shorter_than_32_characters_is_refused(monkeypatch):
    from pydantic import ValidationError

    from quanta.api.settings import MIN_TOKEN_CHARS

    with pytest.raises(ValidationError, match="QUANTA_TOKEN has 31 characters; it must have at least 32"):
        Settings(token="x" * 31)
    monkeypatch.setenv("QUANTA_TOKEN", "short")
    with pytest.raises(ValidationError, match="QUANTA_TOKEN has 5 characters"):
        Settings()
    monkeypatch.setenv("QUANTA_TOKEN", "")
    assert Settings().token is None  # unset: `quanta serve` makes one
    assert Settings(token="y" * MIN_TOKEN_CHARS).token == "y" * MIN_TOKEN_CHARS


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("GET /api/v1/events?token=SECRET HTTP/1.1", "GET /api/v1/events?token=[redacted] HTTP/1.1"),
        ("GET /api/v1/events?%74oken=SECRET&x=1 HTTP/1.1", "GET /api/v1/events?%74oken=[redacted]&x=1 HTTP/1.1"),
        ("GET /e?a=1&%54%4fKEN=SECRET", "GET /e?a=1&%54%4fKEN=[redacted]"),
        ("GET /e?%2574oken=SECRET", "GET /e?%2574oken=[redacted]"),  # encoded twice
        ("GET /e?Access_Token=SECRET;x=2", "GET /e?Access_Token=[redacted];x=2"),
        ("GET /e?tok%65n=SECRET#frag", "GET /e?tok%65n=[redacted]#frag"),
        ("GET /e?tokens=kept&x=token", "GET /e?tokens=kept&x=token"),  # other names, a value "token"
    ],
)
def test_the_access_log_redacts_a_token_however_its_name_is_encoded(line, shown):
    """Starlette decodes `%74oken` to `token`: the server accepts it, so the log must not show it."""
    from quanta.api.logs import redact

    assert redact(line) == shown
