"""`UserQueries`: the users of the service, in SQL (part of `Store`; `MemoryStore` keeps the same
methods in memory, and tests/unit/test_store_contract.py runs the same tests on both).

A user has a name unique regardless of case, a role (`admin`, `member` or `viewer`:
`quanta.db.public.users.Role`), a weight (their share of device time relative to the other users') and two
quotas (`max_alive_trials`, `max_devices`; 0 = none). Values are checked against `UserCreate` /
`UserUpdate` (quanta.db.public.users) before anything is written: a bad one raises pydantic's
`ValidationError` (a `ValueError`) naming the field, and nothing is stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, func, select

from quanta.db.errors import Conflict
from quanta.db.models import FIRST_ADMIN, UserRow
from quanta.db.public.users import UserCreate, UserUpdate


def ensure_first_admin(engine: Engine, at: float) -> None:
    """Create the first admin's user row (`FIRST_ADMIN`) unless it exists; safe when two processes
    open the same database at once (the name is unique: the second insert is dropped)."""
    with Session(engine) as s:
        if s.exec(select(UserRow.id).where(UserRow.name == FIRST_ADMIN)).first() is not None:
            return
        s.add(UserRow(name=FIRST_ADMIN, role="admin", created_at=at))
        try:
            s.commit()
        except IntegrityError:
            s.rollback()


def checked_new(name: str, role: str, weight: float, max_alive_trials: int, max_devices: int) -> dict[str, Any]:
    """A new user's fields, checked against `UserCreate` (ValueError naming the field), for either store."""
    return UserCreate.model_validate(
        dict(name=name, role=role, weight=weight, max_alive_trials=max_alive_trials, max_devices=max_devices)
    ).model_dump()


def name_taken(name: str, existing: Iterable[str]) -> str | None:
    """The name among `existing` that `name` would be taken for: the same name, or one differing only in
    case (`Admin` beside `admin`: one person would read them as one user), else None."""
    folded = name.casefold()
    return next((other for other in existing if other.casefold() == folded), None)


def taken_message(name: str, other: str) -> str:
    return f"user {name} exists" if other == name else f"user {other} exists: names differ in more than case"


def checked_update(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` validated as a `UserUpdate` (unknown names and out-of-range values raise), without the
    ones left None."""
    return UserUpdate.model_validate(fields).model_dump(exclude_none=True)


class UserQueries:
    """Mixed into `Store`, which provides `session()`."""

    def session(self) -> Session:
        raise NotImplementedError

    def add_user(
        self,
        name: str,
        at: float,
        role: str = "member",
        weight: float = 1.0,
        max_alive_trials: int = 0,
        max_devices: int = 0,
    ) -> UserRow:
        """A new user. `Conflict` when the name is taken, also in another case (`name_taken`); `ValueError`
        naming the field when a value is out of range."""
        data = checked_new(name, role, weight, max_alive_trials, max_devices)
        with self.session() as s:
            # Names are ASCII (NAME_PATTERN), so SQL's lower() folds case as casefold() does.
            same = s.exec(select(UserRow.name).where(func.lower(UserRow.name) == name.lower())).first()
            if same is not None:
                raise Conflict(taken_message(name, same))
            row = UserRow(**data, created_at=at)
            s.add(row)
            try:
                s.commit()
            except IntegrityError:
                s.rollback()
                raise Conflict(f"user {name} exists") from None
            s.refresh(row)
            return row

    def user(self, name: str) -> UserRow | None:
        with self.session() as s:
            return s.exec(select(UserRow).where(UserRow.name == name)).first()

    def users(self) -> list[UserRow]:
        """Every user, in the order they were added."""
        with self.session() as s:
            return list(s.exec(select(UserRow).order_by(col(UserRow.id))))

    def update_user(self, name: str, **fields: Any) -> UserRow:
        """Change a user's role, weight or quotas (`KeyError`: no such user; `ValueError` naming the
        field: a value out of range or a field that cannot be changed)."""
        values = checked_update(fields)
        if name == FIRST_ADMIN and values.get("role", "admin") != "admin":
            raise Conflict(f"user {name} is the first admin (QUANTA_TOKEN's user) and stays an admin")
        with self.session() as s:
            row = s.exec(select(UserRow).where(UserRow.name == name)).first()
            if row is None:
                raise KeyError(f"user {name} not found")
            for k, v in values.items():
                setattr(row, k, v)
            s.add(row)
            s.commit()
            s.refresh(row)
            return row

    def user_weights(self) -> dict[str, float]:
        """Each user's weight, by name."""
        with self.session() as s:
            return {name: weight for name, weight in s.exec(select(UserRow.name, UserRow.weight))}
