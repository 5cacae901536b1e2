"""API tokens: random strings handed to users once; the database keeps only their sha256 digests."""

from __future__ import annotations

import hashlib
import secrets
import time

from app.db.store import Store

PREFIX = "qnt_"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def ensure_token(store: Store, token: str, name: str = "default") -> None:
    """Make `token` valid (stores its digest unless already there)."""
    store.add_token_hash(name, hash_token(token), time.time())


def create_token(store: Store, name: str = "default") -> str:
    """A new valid token; returned once, stored hashed."""
    token = new_token()
    ensure_token(store, token, name)
    return token


def verify(store: Store, token: str | None) -> bool:
    if not token:
        return False
    return store.has_token_hash(hash_token(token))
