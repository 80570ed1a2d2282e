"""A running turn's stream joined on another replica: two `todo-agent serve` processes on
one database and one scripted, slow model, started once for the module. A turn posted to
A (`/chat/stream`, `/chat/ui`) is joined on B (`GET /sessions/{id}/stream`,
`GET /chat/ui/{chat_id}/stream`): B tells the rest of the turn and its end; Last-Event-ID
continues after an event, repeating none; 204 when no turn runs; another user's session
is not found."""

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.db import Database
from backend.errors import InvalidTurnEventId
from backend.services.turn_streams import JoinedFeed, TurnStreams, parse_event_id
from backend.services.turns import SessionTurn
from backend.settings import Settings
from tests.conftest import auth, server_env
from tests.fake_openai import FakeOpenAI, call, reply, tool_calls
from tests.servers import ServerProcess, server_processes, start_all

pytestmark = pytest.mark.asyncio

# Slow enough that a join lands mid-answer, whatever the machine.
WORDS = [f"word{i} " for i in range(12)]
CHUNK_S = 0.25
START_S = 180  # two servers starting side by side on a busy machine


@dataclass(frozen=True)
class Event:
    id: str | None
    event: str
    data: Any


class SSE:
    """A server-sent event stream read in the background: its events (keep-alive comments
    left out) and, for a UI message stream, its `data:` chunks."""

    def __init__(self, client: httpx.AsyncClient, method: str, url: str, **request: Any) -> None:
        self.events: list[Event] = []
        self.status: int | None = None
        self._request = (method, url, request)
        self._client = client
        self._got = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        method, url, request = self._request
        async with self._client.stream(method, url, **request) as response:
            self.status = response.status_code
            fields: dict[str, str] = {}
            async for line in response.aiter_lines():
                if line.startswith(":"):
                    continue
                if line:
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
                    continue
                if fields:
                    data = fields["data"]
                    parsed = data if data == "[DONE]" else json.loads(data)
                    self.events.append(Event(fields.get("id"), fields.get("event", ""), parsed))
                    self._got.set()
                    fields = {}
        self._got.set()

    def start(self) -> "SSE":
        self._reader = asyncio.create_task(self._read())
        return self

    async def wait_for(self, count: int, timeout_s: float = 15) -> None:
        """Until `count` events have come (or the stream ended)."""
        async with asyncio.timeout(timeout_s):
            while len(self.events) < count and not (self._reader and self._reader.done()):
                self._got.clear()
                await self._got.wait()
        assert self._reader is not None
        if self._reader.done():
            self._reader.result()

    async def finish(self, timeout_s: float = 30) -> list[Event]:
        assert self._reader is not None
        await asyncio.wait_for(self._reader, timeout_s)
        return self.events

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await self._reader


@pytest.fixture(scope="module")
def replicas(
    database_url: str,
    engine: AsyncEngine,
    fake_openai_server: FakeOpenAI,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[ServerProcess]]:
    env = server_env(
        database_url,
        fake_openai_server,
        CHAT_STREAM_KEEPALIVE_S="1",
        DB_POOL_SIZE="4",
        DB_MAX_OVERFLOW="4",
    )
    with server_processes(env, tmp_path_factory.mktemp("turn-streams"), ("a", "b")) as servers:
        start_all(servers, timeout_s=START_S)
        yield servers


@pytest.fixture
def user() -> str:
    return f"joiner-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as client:
        yield client


def slow_answer(model: FakeOpenAI, *extra: str) -> str:
    """Script one slow streamed answer; its text."""
    chunks = [*WORDS, *extra]
    model.script(reply("".join(chunks), chunks=chunks, chunk_interval_s=CHUNK_S))
    return "".join(chunks)


async def post_stream(
    http: httpx.AsyncClient, server: ServerProcess, user: str, message: str
) -> SSE:
    """POST /chat/stream, read in the background, once its first delta has come."""
    posted = SSE(
        http,
        "POST",
        f"{server.url}/api/{user}/chat/stream",
        json={"message": message},
        headers=auth(user),
    ).start()
    await posted.wait_for(2)  # session, then the first delta: the model is answering
    assert [event.event for event in posted.events[:2]] == ["session", "delta"]
    return posted


def join(
    http: httpx.AsyncClient,
    server: ServerProcess,
    user: str,
    session_id: str,
    headers: dict[str, str] | None = None,
    **params: str,
) -> SSE:
    return SSE(
        http,
        "GET",
        f"{server.url}/api/{user}/sessions/{session_id}/stream",
        headers={**auth(user), **(headers or {})},
        params=params,
    ).start()


async def test_a_turn_posted_to_one_replica_streams_whole_on_another(
    replicas: list[ServerProcess], http: httpx.AsyncClient, model: FakeOpenAI, user: str
) -> None:
    a, b = replicas
    # One delta larger than a notification can carry: it goes in pieces.
    text = slow_answer(model, "x" * 20_000)
    posted = await post_stream(http, a, user, "Tell me something long")
    session_id = posted.events[0].data["session_id"]

    joined = join(http, b, user, session_id)
    told = await joined.finish()
    mine = await posted.finish()

    assert joined.status == 200
    assert told == mine  # every event, with the same ids, in the same order
    assert [event.id for event in mine] == [f"0-{seq}" for seq in range(1, len(mine) + 1)]
    assert mine[-1].event == "done"
    assert mine[-1].data["response"] == text
    assert "".join(event.data["text"] for event in mine if event.event == "delta") == text


async def test_last_event_id_continues_after_that_event_on_another_replica(
    replicas: list[ServerProcess], http: httpx.AsyncClient, model: FakeOpenAI, user: str
) -> None:
    a, b = replicas
    slow_answer(model)
    posted = await post_stream(http, a, user, "Count slowly")
    session_id = posted.events[0].data["session_id"]
    await posted.wait_for(4)
    seen = posted.events[2]

    by_header = join(http, b, user, session_id, headers={"Last-Event-ID": seen.id or ""})
    by_query = join(http, a, user, session_id, last_event_id=seen.id or "")
    mine = await posted.finish()
    after = mine[mine.index(seen) + 1 :]

    assert await by_header.finish() == after
    assert await by_query.finish() == after  # the replica running it, too


async def test_a_tool_turn_joined_mid_way_tells_the_calls_and_the_reply(
    replicas: list[ServerProcess], http: httpx.AsyncClient, model: FakeOpenAI, user: str
) -> None:
    a, b = replicas
    model.script(
        tool_calls(call("add_todo", {"title": "Buy milk"}), delay=0.5),
        reply("".join(WORDS), chunks=WORDS, chunk_interval_s=CHUNK_S),
    )
    posted = SSE(
        http,
        "POST",
        f"{a.url}/api/{user}/chat/stream",
        json={"message": "Add milk"},
        headers=auth(user),
    ).start()
    await posted.wait_for(1)
    joined = join(http, b, user, posted.events[0].data["session_id"])

    told = await joined.finish()
    assert told == await posted.finish()
    assert [e.event for e in told[:3]] == ["session", "tool_call", "tool_result"]
    assert told[-1].data["tool_results"][0]["result"]["status"] == "created"


async def test_the_ai_sdk_resume_on_another_replica_tells_the_stream_from_its_start(
    replicas: list[ServerProcess], http: httpx.AsyncClient, model: FakeOpenAI, user: str
) -> None:
    a, b = replicas
    slow_answer(model)
    chat_id = f"chat-{uuid.uuid4().hex[:8]}"
    message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Hello"}]}
    posted = SSE(
        http,
        "POST",
        f"{a.url}/api/{user}/chat/ui",
        json={"id": chat_id, "messages": [message], "trigger": "submit-message"},
        headers=auth(user),
    ).start()
    await posted.wait_for(4)  # start, start-step, text-start, a delta

    resumed = SSE(http, "GET", f"{b.url}/api/{user}/chat/ui/{chat_id}/stream", headers=auth(user))
    told = await resumed.start().finish()

    assert resumed.status == 200
    assert told == await posted.finish()
    assert told[-2].data["type"] == "finish"
    assert told[-1].data == "[DONE]"


async def test_a_plain_chat_turn_can_be_joined_too(
    replicas: list[ServerProcess], http: httpx.AsyncClient, model: FakeOpenAI, user: str
) -> None:
    a, b = replicas
    first = await http.post(f"{a.url}/api/{user}/chat", json={"message": "hi"}, headers=auth(user))
    session_id = first.json()["session_id"]
    model.script(reply("slow", delay=1.5))
    answering = asyncio.create_task(
        http.post(
            f"{a.url}/api/{user}/chat",
            json={"message": "and now?", "session_id": session_id},
            headers=auth(user),
        )
    )
    await asyncio.to_thread(model.wait_for_requests, 2)
    told = await join(http, b, user, session_id).finish()
    answer = (await answering).json()

    assert [event.event for event in told] == ["session", "done"]
    assert told[-1].data == answer


async def test_no_running_turn_answers_204_and_anothers_session_404(
    replicas: list[ServerProcess], http: httpx.AsyncClient, model: FakeOpenAI, user: str
) -> None:
    a, b = replicas
    model.script(reply("Done."))
    answered = await http.post(
        f"{a.url}/api/{user}/chat", json={"message": "hi"}, headers=auth(user)
    )
    session_id = answered.json()["session_id"]
    for server in (a, b):
        idle = await http.get(
            f"{server.url}/api/{user}/sessions/{session_id}/stream", headers=auth(user)
        )
        unknown_chat = await http.get(
            f"{server.url}/api/{user}/chat/ui/no-such-chat/stream", headers=auth(user)
        )
        assert idle.status_code == 204
        assert unknown_chat.status_code == 204

    slow_answer(model)
    posted = await post_stream(http, a, user, "Take your time")
    running = posted.events[0].data["session_id"]
    other = f"other-{uuid.uuid4().hex[:8]}"
    for server in (a, b):
        foreign = await http.get(
            f"{server.url}/api/{other}/sessions/{running}/stream", headers=auth(other)
        )
        missing = await http.get(
            f"{server.url}/api/{user}/sessions/{uuid.uuid4()}/stream", headers=auth(user)
        )
        bad = await http.get(
            f"{server.url}/api/{user}/sessions/{running}/stream",
            headers={**auth(user), "Last-Event-ID": "twelve"},
        )
        assert foreign.status_code == 404
        assert missing.status_code == 404
        assert bad.status_code == 422
    await posted.finish()


# --- How a joined stream puts what it hears in order ----------------------------------------


async def test_a_joined_feed_tells_each_event_once_in_order_across_a_takeover(
    settings: Settings,
) -> None:
    database = Database(settings)
    try:
        found = SessionTurn(uuid.uuid4(), running=True, turn_id=uuid.uuid4())
        feed = JoinedFeed(TurnStreams(database), "alice", found, parse_event_id("0-1"))
        meta = {"message_id": "m"}
        feed.receive(0, meta, [[3, "delta", 1, {"text": "c"}]])  # 2 not here yet
        assert feed.events == []
        feed.receive(0, meta, [[1, "session", 0, {}], [2, "delta", 1, {"text": "b"}]])
        feed.receive(0, meta, [[2, "delta", 1, {"text": "b"}], [4, "delta", 1, {"text": "d"}]])
        # The replica died after 0-4; another took the turn over as attempt 1.
        feed.receive(1, meta, [[2, "delta", 1, {"text": "f"}]])
        feed.receive(1, meta, [[1, "session", 0, {}]])
        feed.receive(0, meta, [[5, "delta", 1, {"text": "late"}]])  # of the attempt given up
        feed.receive(1, meta, [[3, "done", 1, {"response": "ok"}]])
        told = [event.id for event in feed.events]
        assert told == [(0, 2), (0, 3), (0, 4), (1, 1), (1, 2), (1, 3)]
        assert feed.finished
        feed.close()
    finally:
        await database.dispose()


@pytest.mark.parametrize("given", ["12", "a-1", "1-", "-1", "1-2-3", "9" * 19 + "-1"])
async def test_an_event_id_not_of_a_turns_stream_is_refused(given: str) -> None:
    with pytest.raises(InvalidTurnEventId):
        parse_event_id(given)
