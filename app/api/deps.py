"""`Annotated` dependencies of the routes: the store, the settings, and the token check."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Query, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.api import auth
from app.api.settings import Settings
from app.db.store import Store

bearer = HTTPBearer(auto_error=False, description="the token `quanta serve` printed (or QUANTA_TOKEN)")


def get_store(request: Request) -> Store:
    return request.app.state.store


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


StoreDep = Annotated[Store, Depends(get_store)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def _unauthorized() -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED,
        "missing or invalid token: send 'Authorization: Bearer <token>'",
        headers={"WWW-Authenticate": "Bearer"},
    )


def require_token(store: StoreDep, credentials: Credentials) -> None:
    if credentials is None or not auth.verify(store, credentials.credentials):
        raise _unauthorized()


def require_token_or_query(
    store: StoreDep,
    credentials: Credentials,
    token: Annotated[str | None, Query(description="the token, for clients that cannot set headers")] = None,
) -> None:
    """The header, or `?token=` (EventSource cannot set headers)."""
    given = credentials.credentials if credentials is not None else token
    if not auth.verify(store, given):
        raise _unauthorized()


Authenticated = Depends(require_token)
AuthenticatedOrQuery = Depends(require_token_or_query)
