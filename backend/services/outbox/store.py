"""The outbox's SQL, in one place, and events as CloudEvents."""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

# The user's events after `after`, still within the replay window, in id order (which is
# their commit order: the trigger locks the user before drawing an id).
_SINCE = text(
    "SELECT id, user_id, type, subject, occurred_at, data FROM events "
    "WHERE user_id = :user_id AND id > :after "
    "AND occurred_at > now() - make_interval(secs => :retention_s) "
    "ORDER BY id LIMIT :limit"
)
_LAST_ID = text("SELECT coalesce(max(id), 0) FROM events WHERE user_id = :user_id")
PAGE = 500


@dataclass(frozen=True, slots=True)
class StoredEvent:
    id: int
    user_id: str
    type: str
    subject: Any
    occurred_at: datetime
    data: dict[str, Any]

    def cloud_event(self, source: str) -> dict[str, Any]:
        """The CloudEvents 1.0 JSON object of this event."""
        return {
            "specversion": "1.0",
            "id": str(self.id),
            "source": source,
            "type": self.type,
            "time": self.occurred_at.isoformat().replace("+00:00", "Z"),
            # A task's or list's id; the user's own for `user.deleted` (no subject stored).
            "subject": str(self.subject) if self.subject is not None else self.user_id,
            "datacontenttype": "application/json",
            "data": self.data,
        }

    def json(self, source: str) -> str:
        return json.dumps(self.cloud_event(source), ensure_ascii=False, separators=(",", ":"))


def _events(rows: Sequence[Any]) -> list[StoredEvent]:
    return [StoredEvent(*row) for row in rows]


async def events_since(
    connection: AsyncConnection, *, user_id: str, after: int, retention_s: float
) -> list[StoredEvent]:
    """One page (at most PAGE) of the user's events after id `after`."""
    result = await connection.execute(
        _SINCE, {"user_id": user_id, "after": after, "retention_s": retention_s, "limit": PAGE}
    )
    return _events(result.all())


async def last_event_id(connection: AsyncConnection, *, user_id: str) -> int:
    """The id of the user's newest event (0 when there is none)."""
    value = (await connection.execute(_LAST_ID, {"user_id": user_id})).scalar_one()
    return int(value)


# -- reminders --------------------------------------------------------------------------

# Claim what is due: rows SKIP LOCKED leaves to this replica, with whom each reminder is for
# (the assignee, else the creator, else the list's owner). Then lock those users in id
# order (the trigger locks each to draw its event id; taking them in one order keeps two
# replicas firing for the same users from deadlocking), then fire: `reminded_at` is set
# only where it is still NULL, under those locks, so however many replicas run, a reminder
# fires once, and the trigger writes its `reminder.due` event in the same transaction. A
# process killed midway rolls back and another fires it.
_CLAIM_DUE = text(
    "SELECT t.id, COALESCE(t.assignee_id, t.created_by, l.owner_id) FROM tasks t"
    " JOIN lists l ON l.id = t.list_id"
    " WHERE t.remind_at IS NOT NULL AND t.reminded_at IS NULL AND NOT t.completed"
    " AND t.deleted_at IS NULL AND t.remind_at <= now()"
    " ORDER BY t.remind_at LIMIT :batch FOR NO KEY UPDATE OF t SKIP LOCKED"
)
_LOCK_OWNERS = text("SELECT id FROM users WHERE id = ANY(:ids) ORDER BY id FOR NO KEY UPDATE")
_FIRE = text(
    "UPDATE tasks SET reminded_at = now() WHERE id = ANY(:ids) AND reminded_at IS NULL"
    " RETURNING remind_at, reminded_at"
)
# When the next unfired reminder is due (what _CLAIM_DUE would claim then), and the clock.
_NEXT_DUE = text(
    "SELECT EXTRACT(EPOCH FROM min(t.remind_at))::float8,"
    " EXTRACT(EPOCH FROM clock_timestamp())::float8 FROM tasks t"
    " WHERE t.remind_at IS NOT NULL AND t.reminded_at IS NULL AND NOT t.completed"
    " AND t.deleted_at IS NULL"
)
_LATE_AFTER = text("SELECT set_config('todo_agent.late_after_s', :late_after_s, true)")


async def fire_reminders(
    connection: AsyncConnection, *, batch: int, late_after_s: float
) -> list[tuple[datetime, datetime]]:
    """Fire the reminders that came due (in the caller's transaction): (remind_at, fired_at)."""
    due = (await connection.execute(_CLAIM_DUE, {"batch": batch})).all()
    if not due:
        return []
    await connection.execute(_LOCK_OWNERS, {"ids": sorted({row[1] for row in due})})
    await connection.execute(_LATE_AFTER, {"late_after_s": str(late_after_s)})
    rows = (await connection.execute(_FIRE, {"ids": [row[0] for row in due]})).all()
    return [(row[0], row[1]) for row in rows]


async def next_reminder(connection: AsyncConnection) -> tuple[float | None, float]:
    """(When the next unfired reminder is due, the database's clock), seconds since the
    epoch."""
    row = (await connection.execute(_NEXT_DUE)).one()
    return row[0], row[1]


# -- webhooks ---------------------------------------------------------------------------

# Claim the deliveries that are due: the attempt is counted and the row leased (pushed
# `lease_s` into the future) in one statement, so no other replica claims it meanwhile; a
# process that dies mid-attempt leaves the lease to run out and the next claim retries.
_CLAIM = text(
    "WITH due AS ("
    " SELECT id FROM events WHERE webhook_due_at <= now()"
    " ORDER BY webhook_due_at LIMIT :batch FOR UPDATE SKIP LOCKED)"
    " UPDATE events SET webhook_attempts = events.webhook_attempts + 1,"
    " webhook_due_at = now() + make_interval(secs => :lease_s)"
    " FROM due WHERE events.id = due.id"
    " RETURNING events.id, events.user_id, events.type, events.subject,"
    " events.occurred_at, events.data, events.webhook_attempts"
)
# The outcome of the attempt claimed as number `attempt`; a stale one (the lease ran out and
# another replica claimed the next attempt) changes nothing.
_SETTLE = text(
    "UPDATE events SET webhook_due_at = CASE WHEN CAST(:retry_s AS float8) IS NULL THEN NULL"
    " ELSE now() + make_interval(secs => :retry_s) END, webhook_outcome = :outcome"
    " WHERE id = :id AND webhook_attempts = :attempt"
)
# An attempt that this process stopped in the middle of: the delivery is handed back, due
# now and not counted (it did not conclude), so the next process to run sends it at once
# instead of when the lease runs out; a lease lost meanwhile changes nothing.
_HAND_BACK = text(
    "UPDATE events SET webhook_due_at = now(), webhook_attempts = webhook_attempts - 1"
    " WHERE id = :id AND webhook_attempts = :attempt"
)
# When the next delivery is due (a retry, or a lease running out), and the clock.
_NEXT_DELIVERY = text(
    "SELECT EXTRACT(EPOCH FROM min(webhook_due_at))::float8,"
    " EXTRACT(EPOCH FROM clock_timestamp())::float8 FROM events WHERE webhook_due_at IS NOT NULL"
)
_BACKLOG = text("SELECT count(*) FROM events WHERE webhook_due_at IS NOT NULL")
_WRITTEN = text("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM events_id_seq")


async def claim_deliveries(
    connection: AsyncConnection, *, batch: int, lease_s: float
) -> list[tuple[StoredEvent, int]]:
    rows = (await connection.execute(_CLAIM, {"batch": batch, "lease_s": lease_s})).all()
    return [(StoredEvent(*row[:6]), row[6]) for row in rows]


async def next_delivery(connection: AsyncConnection) -> tuple[float | None, float]:
    """(When the next delivery is due, the database's clock), seconds since the epoch."""
    row = (await connection.execute(_NEXT_DELIVERY)).one()
    return row[0], row[1]


async def settle_delivery(
    connection: AsyncConnection,
    *,
    event_id: int,
    attempt: int,
    outcome: str | None,
    retry_s: float | None,
) -> None:
    await connection.execute(
        _SETTLE, {"id": event_id, "attempt": attempt, "outcome": outcome, "retry_s": retry_s}
    )


async def hand_back_delivery(connection: AsyncConnection, *, event_id: int, attempt: int) -> None:
    await connection.execute(_HAND_BACK, {"id": event_id, "attempt": attempt})


async def webhook_backlog(connection: AsyncConnection) -> int:
    return int((await connection.execute(_BACKLOG)).scalar_one())


async def events_written(connection: AsyncConnection) -> int:
    return int((await connection.execute(_WRITTEN)).scalar_one())


# -- upkeep -----------------------------------------------------------------------------

_PRUNE = text(
    "DELETE FROM events WHERE id IN (SELECT id FROM events"
    " WHERE occurred_at < now() - make_interval(secs => :retention_s)"
    " AND (webhook_due_at IS NULL OR NOT :keep_undelivered) LIMIT 5000)"
)


async def prune(connection: AsyncConnection, *, retention_s: float, keep_undelivered: bool) -> int:
    """Delete (a batch of) events older than the retention; with webhooks on, not those
    still to be delivered."""
    result = await connection.execute(
        _PRUNE, {"retention_s": retention_s, "keep_undelivered": keep_undelivered}
    )
    return int(result.rowcount)
