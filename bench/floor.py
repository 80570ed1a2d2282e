"""The floor: the least a chat turn can cost on this stack, to measure the service against.

A raw ASGI app (no framework, no ORM, no SDK) that does the essential work of a turn and
writes the service's own tables, so both leave the same rows behind:

    verify the HS256 JWT (python-jose) and that `sub` is the path's user;
    one transaction: (create the session,) store the user message, read the last 20;
    call the model with the body the service sends (system prompt, history, the six tool
    definitions, tool_choice, max_completion_tokens, temperature), over httpx;
    if it asks for add_todo: insert the task with the user's next number (one statement),
    and call the model again with the result;
    one statement: store the reply (with the tool records) and bump the session.

It serves `POST /api/{user_id}/chat`, `POST /api/{user_id}/chat/stream` (SSE: session,
delta, tool_call, tool_result, done) and `GET /health`, under uvicorn exactly as
`todo-agent serve` runs the service:

    python -m bench.floor --port 8001 [--workers 1]

Environment: DATABASE_URL, JWT_SECRET, OPENAI_BASE_URL, OPENAI_API_KEY,
BENCH_FLOOR_HTTP (`httpx2`, the default, or `raw`: see below) and BENCH_FLOOR_SPEC (a JSON
file with the model settings, the system messages and the tool definitions, written by the
bench from the service's own `TOOL_DEFINITIONS`; passing them in keeps the service's
modules out of the floor's memory).

Why httpx2 and not the openai SDK: the SDK sends these same bytes over this same transport
(httpx2, the httpx fork the openai package depends on), so leaving the SDK out removes only
its own work (transforming the request, pydantic-parsing the answer, its retry wrapper).
That is a cost the service chose (the design card asks for the SDK), and the comparison
should show it rather than hide it. (Not httpx 0.28: its connection pool, shared by 64
concurrent calls, tops out near 60 calls/s against a 300 ms model, which would make the
floor measure httpx.)

The raw floor (`BENCH_FLOOR_HTTP=raw`, the bench's `raw floor`) posts the model request
with a bare HTTP/1.1 client instead (the load generator's, `bench.load.Connection`: one
keep-alive connection per request in flight, kept in a free list): the least the model
request itself can cost. The httpx2 floor keeps the SDK's transport, so its ratio leaves
that transport's cost out of the comparison; the raw floor's ratio puts it in.
"""

import argparse
import asyncio
import json
import os
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import asyncpg  # type: ignore[import-untyped]
import httpx2 as httpx
from jose import jwt
from jose.exceptions import JOSEError

from backend.services.agent import to_model_messages
from bench.load import Connection

JSON = dict[str, Any]
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Emit = Callable[[str, Any], Awaitable[None]]

HISTORY = 20
MAX_TOOL_ROUNDS = 5
_ROUTE = re.compile(r"/api/([^/]{1,255})/chat(/stream)?")

_INSERT_SESSION = "INSERT INTO agent_sessions (id, user_id, title) VALUES ($1, $2, $3)"
# Only into the caller's own session: no row inserted means "not found".
_INSERT_USER_MESSAGE = """
    INSERT INTO agent_messages (id, session_id, user_id, role, content, created_at)
    SELECT $1, s.id, s.user_id, 'user', $4, clock_timestamp()
    FROM agent_sessions AS s WHERE s.id = $2 AND s.user_id = $3
"""
_HISTORY = """
    SELECT role, content, tool_calls, tool_results FROM agent_messages
    WHERE session_id = $1 AND user_id = $2 ORDER BY seq DESC LIMIT $3
"""
# Into the user's Inbox; the database numbers it (migration 0007's trigger), read after.
_ADD_TODO = """
    INSERT INTO tasks (id, list_id, created_by, title, created_at, updated_at)
    SELECT $1, l.id, $2::text, $3, now(), now() FROM lists AS l
    WHERE l.owner_id = $2::text AND l.inbox
"""
_NUMBER = "SELECT number FROM task_numbers WHERE task_id = $1 AND user_id = $2"
_FINISH = """
    WITH reply AS (
        INSERT INTO agent_messages (id, session_id, user_id, role, content, tool_calls,
                                    tool_results, prompt_tokens, completion_tokens, created_at)
        VALUES ($1, $2, $3, 'assistant', $4, $5, $6, $7, $8, clock_timestamp())
        RETURNING created_at
    )
    UPDATE agent_sessions SET updated_at = now(),
        prompt_tokens = prompt_tokens + $7,
        completion_tokens = completion_tokens + $8,
        total_tokens = total_tokens + $7 + $8
    WHERE id = $2 AND user_id = $3
    RETURNING (SELECT created_at FROM reply)
"""


class HTTPError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass
class Turn:
    owner: str
    session_id: uuid.UUID
    user_message_id: uuid.UUID
    messages: list[Any]  # OpenAI chat messages (JSON objects)
    reply_id: uuid.UUID = field(default_factory=uuid.uuid4)
    calls: list[JSON] = field(default_factory=list)
    results: list[JSON] = field(default_factory=list)
    usage: dict[str, int] = field(
        default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    )


class Floor:
    """What a worker holds: the pool, the HTTP client, the request template."""

    def __init__(self) -> None:
        with open(os.environ["BENCH_FLOOR_SPEC"], encoding="utf-8") as spec_file:
            spec: JSON = json.load(spec_file)
        self.prefix: list[JSON] = spec["prefix"]  # the system messages before the history
        self.options: JSON = spec["options"]  # model, tools, tool_choice, max tokens, ...
        self.secret = os.environ["JWT_SECRET"]
        self.dsn = os.environ["DATABASE_URL"].replace("postgresql+asyncpg://", "postgresql://")
        self.url = os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions"
        self.api_key = os.environ.get("OPENAI_API_KEY", "x")
        self.headers = {
            "Authorization": f"Bearer {self.api_key}",
            "Content-Type": "application/json",
        }
        self.raw = os.environ.get("BENCH_FLOOR_HTTP", "httpx2") == "raw"
        self._idle: list[Connection] = []  # the raw client's keep-alive connections
        self._pool: asyncpg.Pool | None = None
        self._http: httpx.AsyncClient | None = None

    async def start(self) -> None:
        # The service's pool: 10 connections plus 10 overflow. The openai SDK's httpx limits.
        self._pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=20, init=_json_codecs)
        self._http = httpx.AsyncClient(
            timeout=30.0,
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100),
        )

    async def stop(self) -> None:
        for connection in self._idle:
            connection.close()
        if self._http is not None:
            await self._http.aclose()
        if self._pool is not None:
            await self._pool.close()

    @property
    def pool(self) -> asyncpg.Pool:
        assert self._pool is not None
        return self._pool

    @property
    def http(self) -> httpx.AsyncClient:
        assert self._http is not None
        return self._http

    # -- the ASGI app ------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["path"] == "/health":
            await _respond(send, 200, {"status": "ok"})
            return
        route = _ROUTE.fullmatch(scope["path"])
        if scope["method"] != "POST" or route is None:
            await _respond(send, 404, {"detail": "Not Found"})
            return
        try:
            owner = self._verify(scope, route.group(1))
            request = json.loads(await _body(receive))
            message = request.get("message")
            if not isinstance(message, str) or not message.strip() or len(message) > 10_000:
                raise HTTPError(422, "message must be 1 to 10,000 characters")
            session = request.get("session_id")
            turn = await self._begin(owner, message, uuid.UUID(session) if session else None)
        except HTTPError as failure:
            await _respond(send, failure.status, {"detail": failure.detail})
            return
        except ValueError:
            await _respond(send, 422, {"detail": "invalid request"})
            return
        if route.group(2):
            await self._stream(turn, send)
        else:
            await _respond(send, 200, await self._run(turn, None))

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _verify(self, scope: Scope, user_id: str) -> str:
        authorization = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise HTTPError(401, "Not authenticated")
        try:
            claims = jwt.decode(token, self.secret, algorithms=["HS256"])
        except JOSEError as failure:
            raise HTTPError(401, "Invalid token") from failure
        if claims.get("sub") != user_id:
            raise HTTPError(403, "Forbidden")
        return user_id

    async def _stream(self, turn: Turn, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )

        async def emit(event: str, data: Any) -> None:
            frame = f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
            await send({"type": "http.response.body", "body": frame.encode(), "more_body": True})

        await emit(
            "session",
            {"session_id": str(turn.session_id), "user_message_id": str(turn.user_message_id)},
        )
        await emit("done", await self._run(turn, emit))
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    # -- the turn ----------------------------------------------------------------------

    async def _begin(self, owner: str, message: str, session_id: uuid.UUID | None) -> Turn:
        user_message_id = uuid.uuid4()
        async with self.pool.acquire() as connection, connection.transaction():
            if session_id is None:
                session_id = uuid.uuid4()
                await connection.execute(_INSERT_SESSION, session_id, owner, message[:60])
            inserted = await connection.execute(
                _INSERT_USER_MESSAGE, user_message_id, session_id, owner, message
            )
            if inserted == "INSERT 0 0":
                raise HTTPError(404, "Session not found")
            rows = await connection.fetch(_HISTORY, session_id, owner, HISTORY)
        return Turn(
            owner=owner,
            session_id=session_id,
            user_message_id=user_message_id,
            messages=[
                *self.prefix,
                # The service's own (pure) conversion: the floor does the same work there.
                *to_model_messages([(r[0], r[1], r[2], r[3]) for r in reversed(rows)]),
            ],
        )

    async def _run(self, turn: Turn, emit: Emit | None) -> JSON:
        text = ""
        for _ in range(MAX_TOOL_ROUNDS):
            text, calls = await self._complete(turn, emit)
            if not calls:
                break
            turn.messages.append(
                {"role": "assistant", "content": text or None, "tool_calls": calls}
            )
            for tool_call in calls:
                function = tool_call["function"]
                arguments = _arguments(function["arguments"])
                record = {"id": tool_call["id"], "name": function["name"], "arguments": arguments}
                if emit is not None:
                    await emit("tool_call", record)
                result = await self._tool(turn.owner, function["name"], arguments)
                outcome = {
                    "tool_call_id": tool_call["id"],
                    "name": function["name"],
                    "result": result,
                }
                if emit is not None:
                    await emit("tool_result", outcome)
                turn.calls.append(record)
                turn.results.append(outcome)
                turn.messages.append(
                    {"role": "tool", "tool_call_id": tool_call["id"], "content": json.dumps(result)}
                )
        usage = turn.usage
        async with self.pool.acquire() as connection:
            created_at: datetime = await connection.fetchval(
                _FINISH,
                turn.reply_id,
                turn.session_id,
                turn.owner,
                text,
                turn.calls or None,
                turn.results or None,
                usage["prompt_tokens"],
                usage["completion_tokens"],
            )
        return {
            "session_id": str(turn.session_id),
            "conversation_id": str(turn.session_id),
            "message_id": str(turn.reply_id),
            "response": text,
            "timestamp": created_at.isoformat(),
            "tool_calls": turn.calls,
            "tool_results": turn.results,
            "using_stub": False,
            "usage": usage,
        }

    async def _complete(self, turn: Turn, emit: Emit | None) -> tuple[str, list[JSON]]:
        """One model answer: its text and tool calls (streamed when `emit` is given)."""
        body: JSON = {**self.options, "messages": turn.messages}
        if emit is None:
            answer = json.loads(await self._post(_dumps(body)))
            _count(turn.usage, answer.get("usage"))
            message = answer["choices"][0]["message"]
            return message.get("content") or "", list(message.get("tool_calls") or ())
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        text: list[str] = []
        calls: dict[int, JSON] = {}
        async for line in self._lines(_dumps(body)):
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            _count(turn.usage, chunk.get("usage"))
            for choice in chunk.get("choices", ()):
                delta = choice.get("delta") or {}
                if piece := delta.get("content"):
                    text.append(piece)
                    await emit("delta", {"text": piece})
                for part in delta.get("tool_calls") or ():
                    slot = calls.setdefault(
                        part["index"],
                        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    slot["id"] = part.get("id") or slot["id"]
                    function = part.get("function") or {}
                    slot["function"]["name"] += function.get("name") or ""
                    slot["function"]["arguments"] += function.get("arguments") or ""
        return "".join(text), [calls[index] for index in sorted(calls)]

    # -- the model request: httpx2, or a bare HTTP/1.1 client ---------------------------

    async def _post(self, content: bytes) -> bytes:
        if self.raw:
            return await self._raw_post(content)
        response = await self.http.post(self.url, content=content, headers=self.headers)
        if response.status_code != 200:
            raise RuntimeError(f"model answered {response.status_code}")
        return response.content

    async def _lines(self, content: bytes) -> AsyncIterator[str]:
        """The lines of a streamed answer, as they arrive."""
        if not self.raw:
            async with self.http.stream(
                "POST", self.url, content=content, headers=self.headers
            ) as response:
                async for line in response.aiter_lines():
                    yield line
            return
        lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        request = asyncio.ensure_future(self._raw_post(content, lines.put_nowait))
        request.add_done_callback(lambda _: lines.put_nowait(None))
        while (raw := await lines.get()) is not None:
            yield raw.decode().rstrip("\r")
        await request  # its failure, if any

    async def _raw_post(
        self, content: bytes, on_line: Callable[[bytes], None] | None = None
    ) -> bytes:
        connection = self._idle.pop() if self._idle else Connection(self.url)
        try:
            status, answer = await connection.request(
                "POST", urlsplit(self.url).path, self.api_key, content, on_line
            )
        finally:
            self._idle.append(connection)  # (a failed one has closed, and reopens on use)
        if status != 200:
            raise RuntimeError(f"model answered {status}")
        return answer

    async def _tool(self, owner: str, name: str, arguments: JSON | str) -> JSON:
        title = arguments.get("title") if isinstance(arguments, dict) else None
        if name != "add_todo" or not isinstance(title, str) or not 1 <= len(title) <= 200:
            return {"status": "error", "error": "The floor only adds todos."}
        task_id = uuid.uuid4()
        async with self.pool.acquire() as connection, connection.transaction():
            await connection.execute(_ADD_TODO, task_id, owner, title)
            number = await connection.fetchval(_NUMBER, task_id, owner)
        todo = {"id": str(task_id), "number": number, "title": title, "completed": False}
        return {"status": "created", "todo": todo}


# -- helpers ---------------------------------------------------------------------------


async def _json_codecs(connection: asyncpg.Connection) -> None:
    for name in ("json", "jsonb"):
        await connection.set_type_codec(
            name, encoder=_dumps_text, decoder=json.loads, schema="pg_catalog"
        )


def _arguments(raw: str) -> JSON | str:
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return raw
    return parsed if isinstance(parsed, dict) else raw


def _count(total: dict[str, int], usage: JSON | None) -> None:
    for key in total:
        total[key] += int((usage or {}).get(key) or 0)


def _dumps_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _dumps(value: Any) -> bytes:
    return _dumps_text(value).encode()


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _respond(send: Send, status: int, payload: JSON) -> None:
    body = _dumps(payload)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def create_app() -> Floor:
    return Floor()


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    # The same uvicorn options as `todo-agent serve` (backend/cli.py), and like the
    # service at LOG_LEVEL=WARNING, no line per request.
    uvicorn.run(
        "bench.floor:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        proxy_headers=True,
        access_log=False,
        log_level=os.environ.get("LOG_LEVEL", "info").lower(),
        timeout_graceful_shutdown=30,
    )


if __name__ == "__main__":
    main()
