"""API tokens: random strings handed to a user once; the database keeps only a keyed hash of each
(HMAC-SHA256 with the server secret, `quanta.db.secret`), its first characters (to name it), its expiry
and its revocation. `TokenQueries` is part of `Store` (the service's store; the simulator has none).

Migration: a database written by an older Quanta holds unkeyed sha256 digests (`scheme` "sha256", the
first admin's). Such a token keeps working: the first time it is presented, its row is re-keyed in
place (the HMAC digest replaces the sha256 one) and from then on only the keyed hash is stored.

Every check reads the database (one indexed query), so a revoked or expired token is refused by the
next request, and a running server needs no cache to invalidate.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable

from sqlalchemy import and_, delete, func, literal, or_, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from quanta.db.errors import Conflict
from quanta.db.models import FIRST_ADMIN, SearchRow, TokenRow, UserRow
from quanta.db.public.users import NewToken, TokenOut
from quanta.status import SEARCH_ACTIVE, SEARCH_STARTED, SearchStatus

TOKEN_PREFIX = "qnt_"
# Characters of a token kept in clear to name it: "qnt_" and 6 random ones of the 43 (36 of its 256 bits),
# and never more than a quarter of a token, whatever its length (QUANTA_TOKEN is set by a person).
SHOWN = 10


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def keyed_digest(secret: bytes, token: str) -> str:
    """HMAC-SHA256 of the token under the server secret, hex."""
    return hmac.new(secret, token.encode(), hashlib.sha256).hexdigest()


def legacy_digest(token: str) -> str:
    """What an older Quanta stored: the token's plain sha256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def visible_prefix(token: str) -> str:
    """What is stored and listed in clear to name `token`: its first `SHOWN` characters, at most a quarter
    of it."""
    return token[: min(SHOWN, len(token) // 4)]


class TokenQueries:
    """Mixed into `Store`, which provides `session()` and `token_secret()`."""

    def session(self) -> Session:
        raise NotImplementedError

    def token_secret(self) -> bytes:
        raise NotImplementedError

    def _digest(self) -> Callable[[str], str]:
        secret = self.token_secret()
        return lambda token: keyed_digest(secret, token)

    def add_token(
        self, user: str, token: str, at: float, *, name: str = "default", expires_at: float | None = None
    ) -> TokenRow:
        """Store `token` for `user` (`KeyError`: no such user). A token already stored is left as it is
        (its user, expiry and revocation too) and returned; stored unkeyed by an older Quanta (e.g.
        `QUANTA_TOKEN` in an upgraded database), it is re-keyed now, so no unkeyed digest of it stays."""
        digest = self._digest()(token)
        with self.session() as s:
            found = s.exec(select(TokenRow).where(TokenRow.token_hash == digest)).first()
            if found is not None:
                return found
            old = s.exec(
                select(TokenRow).where(TokenRow.token_hash == legacy_digest(token), TokenRow.scheme == "sha256")
            ).first()
            if old is not None:
                old.token_hash, old.scheme, old.prefix = digest, "hmac", visible_prefix(token)
                s.add(old)
                s.commit()
                s.refresh(old)
                return old
            user_id = s.exec(select(UserRow.id).where(UserRow.name == user)).first()
            if user_id is None:
                raise KeyError(f"user {user} not found")
            row = TokenRow(
                name=name,
                token_hash=digest,
                created_at=at,
                user_name=user,
                user_id=user_id,
                prefix=visible_prefix(token),
                expires_at=expires_at,
                scheme="hmac",
            )
            s.add(row)
            try:
                s.commit()
            except IntegrityError:  # stored by another process in between
                s.rollback()
                return s.exec(select(TokenRow).where(TokenRow.token_hash == digest)).one()
            s.refresh(row)
            return row

    def replace_token(self, user: str, token: str, at: float, *, name: str) -> TokenRow:
        """Store `token` for `user` as `add_token` does, and revoke the user's other active tokens of the
        same `name`: `QUANTA_TOKEN`'s, when the server starts with another one (a token an operator
        replaced, or one shorter than the server now accepts, stops working)."""
        row = self.add_token(user, token, at, name=name)
        with self.session() as s:
            s.execute(
                update(TokenRow)
                .where(
                    col(TokenRow.user_id) == row.user_id,
                    col(TokenRow.name) == name,
                    col(TokenRow.id) != row.id,
                    col(TokenRow.revoked_at).is_(None),
                )
                .values(revoked_at=at)
            )
            s.commit()
        return row

    def create_token(self, user: str, at: float, *, name: str = "default", expires_at: float | None = None) -> NewToken:
        """A new token for `user` (`KeyError`: no such user), returned with the token itself, once."""
        token = new_token()
        row = self.add_token(user, token, at, name=name, expires_at=expires_at)
        return NewToken(**TokenOut.from_row(row, at).model_dump(), token=token)

    def authenticate(self, token: str, now: float) -> UserRow | None:
        """The user `token` belongs to, or None when it is unknown, revoked or expired, or its user is
        gone. A token stored by an older Quanta (unkeyed) is re-keyed here, once."""
        if not token:
            return None
        digest = self._digest()(token)
        with self.session() as s:
            # by id: a token outlives no user, and a new user of a deleted one's name gets none of theirs
            q = select(TokenRow, UserRow).join(UserRow, col(UserRow.id) == col(TokenRow.user_id))
            hit = s.exec(q.where(TokenRow.token_hash == digest)).first()
            if hit is None:
                hit = s.exec(q.where(TokenRow.token_hash == legacy_digest(token), TokenRow.scheme == "sha256")).first()
                if hit is None:
                    return None
                s.execute(
                    update(TokenRow)
                    .where(col(TokenRow.id) == hit[0].id, col(TokenRow.scheme) == "sha256")
                    .values(token_hash=digest, scheme="hmac", prefix=visible_prefix(token))
                )
                try:
                    s.commit()
                except IntegrityError:  # re-keyed by another request at the same moment
                    s.rollback()
            row, user = hit
            if row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= now):
                return None
            return user

    def tokens(self, user: str | None, now: float) -> list[TokenOut]:
        """The tokens of the user named `user` (of everyone when None), oldest first."""
        with self.session() as s:
            q = select(TokenRow).order_by(col(TokenRow.id))
            if user is not None:
                q = q.join(UserRow, col(UserRow.id) == col(TokenRow.user_id)).where(UserRow.name == user)
            return [TokenOut.from_row(r, now) for r in s.exec(q)]

    def revoke_token(self, ref: str, at: float) -> TokenOut:
        """Revoke the token named by `ref`: its id, the start of its prefix or more of the token than the
        prefix holds (at least 6 characters either way), or the token itself. `KeyError`: none matches;
        `Conflict`: a prefix matches several."""
        ref = ref.strip()
        with self.session() as s:
            rows: list[TokenRow]
            if ref.isascii() and ref.isdigit() and len(ref) <= 18:
                one = s.get(TokenRow, int(ref))
                rows = [one] if one is not None else []
            else:
                rows = list(s.exec(select(TokenRow).where(TokenRow.token_hash == self._digest()(ref))))
                if not rows and len(ref) >= 6:
                    # The start of a stored prefix, or more of the token than its prefix (a prefix listed
                    # before prefixes were shortened; the token's first characters copied generously).
                    stored = col(TokenRow.prefix)
                    longer = and_(func.length(stored) >= 6, func.substr(literal(ref), 1, func.length(stored)) == stored)
                    rows = list(s.exec(select(TokenRow).where(or_(stored.startswith(ref, autoescape=True), longer))))
            if not rows:
                raise KeyError(f"no token matches {ref!r}")
            if len(rows) > 1:
                raise Conflict(f"{ref!r} matches {len(rows)} tokens: give its id or more of it")
            row = rows[0]
            if row.revoked_at is None:
                row.revoked_at = at
                s.add(row)
                s.commit()
                s.refresh(row)
            return TokenOut.from_row(row, at)

    def delete_user(self, name: str, at: float, *, force: bool = False) -> list[int]:
        """Delete user `name` with their tokens, in one transaction. Their searches stay, owned by nobody
        (an admin sees them; a new user of the same name does not: ownership is by id, and ids are never
        re-used), still showing the name. `KeyError`: no such user; `Conflict`: it is the first admin, or
        the user has active (queued, running or paused) searches and `force` is False. With `force`
        those searches are stopped in the same transaction (queued ones at once; started ones get a stop
        command the controller carries out at its next tick). Returns the ids of the searches stopped."""
        if name == FIRST_ADMIN:
            raise Conflict(f"user {name} is the first admin (QUANTA_TOKEN's user) and cannot be deleted")
        with self.session() as s:
            user = s.exec(select(UserRow).where(UserRow.name == name)).first()
            if user is None:
                raise KeyError(f"user {name} not found")
            mine = col(SearchRow.owner_id) == user.id
            active = list(s.exec(select(SearchRow.id).where(mine, col(SearchRow.status).in_(SEARCH_ACTIVE))))
            if active and not force:
                raise Conflict(
                    f"user {name} has {len(active)} active searches ({', '.join(map(str, active))}): "
                    "stop them first or delete with force=true"
                )
            if active:
                s.execute(
                    update(SearchRow)
                    .where(mine, col(SearchRow.status) == SearchStatus.QUEUED)
                    .values(status=SearchStatus.STOPPED, finished_at=at, command=None, waiting=None)
                )
                s.execute(
                    update(SearchRow).where(mine, col(SearchRow.status).in_(SEARCH_STARTED)).values(command="stop")
                )
            s.execute(update(SearchRow).where(mine).values(owner_id=None))
            s.execute(delete(TokenRow).where(col(TokenRow.user_id) == user.id))
            s.delete(user)
            s.commit()
        return [i for i in active if i is not None]
