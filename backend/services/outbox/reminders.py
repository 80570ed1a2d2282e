"""The reminder clock: each process looks for reminders that came due and fires them.

Firing is one statement (`store.fire_reminders`): it sets `reminded_at` where it is still
NULL, on rows it locked with SKIP LOCKED, and the trigger writes the `reminder.due` event in
the same transaction. However many replicas run and whichever of them crashes, each
occurrence's reminder fires once; one that came due while nothing ran fires on start, late.

Between rounds the clock sleeps until the next unfired reminder's `remind_at` (read in the
round), or REMINDER_POLL_S at most, and at least GATHER_S: reminders due close together
(thousands a minute) fire in batches, a round each tenth of a second, instead of a round
(some ten statements) for each. A reminder written or moved anywhere (any replica, any
path: the `tasks_reminder_notify` trigger, migration 0021) NOTIFYs `todo_agent_reminders`
with its time, and every clock due to wake later moves its alarm to it, asking nothing. So
an idle replica asks once per REMINDER_POLL_S, and a reminder still fires at its time.
"""

import logging
from datetime import datetime

from backend import metrics
from backend.db import Database
from backend.services.outbox import store
from backend.services.outbox.worker import Alarm, Next, WakingWorker
from backend.settings import Settings

logger = logging.getLogger("todo_agent.reminders")

BATCH = 500
# The least time between two rounds: a reminder fires at most this much later than it
# would, and a round fires all that came due meanwhile.
GATHER_S = 0.1
CHANNEL = "todo_agent_reminders"


class ReminderClock(WakingWorker):
    name = "reminder-clock"

    def __init__(self, settings: Settings, database: Database) -> None:
        self._database = database
        self._late_after_s = settings.reminder_late_after_s
        self.alarm = Alarm(longest_s=settings.reminder_poll_s, shortest_s=GATHER_S)

    async def fire_due(self) -> int:
        """Fire what is due now; how many fired."""
        async with self._database.system() as connection:
            fired = await store.fire_reminders(
                connection, batch=BATCH, late_after_s=self._late_after_s
            )
        self._count(fired)
        return len(fired)

    async def _round(self) -> Next:
        """Fire what is due (when something is), and read when the next one is."""
        async with self._database.system() as connection:
            found = Next.read(await store.next_reminder(connection))
            if found.due is None or found.due > found.now:
                return found
            fired = await store.fire_reminders(
                connection, batch=BATCH, late_after_s=self._late_after_s
            )
            if fired:
                found = Next.read(await store.next_reminder(connection))
        self._count(fired)
        return Next(found.due, found.now, worked=bool(fired))

    def _count(self, fired: list[tuple[datetime, datetime]]) -> None:
        for remind_at, fired_at in fired:
            lag_s = (fired_at - remind_at).total_seconds()
            metrics.REMINDERS_FIRED.labels(str(lag_s > self._late_after_s).lower()).inc()
            metrics.REMINDER_LAG_SECONDS.observe(max(lag_s, 0.0))
        if fired:
            logger.info("reminders fired", extra={"count": len(fired)})
