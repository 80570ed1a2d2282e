"""Live event streams: one LISTEN connection per process, fanned out in memory.

A change committed through any replica NOTIFYs `todo_agent_events` with the user's id. The
hub of every process listens on one connection of its own; for a user with streams open
here it reads the events after the last one it read (one query for all of that user's
streams, on a pooled connection for a moment) and hands each stream the same encoded
frame. An open stream holds no database connection.

Resume (`Last-Event-ID`) cannot lose or repeat an event: a stream registers for live events
first, then replays from the outbox, and takes each id once, in order. One user's events
commit in id order (the trigger locks the user before drawing an id), so "everything after
N" is a complete answer at any moment.
"""

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from backend import metrics
from backend.db import Database
from backend.services.outbox import store
from backend.services.outbox.store import StoredEvent
from backend.services.outbox.worker import BackgroundWorker
from backend.settings import Settings

logger = logging.getLogger("todo_agent.events")

CHANNEL = "todo_agent_events"
# An account erased (or being erased): every process forgets it (KnownUsers).
FORGET_CHANNEL = "todo_agent_forget_user"
# A stream that falls this far behind is closed; its client resumes with Last-Event-ID.
MAX_BACKLOG = 1000
_NOTIFY = "SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload"
# How often the listening connection is asked something, so that one dropped without a word
# is noticed (TCP keepalives notice sooner where the platform has them, asking nothing).
PING_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class Frame:
    """One event as a stream sends it, encoded once for every stream."""

    id: int
    type: str
    data: bytes

    @classmethod
    def of(cls, event: StoredEvent, source: str) -> "Frame":
        body = f"id: {event.id}\nevent: {event.type}\ndata: {event.json(source)}\n\n"
        return cls(id=event.id, type=event.type, data=body.encode())


@dataclass(eq=False)
class Subscription:
    """One open stream: the frames waiting for it, and the last id it has taken."""

    user_id: str
    last_id: int = 0
    queue: asyncio.Queue[Frame | None] = field(default_factory=asyncio.Queue)

    def offer(self, frame: Frame) -> None:
        if frame.id <= self.last_id:
            return  # replayed already
        if self.queue.qsize() >= MAX_BACKLOG:
            self.queue.put_nowait(None)  # too slow: end the stream, the client resumes
            return
        self.last_id = frame.id
        self.queue.put_nowait(frame)


@dataclass(eq=False)
class _UserStreams:
    """A user's open streams in this process and how far the hub has read their events."""

    read_to: int
    streams: set[Subscription] = field(default_factory=set)
    dirty: bool = False
    reading: asyncio.Task[None] | None = None


class EventHub(BackgroundWorker):
    name = "event-hub"

    def __init__(self, settings: Settings, database: Database) -> None:
        # LISTEN holds its connection across transactions: past any pooler.
        direct = settings.direct_database_url
        assert direct is not None
        self._dsn = direct.replace("postgresql+asyncpg://", "postgresql://", 1)
        self._database = database
        self._retention_s = settings.events_retention_h * 3600
        self.source = settings.public_base_url or "urn:todo-agent"
        self._users: dict[str, _UserStreams] = {}
        self._listeners: list[Callable[[str], None]] = []
        self._forgetters: list[Callable[[str], None]] = []
        self._channels: dict[str, Callable[[str], None]] = {}
        self._on_listening: list[Callable[[], None]] = []
        self._connection: asyncpg.Connection | None = None
        self._talking = asyncio.Lock()  # one statement at a time on the connection
        self.listening = asyncio.Event()

    # -- the listening connection -------------------------------------------------------

    def on_notify(self, callback: Callable[[str], None]) -> None:
        """Also tell `callback` (with the user id) of every committed event."""
        self._listeners.append(callback)

    def on_forget(self, callback: Callable[[str], None]) -> None:
        """Tell `callback` (with the user id) of every account erased, through any process.
        The listening connection carries this too: it is the one every process holds."""
        self._forgetters.append(callback)

    def on_channel(self, channel: str, callback: Callable[[str], None]) -> None:
        """Also listen on `channel`, telling `callback` each payload (see `notify`)."""
        self._channels[channel] = callback

    def on_listening(self, callback: Callable[[], None]) -> None:
        """Call `callback` each time the connection listens again (and the first time):
        what was notified while it was down is lost, so a reader catches up once."""
        self._on_listening.append(callback)

    async def notify(self, channel: str, payloads: list[str]) -> None:
        """NOTIFY `channel` with each payload, in order, in one statement on the listening
        connection (a pooled one would be taken from requests); nothing while it is down."""
        connection = self._connection
        if connection is None or not payloads:
            return
        async with self._talking:
            await connection.execute(_NOTIFY, channel, payloads, timeout=5)

    async def stop(self) -> None:
        await super().stop()
        self.end_streams()

    def end_streams(self) -> None:
        """End every open stream; its client reconnects (to another replica, when this one
        is going away) and resumes with Last-Event-ID."""
        for user in self._users.values():
            for stream in user.streams:
                stream.queue.put_nowait(None)

    async def _run(self) -> None:
        """Hold the LISTEN connection; after it is lost, listen again and catch every open
        stream up from the outbox (notifications sent meanwhile are gone)."""
        delay = 0.2
        while True:
            lost = asyncio.Event()
            try:
                connection = await asyncpg.connect(
                    self._dsn, timeout=5, server_settings={"application_name": "todo-agent-listen"}
                )
            except (OSError, asyncpg.PostgresError, TimeoutError) as failure:
                logger.warning("event listener cannot connect", extra={"error": str(failure)})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            try:
                connection.add_termination_listener(lambda _, lost=lost: lost.set())
                await connection.add_listener(CHANNEL, self._notified)
                await connection.add_listener(FORGET_CHANNEL, self._forget)
                for channel, callback in self._channels.items():
                    await connection.add_listener(channel, _payload_to(callback))
                _keep_alive(connection)
                self._connection = connection
                self.listening.set()
                delay = 0.2
                for user_id in list(self._users):
                    self._wake(user_id)
                for catch_up in self._on_listening:
                    catch_up()
                while not lost.is_set():
                    # Ask now and then, so a connection dropped without a word is noticed.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), timeout=PING_EVERY_S)
                    if not lost.is_set():
                        async with self._talking:
                            await connection.fetchval("SELECT 1", timeout=5)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
                pass
            finally:
                self.listening.clear()
                self._connection = None
                with contextlib.suppress(Exception):
                    await connection.close(timeout=1)
            logger.warning("event listener lost its connection; listening again")

    def _notified(self, _connection: Any, _pid: int, _channel: str, user_id: str) -> None:
        for callback in self._listeners:
            callback(user_id)
        self._wake(user_id)

    def _forget(self, _connection: Any, _pid: int, _channel: str, user_id: str) -> None:
        for callback in self._forgetters:
            callback(user_id)

    # -- reading and fanning out --------------------------------------------------------

    def _wake(self, user_id: str) -> None:
        user = self._users.get(user_id)
        if user is None:
            return  # nobody here follows this user
        user.dirty = True
        if user.reading is None or user.reading.done():
            user.reading = asyncio.create_task(self._read(user_id, user))

    async def _read(self, user_id: str, user: _UserStreams) -> None:
        """Read the user's new events until none are left, and offer them to the streams."""
        metrics.not_counting_statements()
        try:
            while user.dirty:
                user.dirty = False
                while True:
                    async with self._database.system() as connection:
                        events = await store.events_since(
                            connection,
                            user_id=user_id,
                            after=user.read_to,
                            retention_s=self._retention_s,
                        )
                    self._fan_out(user, events)
                    if len(events) < store.PAGE:
                        break
        except Exception:
            # The database is away: the streams wait; the next notification or the
            # listener's reconnect reads again from where this stopped.
            logger.warning("event read failed", exc_info=True)

    def _fan_out(self, user: _UserStreams, events: list[StoredEvent]) -> None:
        for event in events:
            frame = Frame.of(event, self.source)
            user.read_to = max(user.read_to, event.id)
            for stream in list(user.streams):
                stream.offer(frame)
            metrics.EVENTS_STREAMED.inc(len(user.streams))

    # -- streams ------------------------------------------------------------------------

    async def open(self, user_id: str, *, last_event_id: int | None) -> Subscription:
        """A stream of the user's events: those after `last_event_id` still retained first
        (None: from now on), then live ones as they commit. Close it with `close`."""
        user = self._users.get(user_id)
        if user is None:
            # The first stream of this user here: where the outbox stands now. Another
            # stream of theirs already follows it live, so later ones need no query.
            async with self._database.system() as connection:
                newest = await store.last_event_id(connection, user_id=user_id)
            user = self._users.get(user_id)
            if user is None:
                user = self._users[user_id] = _UserStreams(read_to=newest)
                # What committed between that query and now had its notification ignored
                # (nobody here followed the user yet): read once.
                self._wake(user_id)
        newest = user.read_to
        stream = Subscription(user_id=user_id, last_id=newest)
        user.streams.add(stream)
        metrics.EVENT_STREAMS_OPEN.inc()
        if last_event_id is not None and last_event_id < newest:
            try:
                await self._replay(stream, after=last_event_id, to=newest)
            except BaseException:
                self.close(stream)
                raise
        return stream

    def close(self, stream: Subscription) -> None:
        user = self._users.get(stream.user_id)
        if user is None or stream not in user.streams:
            return
        metrics.EVENT_STREAMS_OPEN.dec()
        user.streams.discard(stream)
        if not user.streams:
            del self._users[stream.user_id]
            if user.reading is not None:
                user.reading.cancel()

    async def _replay(self, stream: Subscription, *, after: int, to: int) -> None:
        """Queue the retained events in (after, to] ahead of live ones (which are above `to`
        and were held back by `last_id` until now)."""
        replayed: list[Frame] = []
        while after < to:
            async with self._database.system() as connection:
                events = await store.events_since(
                    connection, user_id=stream.user_id, after=after, retention_s=self._retention_s
                )
            events = [event for event in events if event.id <= to]
            if not events:
                break
            replayed += [Frame.of(event, self.source) for event in events]
            after = events[-1].id
        live = []
        while not stream.queue.empty():
            live.append(stream.queue.get_nowait())
        for frame in [*replayed, *live]:
            stream.queue.put_nowait(frame)

    async def frames(
        self, stream: Subscription, *, keepalive_s: float, closed: Callable[[], Awaitable[bool]]
    ) -> AsyncIterator[bytes]:
        """The bytes of a stream: its frames, and a comment when it has been quiet. Closes
        the stream when it ends."""
        try:
            yield b": connected\n\n"
            async for data in self._frames(stream, keepalive_s=keepalive_s, closed=closed):
                yield data
        finally:
            self.close(stream)

    async def _frames(
        self, stream: Subscription, *, keepalive_s: float, closed: Callable[[], Awaitable[bool]]
    ) -> AsyncIterator[bytes]:
        while True:
            try:
                frame = await asyncio.wait_for(stream.queue.get(), timeout=keepalive_s)
            except TimeoutError:
                if await closed():
                    return
                yield b": keep-alive\n\n"
                continue
            if frame is None:
                return
            yield frame.data


def _keep_alive(connection: asyncpg.Connection) -> None:
    """TCP keepalives on the listening connection's socket: a peer gone without a word is
    noticed within about 30 s by the kernel's probes, which send no statement."""
    transport = getattr(connection, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 15)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 5)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)


def _payload_to(callback: Callable[[str], None]) -> Callable[[Any, int, str, str], None]:
    def heard(_connection: Any, _pid: int, _channel: str, payload: str) -> None:
        callback(payload)

    return heard
