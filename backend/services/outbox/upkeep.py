"""Upkeep of the outbox: prune events past their retention, read the gauges."""

import asyncio
import logging

from backend import metrics
from backend.db import Database
from backend.services.outbox import store
from backend.services.outbox.worker import BackgroundWorker
from backend.settings import Settings

logger = logging.getLogger("todo_agent.events")

GAUGES_EVERY_S = 5.0
PRUNE_EVERY = 12  # gauge rounds: once a minute


class Upkeep(BackgroundWorker):
    name = "outbox-upkeep"

    def __init__(self, settings: Settings, database: Database) -> None:
        self._database = database
        self._retention_s = settings.events_retention_h * 3600
        self._webhooks = settings.webhooks_enabled

    async def once(self, *, prune: bool) -> None:
        async with self._database.autocommit() as connection:
            if prune:
                await store.prune(
                    connection, retention_s=self._retention_s, keep_undelivered=self._webhooks
                )
            metrics.EVENTS_WRITTEN.set(await store.events_written(connection))
            if self._webhooks:
                metrics.WEBHOOK_BACKLOG.set(await store.webhook_backlog(connection))

    async def _run(self) -> None:
        rounds = 0
        while True:
            try:
                await self.once(prune=rounds % PRUNE_EVERY == 0)
            except Exception:
                logger.warning("outbox upkeep failed; trying again", exc_info=True)
            rounds += 1
            await asyncio.sleep(GAUGES_EVERY_S)
