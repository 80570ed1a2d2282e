"""Idempotency keys: a retried request gets the first answer, and runs nothing twice.

A key is claimed in the same transaction as the first effect of its request, and the
answer is stored in the same transaction as its last, so a key is either free, running,
or answered; never answered without its effects, nor effects without a running key.
Keys are per user and expire after `IDEMPOTENCY_TTL_S` (24 hours).

A chat turn's key also names the user message the turn stored. If the turn's replica dies,
the turn is not lost (another replica's sweeper finishes it, services/sweeper.py): while
its session is still held, by the dead attempt or the one finishing it, the key stays
running (409), and the sweeper stores the key's answer with the reply. Only a request that
ended without an answer and holds nothing (it failed) can be taken over by a retry.
"""

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, delete, func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.errors import DomainError, IdempotencyInProgress, IdempotencyKeyReused
from backend.models.idempotency import IdempotencyKey

MAX_KEY_CHARS = 255
_KEYS: Table = IdempotencyKey.__table__  # type: ignore[attr-defined]
# The key's turn no longer holds its session (it holds it while it runs, and once lapsed
# until another replica has finished it). Correlated with the conflicting key's row.
_TURN_GONE = text(
    "NOT EXISTS (SELECT FROM agent_messages m JOIN agent_sessions s ON s.id = m.session_id"
    " WHERE m.id = idempotency_keys.message_id AND s.lease_owner IS NOT NULL)"
)


class InvalidIdempotencyKey(DomainError):
    status_code = 422
    detail = "Idempotency-Key must be 1 to 255 printable ASCII characters."


@dataclass(frozen=True, slots=True)
class Replay:
    """The stored answer of an earlier request with the same key."""

    status_code: int
    body: dict[str, Any]

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        """A stored chat answer, told again as the events of a streamed turn: each call
        with its result, or the approval request of a call held for the person's yes."""
        answer = self.body
        events: list[tuple[str, dict[str, Any]]] = [
            ("session", {"session_id": answer["session_id"], "replayed": True})
        ]
        results = {result["tool_call_id"]: result for result in answer["tool_results"]}
        held = {pending["tool_call_id"]: pending for pending in answer.get("pending_approvals", ())}
        for call in answer["tool_calls"]:
            if (result := results.get(call["id"])) is not None:
                events += [("tool_call", call), ("tool_result", result)]
            elif (pending := held.get(call["id"])) is not None:
                events.append(("approval_request", pending))
        return [*events, ("delta", {"text": answer["response"]}), ("done", answer)]


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
    db: AsyncConnection,
    *,
    owner: str,
    key: str,
    fingerprint: str,
    ttl_s: float,
    lock_s: float,
    message_id: uuid.UUID | None = None,
) -> Replay | None:
    """Take the key for this request (None), or return the answer it already has.
    `message_id`: the user message a chat turn will store under the key.

    Raises IdempotencyKeyReused (422) for the same key with another request, and
    IdempotencyInProgress (409, Retry-After) while the first request is still running,
    here or finished by another replica. A request that ended holding the key without an
    answer (its lock expired, and no turn of its message holds a session) can be taken over
    by a retry.
    """
    keys = _KEYS.c

    mine = (keys.user_id == owner) & (keys.key == key)
    # Expired keys of this user are free again; this also keeps the table small.
    await db.execute(delete(_KEYS).where(keys.user_id == owner, keys.expires_at < func.now()))
    statement = insert(_KEYS).values(
        user_id=owner,
        key=key,
        request_hash=fingerprint,
        locked_until=func.now() + _interval(lock_s),
        expires_at=func.now() + _interval(ttl_s),
        message_id=message_id,
    )
    taken = statement.on_conflict_do_update(
        index_elements=[keys.user_id, keys.key],
        set_={
            "locked_until": statement.excluded.locked_until,
            "message_id": statement.excluded.message_id,
        },
        where=(
            keys.response.is_(None)
            & (keys.locked_until < func.now())
            & (keys.request_hash == fingerprint)
            & _TURN_GONE
        ),
    ).returning(keys.key)
    if (await db.execute(taken)).first() is not None:
        return None
    existing = (
        await db.execute(select(keys.request_hash, keys.status_code, keys.response).where(mine))
    ).one()
    if existing.request_hash != fingerprint:
        raise IdempotencyKeyReused()
    if existing.response is None or existing.status_code is None:
        raise IdempotencyInProgress()
    return Replay(status_code=existing.status_code, body=existing.response)


async def store(
    db: AsyncConnection, *, owner: str, key: str, status_code: int, body: dict[str, Any]
) -> None:
    """Record the answer, in the transaction of the request's last effect."""
    await db.execute(
        update(_KEYS)
        .where(_KEYS.c.user_id == owner, _KEYS.c.key == key)
        .values(status_code=status_code, response=body, locked_until=None)
    )


async def store_for_message(
    db: AsyncConnection, *, owner: str, message_id: uuid.UUID, body: dict[str, Any]
) -> None:
    """Record a chat turn's answer for the key that names its user message, if one does:
    a turn finished by another replica than the one its request reached."""
    await db.execute(
        update(_KEYS)
        .where(_KEYS.c.user_id == owner, _KEYS.c.message_id == message_id)
        .values(status_code=200, response=body, locked_until=None)
    )
