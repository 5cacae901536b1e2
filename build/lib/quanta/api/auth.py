"""API tokens as the API uses them: each belongs to a user; the store keeps only keyed hashes
(`quanta.db.tokens`). `QUANTA_TOKEN` is the first admin's token (`FIRST_ADMIN`)."""

from __future__ import annotations

import time

from quanta.db.models import FIRST_ADMIN, UserRow
from quanta.db.store import Store
from quanta.db.tokens import new_token

__all__ = ["create_token", "ensure_token", "new_token", "verify"]


def ensure_token(store: Store, token: str, name: str = "QUANTA_TOKEN") -> None:
    """Make `token` valid as the first admin's (stores its keyed hash unless already there); the first
    admin's other tokens of the same `name` are revoked (`Store.replace_token`): the QUANTA_TOKEN a
    server starts with is the only one of that name that works."""
    store.replace_token(FIRST_ADMIN, token, time.time(), name=name)


def create_token(store: Store, name: str = "default", user: str = FIRST_ADMIN) -> str:
    """A new valid token of `user`; returned once, stored hashed."""
    return store.create_token(user, time.time(), name=name).token


def verify(store: Store, token: str | None) -> UserRow | None:
    """The user `token` belongs to; None when it is missing, unknown, revoked or expired."""
    if not token:
        return None
    return store.authenticate(token, time.time())
