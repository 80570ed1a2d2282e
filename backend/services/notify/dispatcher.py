"""The delivery loop: one per process, asleep until the database says there is something
to do (a NOTIFY on `todo_agent_notify`, heard on the event hub's one LISTEN connection) or
until the next delivery or daily plan is due; it never polls.

A round claims what is due with a lease (store.claim: FOR UPDATE SKIP LOCKED, in one
statement), lets the connection go, and starts each send as a task of its own, at most
CONCURRENCY at once, each within the send timeout: a slow or dead push service, mail
server or ntfy server holds one slot for a few seconds, never the loop, another person's
reminders or a chat turn. Outcomes are written in batches (settling.Settlements: one
statement for all that finished while the last batch was written):
delivered (never sent again), retry on WEBHOOK_RETRY_SCHEDULE_S (429, 5xx, no answer),
gone (a push service's 404 or 410: the subscription and its deliveries are removed),
failed. A reminder or daily plan due in the person's quiet hours is held to their end.
The daily plan is written, with its deliveries, in the transaction that inserts its one row
per person and local date (`notify_digests`): sent once a day, whatever runs or crashes."""

import asyncio
import contextlib
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import text

from backend import metrics
from backend.db import Database
from backend.services.notify import messages, store
from backend.services.notify.actions import ActionSigner, Claims, expires_in, instant
from backend.services.notify.messages import Link, Rendered
from backend.services.notify.schedule import digest_day, next_digest_at, quiet_until
from backend.services.notify.senders import Mailer, NtfySender, Outcome, PushSender
from backend.services.notify.settling import Settlements
from backend.services.outbox.worker import BackgroundWorker
from backend.settings import Settings

logger = logging.getLogger("todo_agent.notify")

CHANNEL = "todo_agent_notify"
CONCURRENCY = 64
LOW_WATER = CONCURRENCY // 2
DIGEST_BATCH = 50
# The longest sleep: a NOTIFY sent while the listening connection was being replaced is
# lost, so look now and then anyway (three statements per replica a minute).
MAX_SLEEP_S = 60.0


class NotifyDispatcher(BackgroundWorker):
    name = "notify"

    def __init__(
        self,
        settings: Settings,
        database: Database,
        *,
        push: PushSender | None,
        mailer: Mailer | None,
        ntfy: NtfySender,
        signer: ActionSigner | None,
    ) -> None:
        self._database = database
        self._push = push
        self._mailer = mailer
        self._ntfy = ntfy
        self._signer = signer
        self._schedule = settings.webhook_retry_schedule_s
        self._timeout_s = settings.webhook_timeout_s
        # The whole send (resolving included) is bounded by the timeout; a little more for
        # settling it.
        self._lease_s = settings.webhook_timeout_s + 5
        self._ttl_h = settings.notify_action_ttl_h
        self._base_url = settings.public_base_url or "http://localhost:8000"
        self._mail_from = settings.mail_from or "todo-agent@localhost"
        self._wakeup = asyncio.Event()
        self._sending: set[asyncio.Task[None]] = set()
        self._backlog = False  # the last claim filled every free slot
        self._settlements = Settlements(database, on_retry=self._wakeup.set)

    def wake(self, _payload: str = "") -> None:
        self._wakeup.set()

    async def stop(self) -> None:
        await super().stop()
        for task in list(self._sending):
            task.cancel()
        await asyncio.gather(*self._sending, return_exceptions=True)
        await self._settlements.drain()

    async def _run(self) -> None:
        while True:
            self._wakeup.clear()
            sleep_s = MAX_SLEEP_S
            try:
                await self.plan_digests()
                # When every free slot was filled, more may be due: the loop is woken when
                # half the slots are free again (`_sent`), and claims that many at once.
                if not await self.deliver_due():
                    async with self._database.system() as connection:
                        next_s = await store.seconds_to_next(connection)
                    if next_s is not None:
                        sleep_s = min(max(next_s, 0.01), MAX_SLEEP_S)
            except Exception:
                logger.warning("notification round failed; trying again", exc_info=True)
                sleep_s = 1.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout=sleep_s)

    # -- sending --------------------------------------------------------------------------

    async def deliver_due(self) -> bool:
        """Claim what is due (as many as there are free slots) and start sending it; True
        when every free slot was filled. While that is so, nothing more is claimed until
        half the slots are free: a claim per freed slot cost a round of statements per
        send."""
        if self._backlog and len(self._sending) > LOW_WATER:
            return True
        free = CONCURRENCY - len(self._sending)
        async with self._database.system() as connection:
            claimed = await store.claim(connection, batch=free, lease_s=self._lease_s)
        for delivery in claimed:
            task = asyncio.create_task(self._attempt(delivery))
            self._sending.add(task)
            task.add_done_callback(self._sent)
        self._backlog = len(claimed) == free
        return self._backlog

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        if self._backlog and len(self._sending) <= LOW_WATER:
            self._wakeup.set()  # half the slots are free again: claim what waited for them

    async def _attempt(self, delivery: store.Claimed) -> None:
        metrics.not_counting_statements()
        try:
            held = self._held_until(delivery)
            if held is not None:
                metrics.NOTIFY_DELIVERIES.labels(delivery.channel, "held").inc()
                async with self._database.system() as connection:
                    await store.hold(
                        connection, delivery_id=delivery.id, attempt=delivery.attempt, until=held
                    )
                self._wakeup.set()
                return
            try:
                async with asyncio.timeout(self._timeout_s):
                    outcome, status = await self._send(delivery)
            except TimeoutError:
                outcome, status = "retry", None
            await self._settle(delivery, outcome, status)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2), self._database.system() as connection:
                    await store.hold(
                        connection,
                        delivery_id=delivery.id,
                        attempt=delivery.attempt,
                        until=datetime.now(UTC),
                    )
            raise
        except Exception:
            logger.warning("notification send failed", exc_info=True)

    def _held_until(self, delivery: store.Claimed) -> datetime | None:
        if delivery.kind not in ("reminder", "digest"):
            return None
        if delivery.quiet_start is None or delivery.quiet_end is None:
            return None
        tz = _zone(delivery.timezone)
        return quiet_until(delivery.quiet_start, delivery.quiet_end, tz, delivery.now)

    async def _settle(self, delivery: store.Claimed, outcome: Outcome, status: int | None) -> None:
        retry_s = None
        if outcome == "retry":
            if delivery.attempt <= len(self._schedule):
                retry_s = self._schedule[delivery.attempt - 1]
            else:
                outcome = "gave_up"  # type: ignore[assignment]
        metrics.NOTIFY_DELIVERIES.labels(delivery.channel, outcome).inc()
        logger.info(
            "notification attempt",
            extra={
                "delivery_id": delivery.id,
                "kind": delivery.kind,
                "channel": delivery.channel,
                "attempt": delivery.attempt,
                "status": status,
                "outcome": outcome,
            },
        )
        if outcome == "gone" and delivery.subscription_id is not None:
            async with self._database.system() as connection:
                await store.forget_subscription(
                    connection, subscription_id=delivery.subscription_id
                )
            return
        self._settlements.add(
            store.Settled(
                id=delivery.id, attempt=delivery.attempt, outcome=outcome, retry_s=retry_s
            )
        )

    async def _send(self, delivery: store.Claimed) -> tuple[Outcome, int | None]:
        rendered = self._render(delivery)
        if delivery.channel == "push":
            if self._push is None or rendered.push is None or delivery.endpoint is None:
                return "failed", None
            return await self._push.send(
                endpoint=delivery.endpoint,
                p256dh=delivery.p256dh or "",
                auth=delivery.auth or "",
                payload=rendered.push,
                topic=rendered.topic,
                ttl_s=int(self._ttl_h * 3600),
            )
        if delivery.channel == "email":
            address = (delivery.payload or {}).get("address") or delivery.email_address
            verified = delivery.kind == "verify" or delivery.email_verified
            if self._mailer is None or rendered.mail is None or not address or not verified:
                return "failed", None
            return await self._mailer.send(messages.addressed(rendered.mail(), address), to=address)
        if delivery.channel == "ntfy":
            if rendered.ntfy is None or not delivery.ntfy_url:
                return "failed", None
            body, headers = rendered.ntfy
            return await self._ntfy.send(url=delivery.ntfy_url, body=body, headers=headers)
        return "failed", None

    def _render(self, delivery: store.Claimed) -> Rendered:
        payload = delivery.payload or {}
        context = messages.Context(base_url=self._base_url, mail_from=self._mail_from)
        if delivery.kind == "verify":
            return messages.verification(str(payload.get("code", "")), context)
        if delivery.kind == "test":
            return messages.test(context)
        unsubscribe = None
        if delivery.channel == "email" and self._signer is not None:
            token = self._signer.sign(
                Claims(
                    user=delivery.user_id,
                    action="unsubscribe",
                    kind=delivery.kind,
                    expires=expires_in(90 * 24),
                )
            )
            unsubscribe = f"{self._base_url}/notifications/unsubscribe?token={token}"
        if delivery.kind == "digest":
            context = messages.Context(
                base_url=self._base_url, mail_from=self._mail_from, unsubscribe_url=unsubscribe
            )
            return messages.digest(list(payload.get("lines", [])), context)
        links = self._links(delivery) if self._signer is not None else []
        context = messages.Context(
            base_url=self._base_url,
            mail_from=self._mail_from,
            unsubscribe_url=unsubscribe,
            links=links,
        )
        return messages.reminder(payload, _zone(delivery.timezone), context)

    def _links(self, delivery: store.Claimed) -> list[Link]:
        assert self._signer is not None
        occurrence = instant(delivery.occurrence) if delivery.occurrence else None
        expires = expires_in(self._ttl_h)
        links = []
        for action, title in (("done", "Done"), ("snooze", "Snooze")):
            claims = Claims(
                user=delivery.user_id,
                action=action,
                task=delivery.task_id,
                occurrence=occurrence,
                subscription=delivery.subscription_id,
                expires=expires,
            )
            links.append(Link(action=action, title=title, token=self._signer.sign(claims)))
        return links

    # -- the daily plan -------------------------------------------------------------------

    async def plan_digests(self) -> int:
        """Write the daily plans that came due (each in its person's own transaction, with
        its one row per local date); how many were written."""
        async with self._database.system() as connection:
            due = await store.digests_due(connection, batch=DIGEST_BATCH)
        written = 0
        for user_id in due:
            try:
                written += await self._plan_digest(user_id)
            except Exception:
                logger.warning("daily plan failed", exc_info=True, extra={"user_id": user_id})
        return written

    async def _plan_digest(self, user_id: str) -> int:
        async with self._database.connection(as_user=user_id) as connection:
            row = (await connection.execute(_TAKE_DIGEST, {"user": user_id})).first()
            if row is None:
                return 0  # another replica took it, or it changed meanwhile
            at, channels, zone, now = row
            tz = _zone(zone)
            await connection.execute(
                _NEXT_DIGEST, {"user": user_id, "next": next_digest_at(at, tz, now)}
            )
            day = digest_day(at, tz, now)
            if day is None:
                return 0  # rescheduled (the timezone changed): not yet today
            claimed = (await connection.execute(_CLAIM_DAY, {"user": user_id, "day": day})).first()
            if claimed is None:
                return 0  # today's was written already
            lines = await _plan_lines(connection, user_id=user_id, tz=tz, now=now)
            if not lines:
                return 0  # nothing due: nothing sent (the day's row stays: once a day)
            payload = {"date": day.isoformat(), "lines": lines}
            await queue(
                connection, user_id=user_id, kind="digest", channels=channels, payload=payload
            )
            return 1


# The person's plan settings, taken (row-locked) only if still due: a replica that took it
# first moved digest_next_at on, and this one then finds nothing.
_TAKE_DIGEST = text(
    "SELECT s.digest_at, s.digest_channels, u.timezone, now() FROM notification_settings s"
    " JOIN users u ON u.id = s.user_id WHERE s.user_id = :user AND s.digest_next_at <= now()"
    " AND s.digest_at IS NOT NULL FOR UPDATE OF s SKIP LOCKED"
)
_NEXT_DIGEST = text("UPDATE notification_settings SET digest_next_at = :next WHERE user_id = :user")
_CLAIM_DAY = text(
    "INSERT INTO notify_digests (user_id, local_date) VALUES (:user, :day)"
    " ON CONFLICT DO NOTHING RETURNING local_date"
)
# What the plan names: open tasks due by the end of the local day (overdue ones first),
# and reminders set for today, as the person numbers them.
_PLAN = text(
    "SELECT n.number, t.title, t.due_at, t.remind_at FROM tasks t"
    " JOIN task_numbers n ON n.task_id = t.id AND n.user_id = :user"
    " WHERE NOT t.completed AND t.deleted_at IS NULL AND t.parent_id IS NULL"
    " AND (t.assignee_id IS NULL OR t.assignee_id = :user)"
    " AND (t.due_at < :day_end OR (t.remind_at >= :day_start AND t.remind_at < :day_end))"
    " ORDER BY t.due_at NULLS LAST, n.number LIMIT 30"
)
# Every target of the person for the channels named (a push per subscription).
_QUEUE = text(
    "INSERT INTO notify_deliveries (user_id, kind, channel, subscription_id, payload, due_at)"
    " SELECT :user, :kind, 'push', p.id, CAST(:payload AS jsonb), now()"
    " FROM push_subscriptions p WHERE p.user_id = :user AND 'push' = ANY(:channels)"
    " UNION ALL SELECT :user, :kind, 'email', NULL, CAST(:payload AS jsonb), now()"
    " FROM notification_settings s WHERE s.user_id = :user AND 'email' = ANY(:channels)"
    " AND s.email_verified AND s.email_address IS NOT NULL"
    " UNION ALL SELECT :user, :kind, 'ntfy', NULL, CAST(:payload AS jsonb), now()"
    " FROM notification_settings s WHERE s.user_id = :user AND 'ntfy' = ANY(:channels)"
    " AND s.ntfy_url IS NOT NULL"
)
_WAKE = text("SELECT pg_notify('todo_agent_notify', '')")


async def queue(
    connection: Any, *, user_id: str, kind: str, channels: list[str], payload: dict[str, Any]
) -> int:
    """Queue a notification of `kind` to every target of the person on `channels` (in the
    caller's transaction) and wake the delivery loops; how many targets."""
    result = await connection.execute(
        _QUEUE,
        {
            "user": user_id,
            "kind": kind,
            "channels": list(channels),
            "payload": json.dumps(payload, ensure_ascii=False),
        },
    )
    if result.rowcount:
        await connection.execute(_WAKE)
    return int(result.rowcount)


async def _plan_lines(connection: Any, *, user_id: str, tz: ZoneInfo, now: datetime) -> list[str]:
    local = now.astimezone(tz)
    day_start = datetime.combine(local.date(), datetime.min.time(), tzinfo=tz)
    day_end = datetime.combine(local.date() + timedelta(days=1), datetime.min.time(), tzinfo=tz)
    rows = (
        await connection.execute(
            _PLAN, {"user": user_id, "day_start": day_start, "day_end": day_end}
        )
    ).all()
    lines = []
    for number, title, due_at, remind_at in rows:
        if due_at is not None and due_at < day_start:
            when = f"overdue since {due_at.astimezone(tz).strftime('%a %d %b')}"
        elif due_at is not None and due_at < day_end:
            when = f"due {due_at.astimezone(tz).strftime('%H:%M')}"
        else:
            when = f"reminder {remind_at.astimezone(tz).strftime('%H:%M')}"
        lines.append(f"#{number} {title} ({when})")
    return lines


def _zone(name: str | None) -> ZoneInfo:
    try:
        return ZoneInfo(name or "UTC")
    except (KeyError, ValueError):
        return ZoneInfo("UTC")
