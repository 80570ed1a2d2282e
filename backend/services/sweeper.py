"""The turn sweeper: each process finishes the turns whose replica died.

A turn holds its session with a lease (`CHAT_SESSION_LEASE_S`) that the replica running it
renews while it runs. When the replica dies (or drains and hands its turns over, which
ends their leases at once), the lease lapses but still names the turn: no new turn can take
the session, and the sweeper of any live replica claims it (one conditional UPDATE: one
sweeper wins) and finishes it as a new attempt with a token of its own (agent.take_over):
what had committed is read back from the conversation and not done again, the reply is
stored once (a unique index on the user message it answers), and the Idempotency-Key that
names the turn gets its answer. The attempt that lapsed, should it wake up, writes nothing:
its tool calls and its reply are refused once the session names another attempt.

A lease lapsing is a time event: between rounds the sweeper sleeps until the earliest held
lease lapses (`todo_next_lapse`), and a lease taken or cut short anywhere NOTIFYs
`todo_agent_leases` with its lapse time (a trigger, migration 0021), which moves the alarm
earlier without a query. So an idle replica asks once a minute, a lapsed turn waits about
as long as before, and a busy one sweeps no more often than it polled: once per
min(1 s, lease / 3).
"""

import logging
import uuid

from backend.db import Database
from backend.services.agent import OpenAIAgentService
from backend.services.outbox.worker import Alarm, Next, WakingWorker
from backend.services.turns import lapsed_turns, next_lapse
from backend.settings import Settings

logger = logging.getLogger("todo_agent.sweeper")

BATCH = 20
CHANNEL = "todo_agent_leases"


class TurnSweeper(WakingWorker):
    name = "turn-sweeper"

    def __init__(self, settings: Settings, database: Database, agent: OpenAIAgentService) -> None:
        self._database = database
        self._agent = agent
        # At most as often as it used to poll: a lapsed turn waits about a second at most.
        self.alarm = Alarm(shortest_s=min(1.0, settings.chat_session_lease_s / 3))

    async def sweep(self) -> int:
        """Take over the turns whose lease lapsed; how many this process took."""
        async with self._database.system() as connection:
            lapsed = await lapsed_turns(connection, want=BATCH)
        return await self._take(lapsed)

    async def _take(self, lapsed: list[tuple[uuid.UUID, str, uuid.UUID]]) -> int:
        taken = 0
        for session_id, owner, turn in lapsed:
            try:
                taken += await self._agent.take_over(
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
