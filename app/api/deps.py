"""`Annotated` dependencies of the routes: the store, the settings, the caller (the user a token
belongs to) and the ownership checks.

Every protected route resolves `CurrentUser` (401 for a missing, unknown, revoked or expired token: the
token is checked against the database on every request, so a revocation holds at the next one). A
member sees only their own searches and trials: another user's is a 404, exactly as a missing one, so
ids do not leak. An admin sees everything. A viewer reads everything an admin reads but the users and
their tokens, and writes nothing: every request but GET and HEAD is a 403 for them, whatever the route
(checked here, where the caller is resolved, so a route added later is read-only for viewers too)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from quanta.api import auth
from quanta.api.settings import Settings
from quanta.db.public.users import UserOut
from quanta.db.searches import Owner
from quanta.db.store import Store

bearer = HTTPBearer(auto_error=False, description="a user's API token (QUANTA_TOKEN is the first admin's)")


# Coroutines, though they only read the app's state: FastAPI runs a plain function dependency on its thread
# pool, and every route needs the store, so a request would queue for a thread (behind the other requests
# under load) just to be handed it.
async def get_store(request: Request) -> Store:
    return request.app.state.store


async def get_settings(request: Request) -> Settings:
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


async def _user(store: Store, token: str | None) -> UserOut:
    row = await run_in_threadpool(auth.verify, store, token)
    if row is None:
        raise _unauthorized()
    return UserOut.from_row(row)


READS = frozenset({"GET", "HEAD"})  # what a viewer may send


def _read_only(user: UserOut, method: str) -> None:
    if user.role == "viewer" and method not in READS:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"user {user.name} is a viewer: read-only")


async def current_user(request: Request, store: StoreDep, credentials: Credentials) -> UserOut:
    user = await _user(store, credentials.credentials if credentials is not None else None)
    _read_only(user, request.method)
    return user


@dataclass(frozen=True)
class StreamCaller:
    """The caller of a long request (an event stream) and the token it came with, checked again while
    the stream lasts."""

    user: UserOut
    token: str


async def stream_caller(
    request: Request,
    store: StoreDep,
    credentials: Credentials,
    token: Annotated[str | None, Query(description="the token, for clients that cannot set headers")] = None,
) -> StreamCaller:
    """The header, or `?token=` (EventSource cannot set headers)."""
    given = credentials.credentials if credentials is not None else token
    user = await _user(store, given)
    _read_only(user, request.method)
    assert given is not None
    return StreamCaller(user, given)


CurrentUser = Annotated[UserOut, Depends(current_user)]
Authenticated = Depends(current_user)


def require_admin(user: CurrentUser) -> UserOut:
    if user.role != "admin":
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"user {user.name} is not an admin")
    return user


AdminUser = Annotated[UserOut, Depends(require_admin)]


def reads_all(user: UserOut) -> bool:
    """Whether `user` reads every search (an admin, a viewer) rather than their own only (a member)."""
    return user.role in ("admin", "viewer")


def owner_filter(user: UserOut) -> int | None:
    """What a query filters on: the member's own user id, nothing for an admin or a viewer."""
    return None if reads_all(user) else user.id


def sees(user: UserOut, owner: Owner | None) -> bool:
    """Whether `user` may see a search owned by `owner` (None: no such search). Ownership is by user
    id, never by name: a user given the name of a deleted one owns none of their searches (those have
    no owner, and ids are never re-used)."""
    return owner is not None and (reads_all(user) or owner.id == user.id)
