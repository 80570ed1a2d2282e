"""Idempotency keys: a retried request gets the first answer, and runs nothing twice.

A key is claimed in the same transaction as the first effect of its request, and the
answer is stored in the same transaction as its last, so a key is either free, running,
or answered; never answered without its effects, nor effects without a running key.
Keys are per user and expire after `IDEMPOTENCY_TTL_S` (24 hours).
"""

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, update
from sqlalchemy.dialects.postgresql import insert
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.errors import DomainError, IdempotencyInProgress, IdempotencyKeyReused
from backend.models.idempotency import IdempotencyKey

MAX_KEY_CHARS = 255


class InvalidIdempotencyKey(DomainError):
    status_code = 422
    detail = "Idempotency-Key must be 1 to 255 printable ASCII characters."


@dataclass(frozen=True, slots=True)
class Replay:
    """The stored answer of an earlier request with the same key."""

    status_code: int
    body: dict[str, Any]


def check_key(key: str) -> str:
    if not 1 <= len(key) <= MAX_KEY_CHARS or not all(" " <= c <= "~" for c in key):
        raise InvalidIdempotencyKey()
    return key


def request_hash(operation: str, body: Any) -> str:
    """What makes two requests "the same": the operation and its canonical body."""
    canonical = json.dumps([operation, body], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _interval(seconds: float) -> Any:
    return func.make_interval(0, 0, 0, 0, 0, 0, seconds)


async def claim(
    db: AsyncSession,
    *,
    owner: str,
    key: str,
    fingerprint: str,
    ttl_s: float,
    lock_s: float,
) -> Replay | None:
    """Take the key for this request (None), or return the answer it already has.

    Raises IdempotencyKeyReused (422) for the same key with another request, and
    IdempotencyInProgress (409) while the first request is still running. A request that
    died holding the key (its lock expired, no answer) can be taken over by a retry.
    """
    table = IdempotencyKey.__table__  # type: ignore[attr-defined]
    await db.exec(  # expired keys of this user are free again; keep the table small
        delete(IdempotencyKey).where(
            col(IdempotencyKey.user_id) == owner, col(IdempotencyKey.expires_at) < func.now()
        )
    )
    statement = insert(table).values(
        user_id=owner,
        key=key,
        request_hash=fingerprint,
        locked_until=func.now() + _interval(lock_s),
        expires_at=func.now() + _interval(ttl_s),
    )
    taken = statement.on_conflict_do_update(
        index_elements=[table.c.user_id, table.c.key],
        set_={"locked_until": statement.excluded.locked_until},
        where=(
            table.c.response.is_(None)
            & (table.c.locked_until < func.now())
            & (table.c.request_hash == fingerprint)
        ),
    ).returning(table.c.key)
    if (await db.exec(taken)).first() is not None:
        return None
    existing = (
        await db.exec(
            select(IdempotencyKey).where(
                col(IdempotencyKey.user_id) == owner, col(IdempotencyKey.key) == key
            )
        )
    ).one()
    if existing.request_hash != fingerprint:
        raise IdempotencyKeyReused()
    if existing.response is None or existing.status_code is None:
        raise IdempotencyInProgress()
    return Replay(status_code=existing.status_code, body=existing.response)


async def store(
    db: AsyncSession, *, owner: str, key: str, status_code: int, body: dict[str, Any]
) -> None:
    """Record the answer, in the transaction of the request's last effect."""
    await db.exec(
        update(IdempotencyKey)
        .where(col(IdempotencyKey.user_id) == owner, col(IdempotencyKey.key) == key)
        .values(status_code=status_code, response=body, locked_until=None)
    )
