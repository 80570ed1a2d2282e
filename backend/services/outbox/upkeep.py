"""Upkeep: prune events past their retention, purge the trash past its retention, forget
the answered MCP questions that have expired and the identity provider's webhook messages
past their retries, finish the erasures that stopped midway, read the outbox's gauges."""

import asyncio
import logging

from backend import metrics
from backend.db import Database
from backend.services import erasure, identity_hook, mcp_states, tasks
from backend.services.outbox import store
from backend.services.outbox.worker import BackgroundWorker
from backend.settings import Settings

logger = logging.getLogger("todo_agent.events")

# Gauges and pruning, once a minute: an idle replica asks nothing more often.
GAUGES_EVERY_S = 60.0
PRUNE_EVERY = 1  # gauge rounds
TRASH_BATCH = 1000


class Upkeep(BackgroundWorker):
    name = "outbox-upkeep"

    def __init__(self, settings: Settings, database: Database) -> None:
        self._database = database
        self._retention_s = settings.events_retention_h * 3600
        self._webhooks = settings.webhooks_enabled
        self._trash_retention_d = settings.trash_retention_d

    async def once(self, *, prune: bool) -> None:
        async with self._database.system() as connection:
            if prune:
                await store.prune(
                    connection, retention_s=self._retention_s, keep_undelivered=self._webhooks
                )
                await mcp_states.prune(connection)
                await identity_hook.prune(connection)
            metrics.EVENTS_WRITTEN.set(await store.events_written(connection))
            if self._webhooks:
                metrics.WEBHOOK_BACKLOG.set(await store.webhook_backlog(connection))
        if prune:
            async with self._database.system() as connection:
                await tasks.purge_expired_trash(
                    connection, retention_d=self._trash_retention_d, batch=TRASH_BATCH
                )
            await erasure.resume_stalled(self._database)

    async def _run(self) -> None:
        rounds = 0
        while True:
            try:
                await self.once(prune=rounds % PRUNE_EVERY == 0)
            except Exception:
                logger.warning("outbox upkeep failed; trying again", exc_info=True)
            rounds += 1
            await asyncio.sleep(GAUGES_EVERY_S)
