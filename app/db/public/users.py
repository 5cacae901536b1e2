"""Read models of users and their API tokens: a user (`UserOut`), what an admin sends to create or
change one (`UserCreate`, `UserUpdate`, with the bounds and `Role`s the stores validate against), the
users' shares of device time (`SharesOut`), and tokens as listed (`TokenOut`), asked for (`TokenCreate`)
and made (`NewToken`, the only one carrying the token itself). The field names are the API's JSON
contract (see `quanta.db.public`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic import Field as PydanticField
from sqlmodel import Field, SQLModel

from quanta.db.models import TokenRow, UserRow

# Bounds of a user's settings: the stores validate against them (`UserCreate`, `UserUpdate`) and the API
# takes them as bodies, so a value out of range is a 422 naming the field.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$"
MAX_WEIGHT = 1000.0
MAX_QUOTA = 100_000
# admin: everything; member: their own searches, read and write; viewer: every search, read only (a
# write is a 403), for sharing a view without sharing an admin's token. Spelled exactly so (`Admin` is
# refused, not read as `admin`): one role has one name.
Role = Literal["admin", "member", "viewer"]


class UserUpdate(BaseModel):
    """What an admin may change about a user (fields left out stay as they are)."""

    model_config = ConfigDict(extra="forbid")

    role: Role | None = None
    weight: float | None = PydanticField(
        default=None, gt=0, le=MAX_WEIGHT, allow_inf_nan=False, description="share of device time relative to others"
    )
    max_alive_trials: int | None = PydanticField(default=None, ge=0, le=MAX_QUOTA, description="0 = no quota")
    max_devices: int | None = PydanticField(default=None, ge=0, le=MAX_QUOTA, description="0 = no quota")


class UserCreate(BaseModel):
    """A new user; the name is unique."""

    model_config = ConfigDict(extra="forbid")

    name: str = PydanticField(pattern=NAME_PATTERN, description="1-64 letters, digits, '_', '.', '@' or '-'")
    role: Role = "member"
    weight: float = PydanticField(default=1.0, gt=0, le=MAX_WEIGHT, allow_inf_nan=False)
    max_alive_trials: int = PydanticField(default=0, ge=0, le=MAX_QUOTA, description="0 = no quota")
    max_devices: int = PydanticField(default=0, ge=0, le=MAX_QUOTA, description="0 = no quota")


class UserOut(SQLModel):
    id: int = Field(description="never given to another user, also after this one is deleted")
    name: str
    role: Role
    weight: float
    max_alive_trials: int
    max_devices: int
    created_at: float

    @classmethod
    def from_row(cls, row: UserRow) -> UserOut:
        assert row.id is not None
        return cls(
            id=row.id,
            name=row.name,
            role="admin" if row.role == "admin" else "viewer" if row.role == "viewer" else "member",
            weight=row.weight,
            max_alive_trials=row.max_alive_trials,
            max_devices=row.max_devices,
            created_at=row.created_at,
        )


class UserShareOut(SQLModel):
    """One user's share of device time (`GET /shares`). From the stored quanta over the request's window:
    `device_s`, the device-seconds the user's trials computed (a device shared by k trials counts 1/k to
    each) and `share`, that over all users' device-seconds in the window (None when nobody computed).
    From the share layer's accounts (`quanta.executor.policy.share`, as of `SharesOut.accounts_at`; None
    when the controller has none for the user): `devices` held and `fair_devices` due at the last
    plan, and over the accounts' decaying window the device-seconds `used_s`, `fair_s` (its
    work-conserving fair share) and `ideal_s` (its weighted share of the cluster alone, up to its
    demand), and `rho` = ideal_s / used_s (Themis's finish-time fairness: > 1 behind its share)."""

    name: str
    weight: float = Field(description="share of device time relative to the other users'")
    device_s: float
    share: float | None
    devices: float | None = None
    fair_devices: float | None = None
    used_s: float | None = None
    fair_s: float | None = None
    ideal_s: float | None = None
    rho: float | None = None


class SharesOut(SQLModel):
    """Users' shares of device time: `users` (a member gets their own row only), the stored quanta's
    window [`since`, `at`] they were measured over, the cluster's `devices` (as last published), and the
    share layer's accounts: when they were last brought up to date (`accounts_at`) and their time
    constant (`accounts_window_s`), both None before the share layer first planned."""

    at: float
    since: float
    window_s: float
    devices: int
    accounts_at: float | None
    accounts_window_s: float | None
    users: list[UserShareOut]


class TokenOut(SQLModel):
    """A token as listed: never the token itself, nor its hash."""

    id: int
    user: str
    name: str
    prefix: str = Field(description="the token's first characters (empty for a token not used since it was re-keyed)")
    created_at: float
    expires_at: float | None
    revoked_at: float | None
    active: bool = Field(description="neither revoked nor expired")

    @classmethod
    def from_row(cls, row: TokenRow, now: float) -> TokenOut:
        assert row.id is not None
        expired = row.expires_at is not None and row.expires_at <= now
        return cls(
            id=row.id,
            user=row.user_name,
            name=row.name,
            prefix=row.prefix,
            created_at=row.created_at,
            expires_at=row.expires_at,
            revoked_at=row.revoked_at,
            active=row.revoked_at is None and not expired,
        )


MAX_EXPIRES_DAYS = 3650


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = PydanticField(default="api", min_length=1, max_length=64, description="a label")
    expires_days: int | None = PydanticField(
        default=None, ge=1, le=MAX_EXPIRES_DAYS, description="days until it stops working (none: never)"
    )


class NewToken(TokenOut):
    token: str = Field(description="the token: shown this once, stored only as a keyed hash")
