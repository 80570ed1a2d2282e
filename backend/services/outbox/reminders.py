"""The reminder clock: each process looks for reminders that came due and fires them.

Firing is one statement (`store.fire_reminders`): it sets `reminded_at` where it is still
NULL, on rows it locked with SKIP LOCKED, and the trigger writes the `reminder.due` event in
the same transaction. However many replicas run and whichever of them crashes, each
occurrence's reminder fires once; one that came due while nothing ran fires on start, late.
"""

import asyncio
import logging

from backend import metrics
from backend.db import Database
from backend.services.outbox import store
from backend.services.outbox.worker import BackgroundWorker
from backend.settings import Settings

logger = logging.getLogger("todo_agent.reminders")

BATCH = 100


class ReminderClock(BackgroundWorker):
    name = "reminder-clock"

    def __init__(self, settings: Settings, database: Database) -> None:
        self._database = database
        self._poll_s = settings.reminder_poll_s
        self._late_after_s = settings.reminder_late_after_s

    async def fire_due(self) -> int:
        """Fire what is due now; how many fired."""
        async with self._database.system() as connection:
            fired = await store.fire_reminders(
                connection, batch=BATCH, late_after_s=self._late_after_s
            )
        for remind_at, fired_at in fired:
            lag_s = (fired_at - remind_at).total_seconds()
            metrics.REMINDERS_FIRED.labels(str(lag_s > self._late_after_s).lower()).inc()
            metrics.REMINDER_LAG_SECONDS.observe(max(lag_s, 0.0))
        if fired:
            logger.info("reminders fired", extra={"count": len(fired)})
        return len(fired)

    async def _run(self) -> None:
        while True:
            try:
                if await self.fire_due() == BATCH:
                    continue  # more are due
            except Exception:
                logger.warning("reminder check failed; trying again", exc_info=True)
            await asyncio.sleep(self._poll_s)
