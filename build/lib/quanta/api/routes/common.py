"""Shared parameter types and error helpers of the routers."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import HTTPException, Path, Query, status

from quanta.api.models import Message

T = TypeVar("T")

MAX_ID = 2**63 - 1

SearchId = Annotated[int, Path(ge=1, le=MAX_ID, description="search id")]
TrialId = Annotated[int, Path(ge=1, le=MAX_ID, description="trial id")]
Offset = Annotated[int, Query(ge=0, le=2**31, description="rows to skip")]
Limit = Annotated[int, Query(ge=1, le=1000, description="rows to return")]

AUTH_ERRORS: dict[int | str, dict[str, Any]] = {401: {"model": Message, "description": "missing or invalid token"}}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": Message, "description": "unknown id"}}
CONFLICT: dict[int | str, dict[str, Any]] = {409: {"model": Message, "description": "not allowed in the current state"}}


def not_found(kind: str, ident: int) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"{kind} {ident} not found")


def found(value: T | None, kind: str, ident: int) -> T:
    """`value`, or a 404 naming the `kind` and id when the store found nothing (None)."""
    if value is None:
        raise not_found(kind, ident)
    return value


def conflict(message: str) -> HTTPException:
    return HTTPException(status.HTTP_409_CONFLICT, message)
