"""App passwords: how a CalDAV client signs in, since it cannot carry the identity
provider's tokens.

A password is 32 random bytes (URL-safe base64 behind a `tap_` prefix), shown once; only
its SHA-256 is kept. A slow KDF (scrypt, argon2) protects passwords people choose, which
are guessable; these are not, and a preimage of SHA-256 for a 256-bit secret is out of
reach, so the fast hash costs nothing in safety. It does save a cache: every DAV request
is checked against the database (one indexed lookup), so a revoked password fails at once
on every replica with nothing to invalidate.

Wrong passwords for a user are counted in the database (`dav_sign_ins`), so that guessing
is slowed on every replica alike: from the FREE_FAILURES-th wrong one within
FAILURE_WINDOW_S, each further attempt is refused (429) until a delay that doubles with
each wrong one (up to MAX_DELAY_S) has passed.
"""

import base64
import binascii
import hashlib
import secrets
import uuid
from dataclasses import dataclass

from sqlalchemy import delete, text
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.db import Database
from backend.errors import DomainError, NotFound, RetryLater
from backend.models.dav import (
    AppPassword,
    AppPasswordCreate,
    AppPasswordCreated,
    AppPasswordPublic,
    AppPasswordsPublic,
)

PREFIX = "tap_"
FREE_FAILURES = 5
FAILURE_WINDOW_S = 900
FIRST_DELAY_S = 30
MAX_DELAY_S = 900
# last_used_at is written at most this often per password (not on every request).
USED_GRANULARITY_S = 60


class AppPasswordNotFound(NotFound):
    detail = "No such app password."


class NotSignedIn(DomainError):
    status_code = 401
    detail = "Sign in with your user name and an app password."

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": 'Basic realm="todo-agent"'})


class SignInSlowed(RetryLater):
    status_code = 429
    detail = "Too many wrong passwords for this user; try again later."


@dataclass(frozen=True, slots=True)
class Grant:
    """Who a DAV request acts for, and whether its password may change anything."""

    user_id: str
    password_id: uuid.UUID
    read_only: bool


def _hash(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


async def create(*, db: AsyncSession, user: str, data: AppPasswordCreate) -> AppPasswordCreated:
    password = PREFIX + secrets.token_urlsafe(32)
    row = AppPassword(
        user_id=user, name=data.name, read_only=data.read_only, secret_hash=_hash(password)
    )
    db.add(row)
    await db.flush()
    return AppPasswordCreated(
        id=row.id,
        name=row.name,
        username=user,
        password=password,
        read_only=row.read_only,
        created_at=row.created_at,
    )


async def list_passwords(*, db: AsyncSession, user: str) -> AppPasswordsPublic:
    statement = (
        select(AppPassword)
        .where(col(AppPassword.user_id) == user)
        .order_by(col(AppPassword.created_at), col(AppPassword.id))
    )
    rows = (await db.exec(statement)).all()
    return AppPasswordsPublic(
        data=[AppPasswordPublic.model_validate(row, update={"username": user}) for row in rows]
    )


async def revoke(*, db: AsyncSession, user: str, password_id: uuid.UUID) -> None:
    statement = (
        delete(AppPassword)
        .where(col(AppPassword.user_id) == user, col(AppPassword.id) == password_id)
        .returning(col(AppPassword.id))
    )
    if (await db.exec(statement)).first() is None:
        raise AppPasswordNotFound()


def credentials(authorization: str | None) -> tuple[str, str]:
    """The user name and password of an HTTP Basic `Authorization` header."""
    if authorization is None:
        raise NotSignedIn()
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        raise NotSignedIn()
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise NotSignedIn() from None
    username, colon, password = decoded.partition(":")
    if not colon or not username or len(username) > 255 or not password:
        raise NotSignedIn()
    return username, password


# One statement: the password (its last use noted, at most once a USED_GRANULARITY_S), and
# whether the user is held back by wrong guesses.
_CHECK = text(
    """
    WITH found AS (
        SELECT id, read_only, last_used_at FROM app_passwords
        WHERE user_id = :user AND secret_hash = :hashed
    ), touched AS (
        UPDATE app_passwords p SET last_used_at = now() FROM found
        WHERE p.id = found.id AND (found.last_used_at IS NULL
              OR found.last_used_at < now() - make_interval(secs => CAST(:every AS float8)))
        RETURNING p.id
    )
    SELECT (SELECT id FROM found) AS id, (SELECT read_only FROM found) AS read_only,
           (SELECT extract(epoch FROM blocked_until - now()) FROM dav_sign_ins
            WHERE user_id = :user AND blocked_until > now()) AS wait_s,
           EXISTS (SELECT FROM dav_sign_ins WHERE user_id = :user) AS failed_before,
           (SELECT count(*) FROM touched) AS touched
    """
)
# One more wrong password: counted (afresh after a quiet window), and from the
# FREE_FAILURES-th on, the user held back. Only for a user that exists.
_FAILED = text(
    """
    INSERT INTO dav_sign_ins AS s (user_id, failures, last_failure_at)
    SELECT CAST(:user AS varchar), 1, now() WHERE EXISTS (SELECT FROM users WHERE id = :user)
    ON CONFLICT (user_id) DO UPDATE SET
        failures = CASE
            WHEN s.last_failure_at < now() - make_interval(secs => CAST(:window AS float8))
            THEN 1 ELSE s.failures + 1 END,
        last_failure_at = now()
    RETURNING failures
    """
)
_HOLD = text(
    "UPDATE dav_sign_ins SET blocked_until = now() + make_interval(secs => CAST(:delay AS float8))"
    " WHERE user_id = :user"
)
_FORGIVE = text("DELETE FROM dav_sign_ins WHERE user_id = :user")


async def verify(database: Database, *, authorization: str | None) -> Grant:
    """The grant of a request's Basic credentials; 401 for wrong ones, 429 while the user
    is held back by earlier wrong ones."""
    username, password = credentials(authorization)
    hashed = _hash(password)
    async with database.transaction(as_user=username) as db:
        connection = await db.connection()
        row = (
            await connection.execute(
                _CHECK, {"user": username, "hashed": hashed, "every": USED_GRANULARITY_S}
            )
        ).one()
        if row.wait_s is not None:
            raise SignInSlowed(retry_after_s=float(row.wait_s))
        if row.id is not None:
            if row.failed_before:
                await connection.execute(_FORGIVE, {"user": username})
            return Grant(username, row.id, row.read_only)
        failures = (
            await connection.execute(_FAILED, {"user": username, "window": FAILURE_WINDOW_S})
        ).scalar_one_or_none()
        if failures is not None and failures >= FREE_FAILURES:
            delay = min(FIRST_DELAY_S * 2 ** (failures - FREE_FAILURES), MAX_DELAY_S)
            await connection.execute(_HOLD, {"user": username, "delay": delay})
    raise NotSignedIn("Wrong user name or app password.")
