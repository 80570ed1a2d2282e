"""The session lease of a running turn: renewed while the turn runs, so that only a dead
process loses it, and released (in the background, through an outage) when it fails."""

import asyncio
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from backend.db import Database
from backend.errors import DatabaseUnavailable
from backend.services import turns
from backend.services.outages import riding_out_outages
from backend.settings import Settings

if TYPE_CHECKING:
    from backend.services.agent import Turn

logger = logging.getLogger("todo_agent.agent")


class Leases:
    """The leases of the turns this process runs."""

    def __init__(self, settings: Settings, database: Database) -> None:
        self._settings = settings
        self._database = database
        self._chores: set[asyncio.Task[None]] = set()

    @property
    def every_s(self) -> float:
        return self._settings.chat_session_lease_s / 3

    def keep(self, turn: "Turn") -> "Heartbeat":
        """Renew the turn's lease until cancelled. Most turns end long before their lease
        needs renewing: a timer, not a task, until one does."""
        return Heartbeat(self._keep(turn), after_s=self.every_s)

    async def _keep(self, turn: "Turn") -> None:
        """Renew the session lease while a long turn runs, so only a dead process loses it;
        the first renewal is due when this starts."""
        while True:
            try:
                async with self._database.connection(as_user=turn.owner) as db:
                    if not await turns.renew_lease(
                        db,
                        session_id=turn.session_id,
                        turn_id=turn.id,
                        lease_s=self._settings.chat_session_lease_s,
                    ):
                        turn.lease_lost = True
                        return
            except DatabaseUnavailable:
                logger.warning("could not renew the session lease")
            await asyncio.sleep(self.every_s)

    def release_later(self, turn: "Turn") -> None:
        """Free the session of a turn that failed, in the background."""
        task = asyncio.create_task(self._release_later(turn))
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    async def _release(self, turn: "Turn") -> None:
        async with self._database.connection(as_user=turn.owner) as db:
            await turns.release_lease(db, session_id=turn.session_id, turn_id=turn.id)

    async def _release_later(self, turn: "Turn") -> None:
        """If the database is down, keep trying (the lease would expire anyway, but
        later)."""
        try:
            await riding_out_outages(
                lambda: self._release(turn), budget_s=self._settings.chat_session_lease_s
            )
        except Exception:
            logger.warning("could not release the session lease", exc_info=True)


class Heartbeat:
    """`work` started as a task `after_s` from now, unless cancelled before."""

    __slots__ = ("_task", "_timer", "_work")

    def __init__(self, work: Coroutine[Any, Any, None], *, after_s: float) -> None:
        self._work: Coroutine[Any, Any, None] | None = work
        self._task: asyncio.Task[None] | None = None
        self._timer = asyncio.get_running_loop().call_later(after_s, self._start)

    def _start(self) -> None:
        if self._work is not None:
            self._task = asyncio.create_task(self._work)
            self._work = None

    def cancel(self) -> None:
        self._timer.cancel()
        if self._work is not None:
            self._work.close()  # never started: not "never awaited"
            self._work = None
        if self._task is not None:
            self._task.cancel()
