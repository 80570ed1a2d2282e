"""Webhooks: every event POSTed to WEBHOOK_URL, signed per the Standard Webhooks spec.

The outbox rows are the delivery queue (plain SQL, see `store`): an attempt is claimed with
FOR UPDATE SKIP LOCKED and leased in the same statement, so two replicas never send the
same attempt; its outcome is settled only if the lease is still ours. A 2xx delivers; any
other answer, or none within WEBHOOK_TIMEOUT_S, is retried after the next delay of
WEBHOOK_RETRY_SCHEDULE_S with the same `webhook-id`, and given up after the last. Requests
to the API never wait for any of this.

Between rounds the dispatcher sleeps until the next delivery is due (a retry, or another
replica's lease running out), read in the round; a committed event wakes it at once (the
hub's notification). Idle, it asks once a minute.
"""

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime

import httpx
from standardwebhooks import Webhook

from backend import metrics
from backend.db import Database
from backend.services.outbox import store
from backend.services.outbox.store import StoredEvent
from backend.services.outbox.worker import Alarm, Next, WakingWorker
from backend.settings import Settings
from backend.tls import client_tls

logger = logging.getLogger("todo_agent.webhooks")

BATCH = 20


class WebhookDispatcher(WakingWorker):
    name = "webhooks"

    def __init__(self, settings: Settings, database: Database, source: str) -> None:
        assert settings.webhook_url is not None
        assert settings.webhook_secret is not None
        self._url = settings.webhook_url
        self._signer = Webhook(settings.webhook_secret.get_secret_value())
        self._schedule = settings.webhook_retry_schedule_s
        self._timeout_s = settings.webhook_timeout_s
        self._database = database
        self._source = source
        self.alarm = Alarm()
        self._http = httpx.AsyncClient(
            timeout=self._timeout_s, follow_redirects=False, verify=client_tls()
        )

    def wake(self, _user_id: str = "") -> None:
        self.alarm.wake()

    async def stop(self) -> None:
        await super().stop()
        await self._http.aclose()

    async def deliver_due(self) -> int:
        """Claim what is due and attempt it; how many attempts were made."""
        async with self._database.system() as connection:
            claimed = await store.claim_deliveries(
                connection, batch=BATCH, lease_s=self._timeout_s + 10
            )
        await asyncio.gather(*(self._attempt(event, attempt) for event, attempt in claimed))
        return len(claimed)

    async def _attempt(self, event: StoredEvent, attempt: int) -> None:
        body = event.json(self._source)
        now = datetime.now(UTC)
        headers = {
            "content-type": "application/json",
            "webhook-id": str(event.id),
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": self._signer.sign(str(event.id), now, body),
        }
        started = time.perf_counter()
        status: int | None = None
        error: str | None = None
        try:
            # The timeout bounds the whole attempt: httpx's bounds each read, so a receiver
            # sending its answer a little at a time would hold an attempt past its lease.
            async with asyncio.timeout(self._timeout_s):
                response = await self._http.post(self._url, content=body.encode(), headers=headers)
            status = response.status_code
        except (httpx.HTTPError, TimeoutError) as failure:
            error = type(failure).__name__
        except asyncio.CancelledError:
            await self._hand_back(event.id, attempt)
            raise
        delivered = status is not None and 200 <= status < 300
        retry_s = (
            None if delivered or attempt > len(self._schedule) else self._schedule[attempt - 1]
        )
        outcome = "delivered" if delivered else "retry" if retry_s is not None else "gave_up"
        metrics.WEBHOOK_DELIVERIES.labels(outcome).inc()
        logger.info(
            "webhook attempt",
            extra={
                "event_id": event.id,
                "event_type": event.type,
                "attempt": attempt,
                "status": status,
                "error": error,
                "outcome": outcome,
                "duration_ms": round((time.perf_counter() - started) * 1000, 1),
            },
        )
        async with self._database.system() as connection:
            await store.settle_delivery(
                connection,
                event_id=event.id,
                attempt=attempt,
                outcome=None if outcome == "retry" else outcome,
                retry_s=retry_s,
            )

    async def _hand_back(self, event_id: int, attempt: int) -> None:
        """The process is stopping mid-attempt: let the next one send it now, not when the
        lease runs out (best effort: the lease is still there if this fails)."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2), self._database.system() as connection:
                await store.hand_back_delivery(connection, event_id=event_id, attempt=attempt)

    async def _round(self) -> Next:
        """Attempt what is due, and read when the next delivery is (in the claim's own
        transaction when there was nothing to claim)."""
        async with self._database.system() as connection:
            claimed = await store.claim_deliveries(
                connection, batch=BATCH, lease_s=self._timeout_s + 10
            )
            if not claimed:
                return Next.read(await store.next_delivery(connection), worked=False)
        await asyncio.gather(*(self._attempt(event, attempt) for event, attempt in claimed))
        async with self._database.system() as connection:
            return Next.read(await store.next_delivery(connection))
