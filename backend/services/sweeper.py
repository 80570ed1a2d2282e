"""The turn sweeper: each process finishes the turns whose replica died.

A turn holds its session with a lease (`CHAT_SESSION_LEASE_S`) that the replica running it
renews while it runs. When the replica dies (or drains and hands its turns over, which
ends their leases at once), the lease lapses but still names the turn: no new turn can take
the session, and the sweeper of any live replica claims it (one conditional UPDATE: one
sweeper wins) and finishes it as a new attempt with a token of its own (Replica.take_over):
what had committed is read back from the conversation and not done again, the reply is
stored once (a unique index on the user message it answers), and the Idempotency-Key that
names the turn gets its answer. The attempt that lapsed, should it wake up, writes nothing:
its tool calls and its reply are refused once the session names another attempt.

A lease lapsing is a time event: between rounds the sweeper sleeps until the earliest held
lease lapses (`todo_next_lapse`, migration 0021), and `todo_agent_leases` notifications
carrying a lapse time move its alarm earlier without a query. They come from:

- the replica where a turn starts (`lease_taken`), on its listening connection, after the
  turn's transaction: only when no lease it announced lapses later than now, since every
  sweeper wakes at that one anyway and reads the earliest lease then. So a busy replica
  announces once per lease at most, and a turn pays nothing for it;
- the database, when a draining replica cuts a lease short (a trigger, migration 0021).

So an idle replica asks once a minute, a lapsed turn waits about as long as before, and a
busy one sweeps no more often than it polled: once per min(1 s, lease / 3). After the
listening connection is lost and found again, the sweeper looks once.
"""

import asyncio
import logging
import uuid

from backend.db import Database
from backend.services.outbox.hub import EventHub
from backend.services.outbox.worker import Alarm, Next, WakingWorker
from backend.services.replicas.replica import Replica
from backend.services.turns import lapsed_turns, next_lapse
from backend.settings import Settings

logger = logging.getLogger("todo_agent.sweeper")

BATCH = 20
CHANNEL = "todo_agent_leases"


class TurnSweeper(WakingWorker):
    name = "turn-sweeper"

    def __init__(
        self,
        settings: Settings,
        database: Database,
        replica: Replica,
        hub: EventHub | None = None,
    ) -> None:
        self._database = database
        self._replica = replica
        self._hub = hub
        self._lease_s = settings.chat_session_lease_s
        # At most as often as it used to poll: a lapsed turn waits about a second at most.
        self.alarm = Alarm(shortest_s=min(1.0, settings.chat_session_lease_s / 3))
        self._announced = 0.0  # when the last lease announced from here lapses (database clock)
        self._announcing: set[asyncio.Task[None]] = set()

    def lease_taken(self) -> None:
        """A turn took a lease here just now: tell every sweeper when it lapses, unless one
        announced from here lapses later than now (they wake then and read this one)."""
        hub = self._hub
        now = self.alarm.database_time()
        if hub is None or self._announced > now or not hub.listening.is_set():
            return
        self._announced = now + self._lease_s
        task = asyncio.create_task(self._announce(hub, self._announced))
        self._announcing.add(task)
        task.add_done_callback(self._announcing.discard)

    async def _announce(self, hub: EventHub, lapses_at: float) -> None:
        try:
            await hub.notify(CHANNEL, [f"{lapses_at:.3f}"])
        except Exception:
            self._announced = 0.0  # the next turn announces again
            logger.warning("could not announce a lease", exc_info=True)

    async def sweep(self) -> int:
        """Take over the turns whose lease lapsed; how many this process took."""
        async with self._database.system() as connection:
            lapsed = await lapsed_turns(connection, want=BATCH)
        return await self._take(lapsed)

    async def _take(self, lapsed: list[tuple[uuid.UUID, str, uuid.UUID]]) -> int:
        taken = 0
        for session_id, owner, turn in lapsed:
            try:
                taken += await self._replica.take_over(
                    owner=owner, session_id=session_id, lapsed=turn
                )
            except Exception:
                logger.warning("could not take a turn over", exc_info=True)
        return taken

    async def _round(self) -> Next:
        """Take over what lapsed, and read when the next held lease lapses."""
        async with self._database.system() as connection:
            lapsed = await lapsed_turns(connection, want=BATCH)
            found = Next.read(await next_lapse(connection))
        taken = await self._take(lapsed)
        return Next(found.due, found.now, worked=taken > 0)
