"""The service settings' trainable allowlist matches whole package components."""

from __future__ import annotations

import pytest

from app.api.settings import Settings


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
