"""`quanta users ...` and `quanta tokens ...`: users and their API tokens, written straight into the
service's database (`--db`, the URL `quanta serve` uses). A running server sees the changes at its next
request: a revoked token is refused from then on.

Tokens are hashed with the server secret (app/db/secret.py: QUANTA_SECRET, else a file beside a SQLite
database): run these with the same QUANTA_SECRET as the server, or on the same machine for SQLite.
Exit codes: 0 done, 2 bad input (unknown user or token, value out of range, conflict)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from quanta.cli.output import fail

if TYPE_CHECKING:
    from quanta.db.public.users import TokenOut

users_app = typer.Typer(no_args_is_help=True, help="Users of the service: add, list, change, delete.")
tokens_app = typer.Typer(no_args_is_help=True, help="API tokens of users: create, list, revoke.")

Db = Annotated[str, typer.Option("--db", help="the service's database URL", envvar="QUANTA_DB_URL")]
DEFAULT_DB = "sqlite:///quanta.db"
ROLE_HELP = "member (their own searches), viewer (reads every search, writes nothing) or admin"


def _invalid(exc: ValidationError) -> typer.Exit:
    return fail("; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors()))


def _store(db: str):  # noqa: ANN202  (imported late: `quanta --help` stays fast)
    from quanta.db.store import Store

    try:
        return Store(db)
    except Exception as exc:
        raise fail(f"cannot open database {db}: {exc}") from None


def _when(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(help="user name (letters, digits, '_', '.', '@', '-')")],
    role: Annotated[str, typer.Option(help=ROLE_HELP)] = "member",
    weight: Annotated[float, typer.Option(help="share of device time relative to other users")] = 1.0,
    max_alive_trials: Annotated[int, typer.Option(help="quota: trials alive at once (0 = none)")] = 0,
    max_devices: Annotated[int, typer.Option(help="quota: devices at once (0 = none)")] = 0,
    db: Db = DEFAULT_DB,
) -> None:
    """Add a user."""
    from quanta.db.errors import Conflict

    store = _store(db)
    try:
        store.add_user(
            name, time.time(), role=role, weight=weight, max_alive_trials=max_alive_trials, max_devices=max_devices
        )
    except ValidationError as exc:
        raise _invalid(exc) from None
    except Conflict as exc:
        raise fail(str(exc)) from None
    typer.echo(f"added user {name} ({role})", err=True)


@users_app.command("list")
def users_list(db: Db = DEFAULT_DB) -> None:
    """List the users: name, role, weight, quotas, created."""
    typer.echo("name\trole\tweight\tmax_alive_trials\tmax_devices\tcreated")
    for u in _store(db).users():
        typer.echo(f"{u.name}\t{u.role}\t{u.weight:g}\t{u.max_alive_trials}\t{u.max_devices}\t{_when(u.created_at)}")


@users_app.command("set")
def users_set(
    name: Annotated[str, typer.Argument(help="user name")],
    role: Annotated[str | None, typer.Option(help=ROLE_HELP)] = None,
    weight: Annotated[float | None, typer.Option(help="share of device time relative to other users")] = None,
    max_alive_trials: Annotated[int | None, typer.Option(help="quota: trials alive at once (0 = none)")] = None,
    max_devices: Annotated[int | None, typer.Option(help="quota: devices at once (0 = none)")] = None,
    db: Db = DEFAULT_DB,
) -> None:
    """Change a user's role, weight or quotas."""
    from quanta.db.errors import Conflict

    fields = dict(role=role, weight=weight, max_alive_trials=max_alive_trials, max_devices=max_devices)
    try:
        _store(db).update_user(name, **{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        raise _invalid(exc) from None
    except KeyError:
        raise fail(f"user {name} not found") from None
    except Conflict as exc:
        raise fail(str(exc)) from None


@users_app.command("delete")
def users_delete(
    name: Annotated[str, typer.Argument(help="user name")],
    force: Annotated[bool, typer.Option("--force", help="stop the user's active searches first")] = False,
    db: Db = DEFAULT_DB,
) -> None:
    """Delete a user and their tokens (refused while they have active searches, unless --force)."""
    from quanta.db.errors import Conflict

    try:
        stopped = _store(db).delete_user(name, time.time(), force=force)
    except KeyError:
        raise fail(f"user {name} not found") from None
    except Conflict as exc:
        raise fail(str(exc)) from None
    typer.echo(f"deleted user {name}" + (f"; stopping searches {stopped}" if stopped else ""), err=True)


@tokens_app.command("create")
def tokens_create(
    name: Annotated[str, typer.Argument(help="the user the token belongs to")],
    expires_days: Annotated[int | None, typer.Option(min=1, max=3650, help="days until it stops working")] = None,
    label: Annotated[str, typer.Option(help="a label shown in listings")] = "cli",
    db: Db = DEFAULT_DB,
) -> None:
    """Create a token for a user and print it (alone, on stdout; it is not shown again)."""
    now = time.time()
    expires = None if expires_days is None else now + expires_days * 86_400
    try:
        new = _store(db).create_token(name, now, name=label, expires_at=expires)
    except KeyError:
        raise fail(f"user {name} not found") from None
    typer.echo(f"token {new.id} ({new.prefix}...) for {name}, expires {_when(new.expires_at)}", err=True)
    typer.echo(new.token)


def _token_line(t: TokenOut) -> str:
    state = "active" if t.active else ("revoked" if t.revoked_at is not None else "expired")
    return f"{t.id}\t{t.prefix or '-'}\t{t.user}\t{t.name}\t{state}\t{_when(t.created_at)}\t{_when(t.expires_at)}"


@tokens_app.command("list")
def tokens_list(name: Annotated[str, typer.Argument(help="user name")], db: Db = DEFAULT_DB) -> None:
    """List a user's tokens: id, prefix, user, label, state, created, expires (never the tokens)."""
    store = _store(db)
    if store.user(name) is None:
        raise fail(f"user {name} not found")
    typer.echo("id\tprefix\tuser\tlabel\tstate\tcreated\texpires")
    for t in store.tokens(name, time.time()):
        typer.echo(_token_line(t))


@tokens_app.command("revoke")
def tokens_revoke(
    ref: Annotated[str, typer.Argument(metavar="TOKEN_ID_OR_PREFIX", help="token id, prefix (6+ characters) or token")],
    db: Db = DEFAULT_DB,
) -> None:
    """Revoke a token: a running server refuses it from its next request."""
    from quanta.db.errors import Conflict

    try:
        t = _store(db).revoke_token(ref, time.time())
    except KeyError as exc:
        raise fail(str(exc.args[0])) from None
    except Conflict as exc:
        raise fail(str(exc)) from None
    typer.echo(f"revoked token {t.id} of {t.user}", err=True)
