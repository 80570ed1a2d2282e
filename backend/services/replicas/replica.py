"""The turns running in this process, as one replica among others: each runs as its own
task, tells its events to its feed (turn_streams.py), and outlives the request that
started it. On SIGTERM the replica drains: it refuses new turns, lets those in flight
finish within SHUTDOWN_GRACE_S, and hands the rest over (their lease ended at once, for
another replica's sweeper to take). A turn whose lease lapsed (its replica died, or handed
it over) is taken over here as a new attempt, from the session as stored."""

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from backend import metrics
from backend.db import Database
from backend.errors import DatabaseUnavailable, DomainError, TurnHandedOver
from backend.models.chat import ChatResponse
from backend.services import turns
from backend.services.turn_streams import TurnStreams
from backend.settings import Settings

if TYPE_CHECKING:
    from backend.services.agent import Turn

# The agent's logger still: these lines are the turn's story, as before the room moved.
logger = logging.getLogger("todo_agent.agent")


class Resume(Protocol):
    """The new attempt at a lapsed turn whose lease `turn_id` took, read in that
    transaction; None when nothing was left to answer (agent.py)."""

    async def __call__(
        self, db: AsyncConnection, *, owner: str, session_id: uuid.UUID, turn_id: uuid.UUID
    ) -> "Turn | None": ...


class Replica:
    """This process's running turns: started, drained, handed over, taken over."""

    def __init__(
        self,
        *,
        settings: Settings,
        database: Database,
        streams: TurnStreams,
        run: Callable[["Turn"], Coroutine[Any, Any, ChatResponse]],
        resume: Resume,
    ) -> None:
        self._settings = settings
        self._database = database
        self._streams = streams
        self._run = run  # the turn loop (agent.py)
        self._resume = resume
        self._running: dict[asyncio.Task[ChatResponse], Turn] = {}
        self._draining = False

    def start(self, turn: "Turn") -> "asyncio.Task[ChatResponse]":
        """Run the turn as its own task: it completes and is stored even if the client that
        asked goes away, and shutdown waits for it. Its events go to its feed, which any
        replica can join; it ends with `done`, or `error` (`detail`) if the turn fails."""
        meta = {"message_id": str(turn.assistant_message_id), **(turn.told_as or {})}
        turn.feed = self._streams.open(
            turn.session_id, turn_id=turn.id, attempt=turn.attempt, meta=meta, lapsed=turn.lapsed
        )
        task = asyncio.create_task(self._run(turn), name=f"turn-{turn.id}")
        self._running[task] = turn
        task.add_done_callback(self._forget)
        task.add_done_callback(functools.partial(_tell_end, turn))
        return task

    def _forget(self, task: "asyncio.Task[ChatResponse]") -> None:
        self._running.pop(task, None)

    @property
    def draining(self) -> bool:
        return self._draining

    def refuse_turns(self) -> None:
        """From now on the agent refuses new turns (503): this process is going away."""
        self._draining = True

    async def drain(self, timeout_s: float) -> None:
        """Refuse new turns, let those in flight finish for up to `timeout_s`, and hand the
        rest over to another replica (`hand_over`; this process's sweeper must be stopped
        first), which takes each over without waiting out CHAT_SESSION_LEASE_S."""
        self.refuse_turns()
        if self._running:
            await asyncio.wait(set(self._running), timeout=timeout_s)
        if self._running:
            handed = await self.hand_over()
            logger.warning("turns still running handed over", extra={"turns": handed})

    async def hand_over(self) -> int:
        """Stop every turn still running here and end its lease now, so that another
        replica's sweeper finishes it (what a draining replica does once its grace is up;
        its own sweeper must be stopped first). How many were handed over."""
        running = dict(self._running)
        for task, turn in running.items():
            turn.handed_over = True  # keeps the lease from being released as it stops
            task.cancel()
        if running:
            await asyncio.wait(running.keys())
        handed = 0
        for turn in running.values():
            try:
                async with self._database.connection(as_user=turn.owner) as db:
                    handed += await turns.hand_over(db, session_id=turn.session_id, turn_id=turn.id)
            except DatabaseUnavailable:  # its lease lapses by itself, later
                logger.warning("could not hand a turn over", extra={"turn": str(turn.id)})
        return handed

    async def take_over(self, *, owner: str, session_id: uuid.UUID, lapsed: uuid.UUID) -> bool:
        """Take over a turn whose lease lapsed (its replica died) and finish it as its own
        task: the model gets the results of the calls that had committed (they are in the
        conversation, and are not run again), a call held for the person's yes stays held.
        False when another replica took it first or nothing was left to answer."""
        turn_id = uuid.uuid4()
        lease_s = self._settings.chat_session_lease_s
        async with self._database.connection(as_user=owner) as db:
            attempt = await turns.take_over(
                db, session_id=session_id, lapsed=lapsed, turn_id=turn_id, lease_s=lease_s
            )
            if attempt is None:
                return False
            turn = await self._resume(db, owner=owner, session_id=session_id, turn_id=turn_id)
        if turn is None:  # the lapsed attempt had nothing left to answer
            async with self._database.connection(as_user=owner) as db:
                await turns.release_lease(db, session_id=session_id, turn_id=turn_id)
            return False
        turn.attempt = attempt  # its stream's events go on after the lapsed attempt's
        turn.lapsed = lapsed
        metrics.TURNS_TAKEN_OVER.inc()
        logger.info("turn taken over", extra={"session_id": str(session_id)})
        self.start(turn)
        return True


def _tell_end(turn: "Turn", ended: "asyncio.Task[ChatResponse]") -> None:
    """The turn's last event: its reply, or why there is none. A turn is cancelled only
    when its process stops: another replica takes it over, so its streams end here
    without a last event, and their clients join it again (with their Last-Event-ID). A
    turn a drain handed over ends its streams here with the error that says so, and only
    here: streams joined from another replica follow it on to the one that finishes it."""
    if turn.feed is None:
        return
    if ended.cancelled():
        turn.feed.leave()
    elif isinstance(handed := ended.exception(), TurnHandedOver):
        turn.feed.hand_over({"detail": handed.detail}, turn.steps)
    elif (failure := ended.exception()) is not None:
        detail = failure.detail if isinstance(failure, DomainError) else "Internal error."
        turn.send("error", {"detail": detail})
    else:
        turn.feed.finish(ended.result(), turn.steps)
