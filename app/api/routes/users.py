"""/me, /shares, /users and /tokens: who the caller is and their share of device time; users (with their
weight and quotas) and their tokens, managed by admins (a member or a viewer gets 403 on these; /me and /shares
answer everyone, /shares a member with their own figures only)."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Response, status

from quanta.api.deps import AdminUser, Authenticated, CurrentUser, StoreDep, owner_filter
from quanta.api.models import Message
from quanta.api.routes.common import AUTH_ERRORS, CONFLICT, NOT_FOUND
from quanta.db.errors import Conflict
from quanta.db.public.users import (
    NAME_PATTERN,
    NewToken,
    SharesOut,
    TokenCreate,
    TokenOut,
    UserCreate,
    UserOut,
    UserUpdate,
)

router = APIRouter(tags=["users"], dependencies=[Authenticated], responses=AUTH_ERRORS)

FORBIDDEN: dict[int | str, dict[str, Any]] = {403: {"model": Message, "description": "admins only"}}
UserName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=64, description="user name")]
TokenRef = Annotated[str, Path(min_length=1, max_length=128, description="token id, prefix (6+ characters) or token")]


def _missing(name: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"user {name} not found")


@router.get("/me", response_model=UserOut)
def me(user: CurrentUser) -> UserOut:
    """The user the token belongs to."""
    return user


@router.get("/shares", response_model=SharesOut)
def shares(
    store: StoreDep,
    user: CurrentUser,
    window_s: Annotated[
        float, Query(gt=0, le=7 * 86_400, description="seconds of stored quanta the device share is measured over")
    ] = 300.0,
) -> SharesOut:
    """Each user's weight, share of device time over the last `window_s` seconds (from the stored
    quanta), and the share layer's accounts: devices held and due, and rho (Themis's finish-time
    fairness: ideal / had device time; above 1 means behind the fair share). An admin or a viewer gets every user,
    a member their own row only."""
    return store.shares_out(time.time(), window_s, owner_filter(user))


@router.get("/users", response_model=list[UserOut], responses=FORBIDDEN)
def list_users(store: StoreDep, _: AdminUser) -> list[UserOut]:
    return [UserOut.from_row(u) for u in store.users()]


@router.post("/users", status_code=201, response_model=UserOut, responses={**FORBIDDEN, **CONFLICT})
def add_user(body: UserCreate, store: StoreDep, _: AdminUser) -> UserOut:
    """A new user (409 when the name is taken). Weight and quotas out of range are a 422 naming the field."""
    try:
        row = store.add_user(
            body.name,
            time.time(),
            role=body.role,
            weight=body.weight,
            max_alive_trials=body.max_alive_trials,
            max_devices=body.max_devices,
        )
    except Conflict as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return UserOut.from_row(row)


@router.get("/users/{name}", response_model=UserOut, responses={**FORBIDDEN, **NOT_FOUND})
def get_user(name: UserName, store: StoreDep, _: AdminUser) -> UserOut:
    row = store.user(name)
    if row is None:
        raise _missing(name)
    return UserOut.from_row(row)


@router.patch("/users/{name}", response_model=UserOut, responses={**FORBIDDEN, **NOT_FOUND, **CONFLICT})
def update_user(name: UserName, body: UserUpdate, store: StoreDep, _: AdminUser) -> UserOut:
    """Change a user's role, weight or quotas (0 = no quota); fields left out stay as they are."""
    try:
        row = store.update_user(name, **body.model_dump(exclude_none=True))
    except KeyError:
        raise _missing(name) from None
    except Conflict as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return UserOut.from_row(row)


@router.delete(
    "/users/{name}",
    status_code=204,
    response_class=Response,
    responses={**FORBIDDEN, **NOT_FOUND, 409: {"model": Message, "description": "the user has active searches"}},
)
def delete_user(
    name: UserName,
    store: StoreDep,
    _: AdminUser,
    force: Annotated[bool, Query(description="stop the user's active searches first")] = False,
) -> Response:
    """Delete a user and their tokens; their searches stay. 409 while they have queued, running or
    paused searches, unless `force=true`, which stops those in the same transaction."""
    try:
        store.delete_user(name, time.time(), force=force)
    except KeyError:
        raise _missing(name) from None
    except Conflict as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return Response(status_code=204)


@router.get("/users/{name}/tokens", response_model=list[TokenOut], responses={**FORBIDDEN, **NOT_FOUND})
def list_tokens(name: UserName, store: StoreDep, _: AdminUser) -> list[TokenOut]:
    """The user's tokens (never the tokens themselves)."""
    if store.user(name) is None:
        raise _missing(name)
    return store.tokens(name, time.time())


@router.post("/users/{name}/tokens", status_code=201, response_model=NewToken, responses={**FORBIDDEN, **NOT_FOUND})
def create_token(name: UserName, body: TokenCreate, store: StoreDep, _: AdminUser) -> NewToken:
    """A new token for the user, in `token` (shown this once)."""
    now = time.time()
    expires = None if body.expires_days is None else now + body.expires_days * 86_400
    try:
        return store.create_token(name, now, name=body.name, expires_at=expires)
    except KeyError:
        raise _missing(name) from None


@router.delete("/tokens/{ref}", response_model=TokenOut, responses={**FORBIDDEN, **NOT_FOUND, **CONFLICT})
def revoke_token(ref: TokenRef, store: StoreDep, _: AdminUser) -> TokenOut:
    """Revoke a token by its id, a prefix of it (409 when several match) or the token itself. Refused
    from the next request on."""
    try:
        return store.revoke_token(ref, time.time())
    except KeyError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"token {ref} not found") from None
    except Conflict as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
