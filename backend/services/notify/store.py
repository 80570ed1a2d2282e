"""The deliveries' SQL, in one place: claimed with a lease, settled once."""

from dataclasses import dataclass
from datetime import datetime, time
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

# What is due, claimed with a lease (the attempt counted, due_at pushed past the send's
# time) in one statement, with what sending needs: no other replica claims it meanwhile; a
# process that dies mid-send leaves the lease to run out and the next claim sends again.
_CLAIM = text(
    "WITH due AS ("
    " SELECT id FROM notify_deliveries WHERE due_at <= now()"
    " ORDER BY due_at LIMIT :batch FOR UPDATE SKIP LOCKED),"
    " claimed AS ("
    " UPDATE notify_deliveries d SET attempts = d.attempts + 1,"
    " due_at = now() + make_interval(secs => :lease_s)"
    " FROM due WHERE d.id = due.id"
    " RETURNING d.id, d.user_id, d.kind, d.channel, d.subscription_id, d.task_id,"
    " d.occurrence, d.payload, d.attempts)"
    " SELECT c.*, p.endpoint, p.p256dh, p.auth, s.email_address, s.email_verified,"
    " s.ntfy_url, s.quiet_start, s.quiet_end, u.timezone, now() AS now"
    " FROM claimed c JOIN users u ON u.id = c.user_id"
    " LEFT JOIN push_subscriptions p ON p.id = c.subscription_id"
    " LEFT JOIN notification_settings s ON s.user_id = c.user_id"
)
# The outcomes of a batch of attempts, in one statement; a stale one (the lease ran out and
# another replica claimed the next attempt) changes nothing. A verification code is not
# kept once sent. (Sent in id order: two batches that meet, which only a run-out lease
# makes possible, then tend to lock their rows in one order.)
_SETTLE = text(
    "UPDATE notify_deliveries d SET due_at = CASE WHEN o.retry_s IS NULL"
    " THEN NULL ELSE now() + make_interval(secs => o.retry_s) END, outcome = o.outcome,"
    " payload = CASE WHEN d.kind = 'verify' AND o.retry_s IS NULL THEN NULL ELSE d.payload END"
    " FROM unnest(CAST(:ids AS bigint[]), CAST(:attempts AS integer[]),"
    " CAST(:outcomes AS text[]), CAST(:retry_s AS float8[])) AS o(id, attempt, outcome, retry_s)"
    " WHERE d.id = o.id AND d.attempts = o.attempt"
)
# Held (quiet hours) or handed back (the process is stopping): due again at `until`, the
# attempt not counted, as it did not happen.
_HOLD = text(
    "UPDATE notify_deliveries SET due_at = :until, attempts = attempts - 1"
    " WHERE id = :id AND attempts = :attempt"
)
_GONE = text("DELETE FROM push_subscriptions WHERE id = :id")
_NEXT = text(
    "SELECT EXTRACT(EPOCH FROM least("
    " (SELECT min(due_at) FROM notify_deliveries WHERE due_at IS NOT NULL),"
    " (SELECT min(digest_next_at) FROM notification_settings WHERE digest_next_at IS NOT NULL)"
    ") - now())"
)
_DIGESTS_DUE = text(
    "SELECT s.user_id FROM notification_settings s JOIN users u ON u.id = s.user_id"
    " WHERE s.digest_next_at <= now() AND u.erasing_at IS NULL"
    " ORDER BY s.digest_next_at LIMIT :batch"
)


@dataclass(frozen=True, slots=True)
class Claimed:
    id: int
    user_id: str
    kind: str
    channel: str
    subscription_id: Any
    task_id: Any
    occurrence: datetime | None
    payload: dict[str, Any] | None
    attempt: int
    endpoint: str | None
    p256dh: str | None
    auth: str | None
    email_address: str | None
    email_verified: bool | None
    ntfy_url: str | None
    quiet_start: time | None
    quiet_end: time | None
    timezone: str
    now: datetime


async def claim(connection: AsyncConnection, *, batch: int, lease_s: float) -> list[Claimed]:
    rows = (await connection.execute(_CLAIM, {"batch": batch, "lease_s": lease_s})).all()
    return [Claimed(*row) for row in rows]


@dataclass(frozen=True, slots=True)
class Settled:
    """The outcome of attempt `attempt` of delivery `id`; due again after `retry_s`, or
    never (None)."""

    id: int
    attempt: int
    outcome: str
    retry_s: float | None


async def settle_many(connection: AsyncConnection, settled: list[Settled]) -> None:
    ordered = sorted(settled, key=lambda one: one.id)
    await connection.execute(
        _SETTLE,
        {
            "ids": [one.id for one in ordered],
            "attempts": [one.attempt for one in ordered],
            "outcomes": [one.outcome for one in ordered],
            "retry_s": [one.retry_s for one in ordered],
        },
    )


async def hold(
    connection: AsyncConnection, *, delivery_id: int, attempt: int, until: datetime
) -> None:
    await connection.execute(_HOLD, {"id": delivery_id, "attempt": attempt, "until": until})


async def forget_subscription(connection: AsyncConnection, *, subscription_id: Any) -> None:
    """A push service said the subscription is gone: it, its deliveries and tokens go."""
    await connection.execute(_GONE, {"id": subscription_id})


async def seconds_to_next(connection: AsyncConnection) -> float | None:
    """How long until the next delivery or daily plan is due (None: nothing waits)."""
    value = (await connection.execute(_NEXT)).scalar_one()
    return float(value) if value is not None else None


async def digests_due(connection: AsyncConnection, *, batch: int) -> list[str]:
    return [row[0] for row in (await connection.execute(_DIGESTS_DUE, {"batch": batch})).all()]
