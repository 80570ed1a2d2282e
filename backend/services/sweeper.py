"""The turn sweeper: each process finishes the turns whose replica died.

A turn holds its session with a lease (`CHAT_SESSION_LEASE_S`) that the replica running it
renews while it runs. When the replica dies (or drains and hands its turns over, which
ends their leases at once), the lease lapses but still names the turn: no new turn can take
the session, and the sweeper of any live replica claims it (one conditional UPDATE: one
sweeper wins) and finishes it as a new attempt with a token of its own (replicas/replica.py):
what had committed is read back from the conversation and not done again, the reply is
stored once (a unique index on the user message it answers), and the Idempotency-Key that
names the turn gets its answer. The attempt that lapsed, should it wake up, writes nothing:
its tool calls and its reply are refused once the session names another attempt.
"""

import asyncio
import logging

from backend.db import Database
from backend.services.outbox.worker import BackgroundWorker
from backend.services.replicas.replica import Replica
from backend.services.turns import lapsed_turns
from backend.settings import Settings

logger = logging.getLogger("todo_agent.sweeper")

BATCH = 20


class TurnSweeper(BackgroundWorker):
    name = "turn-sweeper"

    def __init__(self, settings: Settings, database: Database, replica: Replica) -> None:
        self._database = database
        self._replica = replica
        # Often enough that a lapsed turn waits about a second; a lease renews every third.
        self._poll_s = min(1.0, settings.chat_session_lease_s / 3)

    async def sweep(self) -> int:
        """Take over the turns whose lease lapsed; how many this process took."""
        async with self._database.system() as connection:
            lapsed = await lapsed_turns(connection, want=BATCH)
        taken = 0
        for session_id, owner, turn in lapsed:
            try:
                taken += await self._replica.take_over(
                    owner=owner, session_id=session_id, lapsed=turn
                )
            except Exception:
                logger.warning("could not take a turn over", exc_info=True)
        return taken

    async def _run(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:
                logger.warning("turn sweep failed; trying again", exc_info=True)
            await asyncio.sleep(self._poll_s)
