"""A scripted OpenAI-compatible HTTP server for the tests and the benchmark.

The real `openai` SDK is part of what we test, so the model is faked one level lower: a
real HTTP server on 127.0.0.1 that speaks `POST /v1/chat/completions` (plain and streamed
answers, tool calls, errors, slow answers, dropped connections) and records what it was sent.

    with FakeOpenAI() as fake:
        fake.script(
            tool_calls(call("add_todo", {"title": "milk"})),
            reply("Added milk."),
        )
        client = AsyncOpenAI(base_url=fake.base_url, api_key="test", max_retries=0)
        ...
        assert fake.last_messages()[-1]["role"] == "tool"

Steps are consumed one per request, in order; when none is left `fake.default` answers
(a plain "OK" unless changed). A step may also be a callable `fn(request_body) -> step`
(or a string, short for `reply(text)`). Every step answers both plain and `"stream": true`
requests the way OpenAI does.

The server runs its own event loop in a background thread, so blocking test code never
stalls it, and other processes (a server started by a test) can reach it on its TCP port.
It is a minimal HTTP/1.1 implementation on asyncio streams (keep-alive, chunked streaming)
so that it stays cheap at hundreds of requests per second and can drop a connection
exactly where a step says.

It also speaks `POST /v1/embeddings`, scripted apart from the chat (`script_embeddings`,
`embeddings_default`, `embedding_requests`): by default each input gets a deterministic
vector of `embedding_dimensions` (a request's own `dimensions` wins) from `embedder`,
`embed_text` unless changed: a hashed bag of stemmed words in which a few synonyms share a
word ("car" and "vehicle"), so that meaning can be told from wording in tests. Any error
step (`error(500)`, `hang()`, `reset()`) answers an embeddings request as it answers a chat.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import http
import itertools
import json
import math
import re
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, TypeAlias

__all__ = [
    "Call",
    "Completion",
    "ErrorStep",
    "FakeOpenAI",
    "Garbage",
    "RecordedRequest",
    "Reset",
    "ResetMidStream",
    "Responder",
    "Step",
    "StepLike",
    "StreamError",
    "Vectors",
    "call",
    "delay",
    "embed_text",
    "error",
    "garbage",
    "hang",
    "reply",
    "reset",
    "reset_mid_stream",
    "stream_error",
    "tool_calls",
    "vectors",
]

JSONObject: TypeAlias = dict[str, Any]

# Tool-call arguments are streamed in fragments of this many characters (OpenAI streams
# them token by token, so fragments routinely split keys, values and escapes).
ARGUMENT_FRAGMENT_CHARS = 8
_HANG_SECONDS = 3600.0
_CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
_EMBEDDING_PATHS = frozenset({"/v1/embeddings", "/embeddings"})
_READ_LIMIT = 16 * 1024 * 1024


# --------------------------------------------------------------------------- steps


@dataclass(frozen=True, kw_only=True)
class Step:
    """One scripted answer. `delay` (seconds) is waited before anything is sent, and before
    that, `until` is set if given (see `held`)."""

    delay: float = 0.0
    until: threading.Event | None = None


@dataclass(frozen=True)
class Call:
    """One function tool call in an answer; `arguments` is the exact text sent."""

    name: str
    arguments: str
    id: str | None = None


@dataclass(frozen=True, kw_only=True)
class Completion(Step):
    """A normal answer: text and/or tool calls."""

    text: str | None = None
    calls: tuple[Call, ...] = ()
    finish_reason: str | None = None  # None: "tool_calls" when there are calls, else "stop"
    usage: Mapping[str, Any] | None = None  # None: estimated; may hold prompt_tokens_details
    chunks: tuple[str, ...] | None = None  # streamed content pieces; None: split on words
    chunk_interval_s: float | None = None  # None: the server's chunk_interval_s


@dataclass(frozen=True, kw_only=True)
class ErrorStep(Step):
    """An HTTP error answer (also for streamed requests, as OpenAI does)."""

    status: int
    body: Mapping[str, Any] | str | bytes
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Reset(Step):
    """Close the connection abruptly (TCP RST) without any response."""


@dataclass(frozen=True, kw_only=True)
class Garbage(Step):
    """A response whose body is not what the client expects (non-JSON by default)."""

    status: int = 200
    body: bytes = b"<html>this is not JSON {"
    content_type: str = "application/json"


@dataclass(frozen=True, kw_only=True)
class ResetMidStream(Step):
    """Start answering `then`, then drop the connection.

    Streamed: send the first `after_chunks` SSE events (role chunk, content chunks, ...)
    and close without finishing the body. Not streamed: send the status line, headers
    and half of the body, then close.
    """

    after_chunks: int = 1
    then: Completion


@dataclass(frozen=True, kw_only=True)
class StreamError(Step):
    """Streamed: `after_chunks` events of `then`, then `data: {"error": ...}` (the SDK raises
    `openai.APIError` while iterating). Not streamed: a 500 with the same error body."""

    after_chunks: int = 1
    then: Completion
    message: str = "The server had an error while processing your request."


@dataclass(frozen=True, kw_only=True)
class Vectors(Step):
    """An embeddings answer: a vector per input, from the fake's `embedder`, of
    `dimensions` (None: the request's own `dimensions`, else the fake's
    `embedding_dimensions`)."""

    dimensions: int | None = None


Responder: TypeAlias = Callable[[JSONObject], "Step | str"]
StepLike: TypeAlias = "Step | str | Responder"


def call(
    name: str, arguments: Mapping[str, Any] | str | None = None, *, id: str | None = None
) -> Call:
    """A tool call. A mapping is sent as compact JSON; a string is sent verbatim (so it can
    be malformed). Without `id`, the server assigns call_1, call_2, ... (unique per fake
    until `clear()`)."""
    if arguments is None:
        arguments = {}
    text = (
        arguments
        if isinstance(arguments, str)
        else json.dumps(dict(arguments), separators=(",", ":"), ensure_ascii=False)
    )
    return Call(name=name, arguments=text, id=id)


def reply(
    text: str = "OK",
    *,
    usage: Mapping[str, Any] | None = None,
    finish_reason: str = "stop",
    chunks: Iterable[str] | None = None,
    chunk_interval_s: float | None = None,
    delay: float = 0.0,
) -> Completion:
    """A plain text answer. Streamed, the text is split into word-sized `delta.content`
    chunks (or the given `chunks`, which must join to `text`)."""
    pieces = tuple(chunks) if chunks is not None else None
    if pieces is not None and "".join(pieces) != text:
        raise ValueError("chunks must join to the text")
    return Completion(
        text=text,
        usage=usage,
        finish_reason=finish_reason,
        chunks=pieces,
        chunk_interval_s=chunk_interval_s,
        delay=delay,
    )


def tool_calls(
    *calls: Call,
    text: str | None = None,
    usage: Mapping[str, Any] | None = None,
    finish_reason: str = "tool_calls",
    chunk_interval_s: float | None = None,
    delay: float = 0.0,
) -> Completion:
    """An answer with tool calls; several calls are parallel tool calls (indexes 0, 1, ...)."""
    if not calls:
        raise ValueError("tool_calls() needs at least one call()")
    return Completion(
        text=text,
        calls=calls,
        usage=usage,
        finish_reason=finish_reason,
        chunk_interval_s=chunk_interval_s,
        delay=delay,
    )


_ERROR_KINDS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    408: ("timeout", None),
    409: ("invalid_request_error", None),
    422: ("invalid_request_error", None),
    429: ("requests", "rate_limit_exceeded"),
}


def error_body(status: int, message: str | None = None) -> JSONObject:
    """An OpenAI-shaped error body for `status`."""
    kind, code = _ERROR_KINDS.get(status, ("server_error", None))
    return {
        "error": {
            "message": message or f"Fake OpenAI error {status}",
            "type": kind,
            "param": None,
            "code": code,
        }
    }


def error(
    status: int,
    body: Mapping[str, Any] | str | bytes | None = None,
    *,
    message: str | None = None,
    headers: Mapping[str, str] | None = None,
    delay: float = 0.0,
) -> ErrorStep:
    """An HTTP error: e.g. `error(429, headers={"Retry-After": "1"})`, `error(500)`.

    `body` defaults to an OpenAI-shaped `{"error": {...}}` with `message`; a mapping is sent
    as JSON, a string or bytes verbatim as text/plain."""
    return ErrorStep(
        status=status,
        body=body if body is not None else error_body(status, message),
        headers=dict(headers or {}),
        delay=delay,
    )


def vectors(*, dimensions: int | None = None, delay: float = 0.0) -> Vectors:
    """Answer an embeddings request with vectors (what `embeddings_default` does)."""
    return Vectors(dimensions=dimensions, delay=delay)


def delay(seconds: float, then: Step | str | None = None) -> Step:
    """`then` (default `reply("OK")`), answered `seconds` later (on top of its own delay)."""
    step = _as_step(then if then is not None else reply())
    return replace(step, delay=step.delay + seconds)


def held(until: threading.Event, then: Step | str | None = None) -> Step:
    """`then` (default `reply("OK")`), answered once the test sets `until`: a turn kept in
    flight for exactly as long as the test needs it."""
    return replace(_as_step(then if then is not None else reply()), until=until)


def hang() -> Step:
    """Never answer (until the client gives up or the fake stops)."""
    return Reset(delay=_HANG_SECONDS)


def reset(*, delay: float = 0.0) -> Reset:
    """Drop the connection without sending a response."""
    return Reset(delay=delay)


def garbage(
    body: bytes = b"<html>this is not JSON {",
    *,
    status: int = 200,
    content_type: str = "application/json",
    delay: float = 0.0,
) -> Garbage:
    """A 200 whose body is not JSON (the same body for streamed requests)."""
    return Garbage(status=status, body=body, content_type=content_type, delay=delay)


def reset_mid_stream(
    after_chunks: int = 1, then: Completion | str | None = None, *, delay: float = 0.0
) -> ResetMidStream:
    """Send `after_chunks` chunks of `then`, then drop the connection."""
    return ResetMidStream(
        after_chunks=after_chunks, then=_as_completion(then, _CUT_TEXT), delay=delay
    )


def stream_error(
    after_chunks: int = 1,
    then: Completion | str | None = None,
    *,
    message: str = "The server had an error while processing your request.",
    delay: float = 0.0,
) -> StreamError:
    """Send `after_chunks` chunks of `then`, then an SSE `error` event."""
    return StreamError(
        after_chunks=after_chunks,
        then=_as_completion(then, _CUT_TEXT),
        message=message,
        delay=delay,
    )


_CUT_TEXT = "This answer will be cut off somewhere in the middle of the sentence."


def _as_completion(value: Completion | str | None, default_text: str) -> Completion:
    if value is None:
        return reply(default_text)
    return reply(value) if isinstance(value, str) else value


def _as_step(value: Step | str) -> Step:
    return reply(value) if isinstance(value, str) else value


# --------------------------------------------------------------------------- embeddings

# Words that share a meaning share a dimension: what a real model knows and words alone do
# not ("car" finds "vehicle").
SYNONYMS: dict[str, str] = {
    word: group[0]
    for group in (
        ("vehicle", "car", "automobile", "van", "truck"),
        ("pet", "dog", "cat", "puppy", "kitten", "animal"),
        ("home", "house", "flat", "apartment"),
        ("lease", "rental", "tenancy", "rent"),
        ("doctor", "physician", "gp", "clinic"),
        ("money", "cash", "payment", "pay", "fee", "cost", "price"),
        ("passport", "visa", "id"),
        ("wifi", "internet", "wireless", "network"),
        ("cook", "bake", "roast", "recipe"),
        ("trip", "journey", "travel", "vacation", "holiday"),
    )
    for word in group
}
_STOP_WORDS = frozenset(
    ("a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "from", "how", "i",
     "in", "is", "it", "my", "of", "on", "or", "our", "say", "says", "the", "this", "to",
     "what", "when", "where", "which", "who", "with", "you", "your")
)  # fmt: skip
_SUFFIXES = ("ings", "ing", "ies", "ied", "es", "ed", "s")


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            stem = word[: -len(suffix)]
            return stem + "y" if suffix in ("ies", "ied") else stem
    return word


def embed_text(text: str, dimensions: int) -> list[float]:
    """A deterministic unit vector for `text`: each word (stemmed, its synonym group's when
    it has one, stop words left out) adds a signed one at a place its hash picks."""
    vector = [0.0] * dimensions
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        if word in _STOP_WORDS:
            continue
        term = SYNONYMS.get(word) or SYNONYMS.get(_stem(word)) or _stem(word)
        digest = hashlib.blake2b(term.encode(), digest_size=8).digest()
        place = int.from_bytes(digest[:4], "little") % dimensions
        vector[place] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0:
        vector[0], norm = 1.0, 1.0  # no words: still a valid vector
    return [x / norm for x in vector]


# --------------------------------------------------------------------------- records


@dataclass
class RecordedRequest:
    """One request the fake received. Times are `time.monotonic()` (system-wide on Linux,
    so comparable with other processes on the same machine)."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: JSONObject
    received_at: float
    step: Step | None = None  # what answered it
    first_byte_at: float | None = None  # first response bytes (streamed: the first chunk)
    finished_at: float | None = None  # response complete (or connection dropped)

    @property
    def messages(self) -> list[JSONObject]:
        messages: list[JSONObject] = self.body.get("messages", [])
        return messages

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def tool_names(self) -> list[str]:
        """Names of the function tools offered in the request."""
        return [t["function"]["name"] for t in self.body.get("tools", []) if "function" in t]


# --------------------------------------------------------------------------- server


@dataclass
class _Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


class _ClientGone(Exception):
    pass


class FakeOpenAI:
    """A scripted OpenAI-compatible server on 127.0.0.1, in a background thread.

    `latency_s` is added before every answer (streamed: before the headers and first chunk);
    `chunk_interval_s` is waited between streamed chunks. Both may be changed at any time.
    """

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        chunk_interval_s: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.latency_s = latency_s
        self.chunk_interval_s = chunk_interval_s
        self.host = host
        self.port = port
        self.default: StepLike = reply("OK")
        self.embeddings_default: StepLike = vectors()
        self.embedding_dimensions = 64
        self.embedder: Callable[[str, int], list[float]] = embed_text
        self.errors: list[BaseException] = []  # exceptions raised by callable responders
        self._lock = threading.Condition()
        self._queue: deque[StepLike] = deque()
        self._requests: list[RecordedRequest] = []
        self._embedding_queue: deque[StepLike] = deque()
        self._embedding_requests: list[RecordedRequest] = []
        self._call_ids = itertools.count(1)
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> FakeOpenAI:
        if self._loop is not None:
            raise RuntimeError("FakeOpenAI is already running")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(
            target=self._run_loop, args=(loop,), name="fake-openai", daemon=True
        )
        thread.start()
        self._loop, self._thread = loop, thread
        try:
            asyncio.run_coroutine_threadsafe(self._serve(), loop).result(timeout=10)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        if not thread.is_alive():
            loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT` (no `/v1`)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What to give the SDK as `base_url`: `http://127.0.0.1:PORT/v1`."""
        return f"{self.url}/v1"

    # ---------------------------------------------------------------- scripting

    def script(self, *steps: StepLike) -> None:
        """Queue answers, consumed one per request in order (after any already queued)."""
        with self._lock:
            self._queue.extend(steps)

    def script_embeddings(self, *steps: StepLike) -> None:
        """Queue answers to embeddings requests (e.g. `error(500)`, `hang()`, `vectors()`),
        one per request; then `embeddings_default` answers."""
        with self._lock:
            self._embedding_queue.extend(steps)

    @property
    def pending_steps(self) -> int:
        """Scripted steps not consumed yet."""
        with self._lock:
            return len(self._queue)

    def clear(self) -> None:
        """Back to a fresh state: no requests, no script, default "OK", call ids from 1."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()
            self._embedding_queue.clear()
            self._embedding_requests.clear()
            self.errors.clear()
            self.default = reply("OK")
            self.embeddings_default = vectors()
            self.embedding_dimensions = 64
            self.embedder = embed_text
            self._call_ids = itertools.count(1)

    # ---------------------------------------------------------------- inspection

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the chat-completion requests received, oldest first."""
        with self._lock:
            return list(self._requests)

    @property
    def embedding_requests(self) -> list[RecordedRequest]:
        """A snapshot of the embeddings requests received, oldest first."""
        with self._lock:
            return list(self._embedding_requests)

    def embedded_inputs(self) -> list[str]:
        """Every text the embeddings requests asked for, in order (answered or not)."""
        inputs: list[str] = []
        for record in self.embedding_requests:
            given = record.body.get("input")
            inputs.extend([given] if isinstance(given, str) else given or [])
        return inputs

    @property
    def requests_count(self) -> int:
        with self._lock:
            return len(self._requests)

    @property
    def last_request(self) -> RecordedRequest:
        with self._lock:
            if not self._requests:
                raise LookupError("FakeOpenAI has received no request")
            return self._requests[-1]

    def last_messages(self) -> list[JSONObject]:
        """The `messages` of the last request."""
        return self.last_request.messages

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least `count` requests have arrived (for other processes' calls)."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self._requests) >= count, timeout):
                raise TimeoutError(
                    f"FakeOpenAI got {len(self._requests)} requests, expected {count}"
                )
            return list(self._requests)

    def wait_finished(self, record: RecordedRequest, timeout: float = 5.0) -> float:
        """Block until `record`'s response is complete: noted once its last write has
        drained, which may be a moment after the client has read it and returned."""
        with self._lock:
            if not self._lock.wait_for(lambda: record.finished_at is not None, timeout):
                raise TimeoutError(f"FakeOpenAI: {record.path} not finished in {timeout} s")
            assert record.finished_at is not None
            return record.finished_at

    # ---------------------------------------------------------------- event loop side

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        loop.run_forever()

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(
            self._connection, self.host, self.port, backlog=4096, limit=_READ_LIMIT
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                request = await _read_request(reader)
                if request is None or not await self._answer(request, reader, writer):
                    break
        except (
            _ClientGone,
            OSError,  # includes ConnectionError
            ValueError,  # a malformed request head
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            asyncio.CancelledError,  # stop()
        ):
            pass
        finally:
            self._tasks.discard(task)
            if not writer.transport.is_closing():
                writer.close()

    def _next_step(self, body: JSONObject, *, embeddings: bool = False) -> Step:
        with self._lock:
            if embeddings:
                queue, default = self._embedding_queue, self.embeddings_default
            else:
                queue, default = self._queue, self.default
            item = queue.popleft() if queue else default
        try:
            step = _as_step(item(body) if callable(item) else item)
            if not isinstance(step, Step):
                raise TypeError(f"not a FakeOpenAI step: {step!r}")
            return step
        except Exception as exc:
            with self._lock:
                self.errors.append(exc)
            return error(500, message=f"FakeOpenAI responder failed: {exc!r}")

    async def _answer(
        self, request: _Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; False when the connection must not be reused."""
        keep_alive = request.headers.get("connection", "").lower() != "close"
        path = request.target.split("?", 1)[0].rstrip("/")
        embeddings = path in _EMBEDDING_PATHS
        if request.method != "POST" or not (path in _CHAT_PATHS or embeddings):
            payload = error_body(404, f"Unknown URL {request.method} {request.target}")
            await _send(writer, 404, _json_bytes(payload), "application/json", {}, keep_alive)
            return keep_alive
        try:
            body = json.loads(request.body)
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except ValueError as exc:
            payload = error_body(400, f"FakeOpenAI: invalid JSON body: {exc}")
            await _send(writer, 400, _json_bytes(payload), "application/json", {}, keep_alive)
            return keep_alive

        record = RecordedRequest(
            method=request.method,
            path=path,
            headers=request.headers,
            body=body,
            received_at=time.monotonic(),
        )
        with self._lock:
            (self._embedding_requests if embeddings else self._requests).append(record)
            self._lock.notify_all()
        step = self._next_step(body, embeddings=embeddings)
        record.step = step
        try:
            return await self._play(step, record, reader, writer, keep_alive)
        finally:
            with self._lock:
                record.finished_at = time.monotonic()
                self._lock.notify_all()

    async def _play(
        self,
        step: Step,
        record: RecordedRequest,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        keep_alive: bool,
    ) -> bool:
        while step.until is not None and not step.until.is_set():
            await _wait(0.05, reader, writer)
        await _wait(self.latency_s + step.delay, reader, writer)
        streamed = record.stream
        headers = {"x-request-id": f"req_fake_{next(self._ids)}"}

        if isinstance(step, Reset):
            _abort(writer, rst=True)
            return False

        if isinstance(step, ErrorStep):
            if isinstance(step.body, bytes | str):
                raw = step.body.encode() if isinstance(step.body, str) else step.body
                content_type = "text/plain; charset=utf-8"
            else:
                raw, content_type = _json_bytes(dict(step.body)), "application/json"
            record.first_byte_at = time.monotonic()
            await _send(
                writer, step.status, raw, content_type, headers | dict(step.headers), keep_alive
            )
            return keep_alive

        if isinstance(step, Garbage):
            record.first_byte_at = time.monotonic()
            await _send(writer, step.status, step.body, step.content_type, headers, keep_alive)
            return keep_alive

        if isinstance(step, Vectors) or record.path in _EMBEDDING_PATHS:
            if isinstance(step, Vectors):
                status, answered = 200, self._embeddings(step, record.body)
            else:
                status = 500
                answered = error_body(500, f"FakeOpenAI: {type(step).__name__} is no embedding")
            record.first_byte_at = time.monotonic()
            encoded = _json_bytes(answered)
            await _send(writer, status, encoded, "application/json", headers, keep_alive)
            return keep_alive

        if isinstance(step, Completion):
            completion = step
            stop_after: int | None = None
            tail: bytes | None = None
        elif isinstance(step, ResetMidStream):
            completion, stop_after, tail = step.then, step.after_chunks, None
        elif isinstance(step, StreamError):
            completion, stop_after = step.then, step.after_chunks
            tail = _sse(error_body(500, step.message))
            if not streamed:
                payload = _json_bytes(error_body(500, step.message))
                record.first_byte_at = time.monotonic()
                await _send(writer, 500, payload, "application/json", headers, keep_alive)
                return keep_alive
        else:
            raise TypeError(f"FakeOpenAI cannot play {step!r}")

        answer = self._build(completion, record.body)
        if not streamed:
            raw = _json_bytes(answer.message())
            if isinstance(step, ResetMidStream):
                head = _head(200, "application/json", headers, len(raw), keep_alive)
                writer.write(head + raw[: len(raw) // 2])
                record.first_byte_at = time.monotonic()
                await writer.drain()
                _abort(writer, rst=False)
                return False
            record.first_byte_at = time.monotonic()
            await _send(writer, 200, raw, "application/json", headers, keep_alive)
            return keep_alive

        events = [_sse(chunk) for chunk in answer.chunks()]
        if stop_after is not None:
            events = events[:stop_after]
        if tail is not None:
            events.append(tail)
        elif stop_after is None:
            events.append(b"data: [DONE]\n\n")
        interval = (
            completion.chunk_interval_s
            if completion.chunk_interval_s is not None
            else self.chunk_interval_s
        )
        head = _head(200, "text/event-stream; charset=utf-8", headers, None, keep_alive)
        writer.write(head)
        for i, event in enumerate(events):
            if i and interval > 0:
                await writer.drain()
                await asyncio.sleep(interval)
                _check_client(reader, writer)
            writer.write(b"%x\r\n%b\r\n" % (len(event), event))
            if i == 0:
                record.first_byte_at = time.monotonic()
        if isinstance(step, ResetMidStream):
            await writer.drain()
            _abort(writer, rst=False)
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return keep_alive

    def _embeddings(self, step: Vectors, body: JSONObject) -> JSONObject:
        """The answer to `POST /v1/embeddings`, as OpenAI shapes it (base64 float32 when the
        request asks for it, as the SDK does by default)."""
        given = body.get("input")
        inputs = [given] if isinstance(given, str) else list(given or [])
        dimensions = step.dimensions or body.get("dimensions") or self.embedding_dimensions
        data = []
        for index, text in enumerate(inputs):
            vector = self.embedder(str(text), int(dimensions))
            encoded: Any = vector
            if body.get("encoding_format") == "base64":
                encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(len(str(text).split()) for text in inputs)
        return {
            "object": "list",
            "data": data,
            "model": str(body.get("model", "text-embedding-fake")),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def _build(self, completion: Completion, body: JSONObject) -> _Answer:
        calls = [
            (c.id or f"call_{next(self._call_ids)}", c.name, c.arguments) for c in completion.calls
        ]
        return _Answer(
            completion=completion,
            calls=calls,
            id=f"chatcmpl-fake{next(self._ids)}",
            created=int(time.time()),
            model=str(body.get("model", "gpt-fake")),
            include_usage=bool((body.get("stream_options") or {}).get("include_usage")),
            usage=_usage(completion, calls, body),
        )


@dataclass
class _Answer:
    """A Completion made concrete for one request (ids assigned, usage computed)."""

    completion: Completion
    calls: list[tuple[str, str, str]]  # (id, name, arguments)
    id: str
    created: int
    model: str
    include_usage: bool
    usage: dict[str, Any]

    @property
    def finish_reason(self) -> str:
        if self.completion.finish_reason is not None:
            return self.completion.finish_reason
        return "tool_calls" if self.calls else "stop"

    def message(self) -> JSONObject:
        message: JSONObject = {
            "role": "assistant",
            "content": self.completion.text,
            "refusal": None,
            "annotations": [],
        }
        if self.calls:
            message["tool_calls"] = [
                {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}
                for id_, name, args in self.calls
            ]
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "service_tier": "default",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self.finish_reason,
                }
            ],
            "usage": self.usage,
        }

    def _chunk(self, delta: JSONObject, finish_reason: str | None = None) -> JSONObject:
        chunk: JSONObject = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "service_tier": "default",
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def chunks(self) -> list[JSONObject]:
        """The `chat.completion.chunk` objects of the streamed answer, as OpenAI sends them."""
        text = self.completion.text
        out = [
            self._chunk(
                {"role": "assistant", "content": "" if text is not None else None, "refusal": None}
            )
        ]
        if text:
            pieces = self.completion.chunks or tuple(re.findall(r"\S+\s*|\s+", text))
            out.extend(self._chunk({"content": piece}) for piece in pieces if piece)
        for index, (id_, name, args) in enumerate(self.calls):
            out.append(
                self._chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": id_,
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }
                        ]
                    }
                )
            )
            for start in range(0, len(args), ARGUMENT_FRAGMENT_CHARS):
                fragment = args[start : start + ARGUMENT_FRAGMENT_CHARS]
                out.append(
                    self._chunk(
                        {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}
                    )
                )
        out.append(self._chunk({}, self.finish_reason))
        if self.include_usage:
            last = self._chunk({})
            last["choices"] = []
            last["usage"] = self.usage
            out.append(last)
        return out


def _usage(
    completion: Completion, calls: list[tuple[str, str, str]], body: JSONObject
) -> dict[str, Any]:
    given = dict(completion.usage or {})
    prompt = given.get("prompt_tokens")
    if prompt is None:
        prompt = len(json.dumps(body.get("messages", []))) // 4 + 1
    produced = len(completion.text or "") + sum(len(n) + len(a) for _, n, a in calls)
    done = given.get("completion_tokens")
    if done is None:
        done = produced // 4 + 1
    given.update(prompt_tokens=prompt, completion_tokens=done)
    given.setdefault("total_tokens", prompt + done)
    return given


# --------------------------------------------------------------------------- HTTP/1.1


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    """The next request on the connection, or None when the client closed it."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        name, value = name.strip().lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(parts)
    else:
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return _Request(method=method, target=target, headers=headers, body=body)


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _head(
    status: int,
    content_type: str,
    headers: Mapping[str, str],
    length: int | None,
    keep_alive: bool,
) -> bytes:
    lines = [f"HTTP/1.1 {status} {_reason(status)}", f"content-type: {content_type}"]
    if length is None:
        lines += ["transfer-encoding: chunked", "cache-control: no-cache"]
    else:
        lines.append(f"content-length: {length}")
    lines.append(f"connection: {'keep-alive' if keep_alive else 'close'}")
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _send(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    content_type: str,
    headers: Mapping[str, str],
    keep_alive: bool,
) -> None:
    writer.write(_head(status, content_type, headers, len(body), keep_alive) + body)
    await writer.drain()


def _json_bytes(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _sse(value: object) -> bytes:
    return b"data: " + _json_bytes(value) + b"\n\n"


async def _wait(seconds: float, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Sleep, giving up early (and for good) when the client goes away meanwhile."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        await asyncio.sleep(min(left, 0.25))
        _check_client(reader, writer)
    _check_client(reader, writer)


def _check_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Give up on a request whose client has gone away (e.g. timed out while we waited)."""
    if reader.at_eof() or writer.transport.is_closing():
        raise _ClientGone


def _abort(writer: asyncio.StreamWriter, *, rst: bool) -> None:
    if rst:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
    else:
        writer.close()
