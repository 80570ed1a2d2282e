"""A running turn's events, for streams that join it on any replica.

The replica that runs a turn keeps the turn's events in memory, in order (a `TurnFeed`, by
session): the client that posted the turn reads them from there, and so does anyone who
joins the turn on the same replica. Nothing of it reaches the database, so a turn nobody
else watches costs no statement at all.

Another replica joins through PostgreSQL, on the event hub's LISTEN connection (hub.py),
channel `todo_agent_turns`:

    w <session> <turn> <after>          a joiner asks for the events of the session's turn
                                        after `after` (an event id, or empty: from the
                                        start); `turn` holds the lease as it last looked;
    e <session> <key> <i>/<n> <piece>   piece i of n of one message of events, from the
                                        replica running the turn.

The runner answers an ask with the events the joiner lacks, and from then on sends every
new event of the turn as it comes (it is "watched"). A message is ASCII JSON, cut into
pieces that fit a notification (8000 bytes at most): {"attempt", "meta", "events":
[[seq, event, step, data], ...]}. A joiner cannot know which replica runs the turn, nor
whether its ask crossed the turn's start, a lost notification or the runner's death and a
takeover: it asks again whenever it has been told nothing for a second, and the replica
that runs the turn then (the same, or the one that took it over) answers. A finished
turn's events stay a few seconds, for an ask that crossed its end (answered only if it
names that turn: the session's next turn may have begun).

Event ids are `<attempt>-<seq>`: `seq` counts the events of one attempt at the turn from 1,
`attempt` is 0 for the replica that started it and grows with each replica that takes it
over (the runner sets `Turn.attempt`), so ids keep increasing across a takeover and
`Last-Event-ID` continues after one, on any replica.
"""

import asyncio
import contextlib
import itertools
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from backend.db import Database
from backend.errors import DatabaseUnavailable, InvalidTurnEventId, SessionNotFound
from backend.models.chat import ChatResponse
from backend.services import turns
from backend.services.outbox.hub import EventHub
from backend.services.turns import SessionTurn

logger = logging.getLogger("todo_agent.turn_streams")

CHANNEL = "todo_agent_turns"
# A notification's payload holds at most 8000 bytes; a piece and its header fit in that.
PIECE_CHARS = 7800
# A finished turn's events are kept this long for an ask that crossed its end.
LINGER_S = 10.0
# A joined stream told nothing for this long asks again.
ASK_EVERY_S = 1.0
# ... and every this many asks, looks in the database whether a turn still runs.
CHECK_EVERY = 5
# How long after its lease lapsed a turn counts as running: its replica died, and another
# takes it over within this (the contract: within CHAT_SESSION_LEASE_S plus 10 s).
TAKEOVER_S = 10.0
_ENDS = frozenset({"done", "error"})

EventId = tuple[int, int]  # (attempt, seq)


def parse_event_id(value: str | None) -> EventId | None:
    """A Last-Event-ID of a turn's stream (`<attempt>-<seq>`); None when not given."""
    if value is None or not value.strip():
        return None
    attempt, dash, seq = value.strip().partition("-")
    if not (dash and attempt.isdigit() and seq.isdigit() and len(attempt + seq) <= 18):
        raise InvalidTurnEventId()
    return int(attempt), int(seq)


class FeedEvent:
    """One event of a turn (see `Turn.send`): its id, its name, its data, and the model
    answer (`step`) it came in. The reply's data is made from the response only when a
    stream reads it: most turns are never read that way."""

    __slots__ = ("_data", "_response", "attempt", "event", "seq", "step")

    def __init__(
        self,
        attempt: int,
        seq: int,
        event: str,
        step: int,
        data: dict[str, Any] | None = None,
        response: ChatResponse | None = None,
    ) -> None:
        self.attempt, self.seq, self.event, self.step = attempt, seq, event, step
        self._data, self._response = data, response

    @property
    def id(self) -> EventId:
        return self.attempt, self.seq

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            assert self._response is not None
            self._data = self._response.model_dump(mode="json")
        return self._data

    def sse(self) -> str:
        """The event as a server-sent event of `/chat/stream`."""
        data = json.dumps(self.data, ensure_ascii=False)
        return f"id: {self.attempt}-{self.seq}\nevent: {self.event}\ndata: {data}\n\n"


class Feed:
    """A turn's events in order, growing; readers follow it (`follow`)."""

    def __init__(self, session_id: uuid.UUID, meta: Mapping[str, Any] | None = None) -> None:
        self.session_id = session_id
        # How the turn is told as a UI message stream (ui_stream.py): `message_id`, ...
        self.meta: Mapping[str, Any] | None = meta
        self.events: list[FeedEvent] = []
        self.finished = False
        self._changed = asyncio.Event()

    def _push(self, event: FeedEvent) -> None:
        self.events.append(event)
        if event.event in _ENDS:
            self.finished = True
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait(self, seen: int, timeout_s: float) -> None:
        """Until there are more than `seen` events or the feed has finished, or timeout_s."""
        if len(self.events) > seen or self.finished:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._changed.wait()

    def close(self) -> None:
        """A reader is done with it."""


async def follow(
    feed: Feed, *, after: EventId | None = None, keepalive_s: float
) -> AsyncIterator[list[FeedEvent] | None]:
    """The feed's events after `after` in batches, as they come, until the turn's end (a
    `done` or `error` event, or no turn running any more); None after keepalive_s of quiet,
    for a keep-alive. Closes the feed at the end."""
    read = 0
    try:
        while True:
            if read < len(feed.events):
                batch, read = feed.events[read:], len(feed.events)
                if after is not None:
                    batch = [event for event in batch if event.id > after]
                if batch:
                    yield batch
                continue
            if feed.finished:
                return
            await feed.wait(read, keepalive_s)
            if read == len(feed.events) and not feed.finished:
                yield None
    finally:
        feed.close()


async def sse(
    feed: Feed, *, after: EventId | None = None, keepalive_s: float
) -> AsyncIterator[str]:
    """The feed as `/chat/stream`'s server-sent events, each with its id."""
    async for batch in follow(feed, after=after, keepalive_s=keepalive_s):
        yield ": keep-alive\n\n" if batch is None else "".join(event.sse() for event in batch)


def told(
    session_id: uuid.UUID,
    events: Iterable[tuple[str, dict[str, Any]]],
    meta: Mapping[str, Any] | None = None,
) -> Feed:
    """A finished feed of the given events (a stored answer told again)."""
    feed = Feed(session_id, meta)
    for seq, (event, data) in enumerate(events, start=1):
        feed._push(FeedEvent(0, seq, event, 0, data))
    feed.finished = True
    return feed


class TurnFeed(Feed):
    """The events of a turn running in this process, as the turn tells them."""

    def __init__(
        self,
        session_id: uuid.UUID,
        *,
        turn_id: uuid.UUID,
        attempt: int,
        meta: Mapping[str, Any],
        ended: Callable[["TurnFeed"], None],
        lapsed: uuid.UUID | None = None,
    ) -> None:
        super().__init__(session_id, meta)
        self.turn_id = turn_id  # its lease token
        self.lapsed = lapsed  # the lease token of the attempt it took over
        self.attempt = attempt
        self.ended_at = 0.0
        self._ended = ended
        # Set once another replica asked for the turn: tells it each new event.
        self.publish: Callable[[TurnFeed, list[FeedEvent]], None] | None = None
        # Handed over to another replica (`hand_over`): that one answers the joiners' asks.
        self.given_way = False

    def add(self, event: str, data: dict[str, Any], step: int) -> None:
        self._add(FeedEvent(self.attempt, len(self.events) + 1, event, step, data))

    def finish(self, response: ChatResponse, step: int) -> None:
        """The turn's reply: its `done` event."""
        self._add(FeedEvent(self.attempt, len(self.events) + 1, "done", step, response=response))

    def leave(self) -> None:
        """The turn stopped here unfinished, for another replica to take over: the streams
        that read it here end without a last event; those joined from elsewhere wait for
        the next attempt."""
        if not self.finished:
            self.finished = True
            self._wake()
            self._end()

    def hand_over(self, data: dict[str, Any], step: int) -> None:
        """The turn stopped here unfinished and was handed to another replica (a drain):
        the streams that read it here end with an `error` event (`data`) that tells their
        clients where to find the answer. That event is this replica's only, never told to
        streams joined from elsewhere: for them the turn goes on, with the attempt that
        takes it over, to its `done`."""
        if not self.finished:
            self.given_way = True
            self._push(FeedEvent(self.attempt, len(self.events) + 1, "error", step, data))
            self._end()

    def _add(self, event: FeedEvent) -> None:
        if self.finished:
            return
        self._push(event)
        if self.publish is not None:
            self.publish(self, [event])
        if self.finished:
            self._end()

    def _end(self) -> None:
        self.ended_at = time.monotonic()
        self._ended(self)


class JoinedFeed(Feed):
    """A turn running on another replica, as its notifications tell it here: in id order,
    each event once, whatever order or how many times they come in."""

    def __init__(
        self, streams: "TurnStreams", owner: str, found: SessionTurn, after: EventId | None
    ) -> None:
        super().__init__(found.session_id)
        self.turn_id = found.turn_id
        self.last = after
        self._streams = streams
        self._owner = owner
        self._waiting: dict[EventId, FeedEvent] = {}
        self._keeper = asyncio.create_task(self._keep(), name=f"join-{self.session_id}")

    def receive(self, attempt: int, meta: Mapping[str, Any], events: list[list[Any]]) -> None:
        if self.finished:
            return
        if self.meta is None:
            self.meta = meta
        for seq, event, step, data in events:
            if self.last is None or (attempt, seq) > self.last:
                self._waiting[attempt, seq] = FeedEvent(attempt, seq, event, step, data)
        while (following := self._following()) is not None:
            self.last = following.id
            self._push(following)
            if self.finished:
                break

    def _following(self) -> FeedEvent | None:
        """The event after the last one told, if it has come: the next of the same attempt,
        or the first of a later one (an attempt gives way only when its replica died)."""
        last = self.last
        if last is not None and (event := self._waiting.pop((last[0], last[1] + 1), None)):
            return event
        starts = [key for key in self._waiting if key[1] == 1 and (last is None or key > last)]
        if not starts:
            return None
        first = min(starts)
        for key in [key for key in self._waiting if key < first]:
            del self._waiting[key]  # of an attempt that gave way
        return self._waiting.pop(first)

    async def _keep(self) -> None:
        """Ask for the turn's events, and again whenever nothing came for a while; give up
        when no turn runs any more and a last ask brought nothing."""
        asks = 0
        while not self.finished:
            if asks % CHECK_EVERY == CHECK_EVERY - 1 and not await self._still_running():
                seen = len(self.events)
                await self._streams.ask(self)
                await self.wait(seen, 2 * ASK_EVERY_S)
                if len(self.events) == seen and not self.finished:
                    self.finished = True  # the turn ended unseen, or with its replica
                    self._wake()
                    return
            else:
                await self._streams.ask(self)
            asks += 1
            while not self.finished:
                seen = len(self.events)
                await self.wait(seen, ASK_EVERY_S)
                if len(self.events) == seen:
                    break  # quiet: ask again

    async def _still_running(self) -> bool:
        try:
            found = await self._streams.find(owner=self._owner, session_id=self.session_id)
        except DatabaseUnavailable:
            return True  # cannot tell: keep waiting
        if found is None:
            return False
        if found.turn_id is not None:
            # Another replica's, if it took the turn over. A finished turn holds no lease:
            # the last ask still names the attempt this stream knew, which the replica that
            # ran the turn answers while the turn lingers there (one that took the turn over
            # and finished it between two asks answers for the attempt it took over).
            self.turn_id = found.turn_id
        return found.running

    def close(self) -> None:
        self._keeper.cancel()
        self._streams.leave(self)


class TurnStreams:
    """This process's running turns (TurnFeed, by session) and the streams joined here on
    turns running elsewhere (JoinedFeed), and the notifications between them."""

    def __init__(self, database: Database, hub: EventHub | None = None) -> None:
        self._database = database
        self._hub = hub
        self._running: dict[uuid.UUID, TurnFeed] = {}
        self._ended: deque[TurnFeed] = deque()  # finished, kept LINGER_S, oldest first
        self._joined: dict[uuid.UUID, set[JoinedFeed]] = {}
        self._pieces: dict[str, tuple[float, list[str | None]]] = {}
        self._outgoing: list[tuple[TurnFeed, list[FeedEvent]]] = []
        self._sender: asyncio.Task[None] | None = None
        self._keys = itertools.count()
        self._key_prefix = uuid.uuid4().hex[:8]
        self._on_open: list[Callable[[], None]] = []
        if hub is not None:
            hub.on_channel(CHANNEL, self._heard)

    # -- the runner's side ----------------------------------------------------------------

    def on_open(self, callback: Callable[[], None]) -> None:
        """Call `callback` as each turn starts here (its lease just taken)."""
        self._on_open.append(callback)

    def open(
        self,
        session_id: uuid.UUID,
        *,
        turn_id: uuid.UUID,
        attempt: int,
        meta: Mapping[str, Any],
        lapsed: uuid.UUID | None = None,
    ) -> TurnFeed:
        """The feed of a turn starting here in `session_id` (`turn_id`: its lease token;
        `lapsed`: that of the attempt it takes over)."""
        self._forget_ended()
        feed = TurnFeed(
            session_id,
            turn_id=turn_id,
            attempt=attempt,
            meta=meta,
            ended=self._ended.append,
            lapsed=lapsed,
        )
        self._running[session_id] = feed
        for callback in self._on_open:
            callback()
        return feed

    def _forget_ended(self) -> None:
        now = time.monotonic()
        while self._ended and self._ended[0].ended_at + LINGER_S < now:
            feed = self._ended.popleft()
            if self._running.get(feed.session_id) is feed:
                del self._running[feed.session_id]

    def _asked(self, session_id: uuid.UUID, turn_id: str, after: EventId | None) -> None:
        """Another replica (or this one) joined the turn of `session_id`: if it runs here,
        tell what it lacks, and every event from now on. A finished turn is told only to
        those who asked for it: the one that followed it may not be here yet. Asking for a
        lapsed attempt is asking for the one that took it over, which may have finished
        between two asks of a stream joined on the lapsed one."""
        self._forget_ended()
        feed = self._running.get(session_id)
        if feed is None or feed.given_way:
            return
        if feed.finished and turn_id not in (str(feed.turn_id), str(feed.lapsed)):
            return
        if not feed.finished:
            feed.publish = self._publish
        lacking = [event for event in feed.events if after is None or event.id > after]
        if lacking:
            self._publish(feed, lacking)

    def _publish(self, feed: TurnFeed, events: list[FeedEvent]) -> None:
        self._outgoing.append((feed, events))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send())

    async def _send(self) -> None:
        """Notify what is waiting to go, in order; what gathers meanwhile goes next, in one
        statement."""
        while self._outgoing:
            batch, self._outgoing = self._outgoing, []
            grouped: dict[TurnFeed, list[FeedEvent]] = {}
            for feed, events in batch:
                grouped.setdefault(feed, []).extend(events)
            payloads = [
                payload
                for feed, events in grouped.items()
                for payload in self._message(feed, events)
            ]
            await self._notify(payloads)

    def _message(self, feed: TurnFeed, events: list[FeedEvent]) -> list[str]:
        body = json.dumps(
            {
                "attempt": feed.attempt,
                "meta": feed.meta,
                "events": [[e.seq, e.event, e.step, e.data] for e in events],
            },
            separators=(",", ":"),
        )  # ASCII: a piece's characters are its bytes
        pieces = [body[i : i + PIECE_CHARS] for i in range(0, len(body), PIECE_CHARS)]
        key = f"{self._key_prefix}.{next(self._keys)}"
        return [
            f"e {feed.session_id} {key} {i}/{len(pieces)} {piece}"
            for i, piece in enumerate(pieces, start=1)
        ]

    # -- the joiner's side ----------------------------------------------------------------

    async def find(
        self, *, owner: str, session_id: uuid.UUID | None = None, chat_id: str | None = None
    ) -> SessionTurn | None:
        """The user's session (by id, or by a client's chat id) and whether a turn runs in
        it; None: no such session of theirs."""
        async with self._database.connection(as_user=owner) as db:
            return await turns.session_turn(
                db, owner=owner, session_id=session_id, chat_id=chat_id, takeover_s=TAKEOVER_S
            )

    async def join(
        self,
        *,
        owner: str,
        session_id: uuid.UUID | None = None,
        chat_id: str | None = None,
        after: EventId | None = None,
    ) -> Feed | None:
        """The running turn of the user's session (by id: SessionNotFound when it is not
        theirs; or by chat id), wherever it runs; None when no turn runs. Read it with
        `follow`, which closes it."""
        found = await self.find(owner=owner, session_id=session_id, chat_id=chat_id)
        if found is None:
            if session_id is not None:
                raise SessionNotFound()
            return None
        if not found.running:
            return None
        self._forget_ended()
        local = self._running.get(found.session_id)
        if local is not None and (not local.finished or local.turn_id == found.turn_id):
            return local  # running here, or just ended here
        joined = JoinedFeed(self, owner, found, after)
        self._joined.setdefault(found.session_id, set()).add(joined)
        return joined

    async def ask(self, joined: JoinedFeed) -> None:
        since = "" if joined.last is None else f"{joined.last[0]}-{joined.last[1]}"
        await self._notify([f"w {joined.session_id} {joined.turn_id} {since}"])

    def leave(self, joined: JoinedFeed) -> None:
        joiners = self._joined.get(joined.session_id)
        if joiners is not None:
            joiners.discard(joined)
            if not joiners:
                del self._joined[joined.session_id]

    def _received(self, session_id: uuid.UUID, key: str, part: str, piece: str) -> None:
        """One piece of a message of events; the message, once whole, goes to the streams
        joined here on its turn."""
        if session_id not in self._joined:
            return
        index, _, count = part.partition("/")
        now = time.monotonic()
        _, pieces = self._pieces.setdefault(key, (now, [None] * int(count)))
        pieces[int(index) - 1] = piece
        if any(piece is None for piece in pieces):
            for stale in [k for k, (at, _) in self._pieces.items() if at + LINGER_S < now]:
                del self._pieces[stale]  # the rest was lost: the joiner asks again
            return
        del self._pieces[key]
        message = json.loads("".join(pieces))  # type: ignore[arg-type]
        for joined in list(self._joined.get(session_id, ())):
            joined.receive(message["attempt"], message["meta"], message["events"])

    # -- notifications --------------------------------------------------------------------

    def _heard(self, payload: str) -> None:
        try:
            kind, session, rest = payload.split(" ", 2)
            if kind == "w":
                turn, _, since = rest.partition(" ")
                self._asked(uuid.UUID(session), turn, parse_event_id(since))
            elif kind == "e":
                key, part, piece = rest.split(" ", 2)
                self._received(uuid.UUID(session), key, part, piece)
        except (ValueError, TypeError, InvalidTurnEventId, KeyError, IndexError):
            logger.warning("unreadable turn notification", extra={"payload": payload[:100]})

    async def _notify(self, payloads: list[str]) -> None:
        """Send notifications; lost ones are asked for again by the joiners."""
        if self._hub is None:
            return
        try:
            await self._hub.notify(CHANNEL, payloads)
        except Exception:
            logger.warning("could not notify the turn's joiners", exc_info=True)
