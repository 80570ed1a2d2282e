"""ModelCaller: one model answer for a turn, robustly.

answer      the first try runs bare; a transient failure is tried again after the server's
            Retry-After, or exponential backoff with jitter, while tries and the time budget
            last; then ModelUnavailable (the agent falls back);
one call    counted and logged whatever its outcome; read whole, or streamed with its text
            told to the turn as it comes; what goes wrong classified as transient (tried
            again) or not (ModelUnavailable).

The turn itself (its tools, history and storage) is agent.py's; this module only reads what
a call sends from it and counts in it what the calls cost (`ModelTurn`).
"""

import asyncio
import random
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import openai
import orjson
from openai import AsyncStream
from openai._types import RequestOptions
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessageParam
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type

from backend import metrics
from backend.logs import log_model_call
from backend.models.session import Usage
from backend.services.model_http import ModelClient
from backend.services.tools import TodoTools
from backend.settings import Settings

ToolChoice = Literal["auto", "none"]

_TRANSIENT_STATUS = frozenset({408, 409, 429})
# `chat.completions.create` re-walks every message and tool schema against the SDK's
# TypedDicts on each call (`maybe_transform`: most of a turn's CPU in profiles). Our bodies
# are plain JSON already, so we post them through the SDK's own documented low-level
# `post` (or `ModelClient.post_bytes`, the same request for a whole answer), keeping its
# auth, timeouts and error types: encoded by orjson (the tool
# definitions once, as a fragment), and a whole answer read back with orjson rather than
# built into the SDK's pydantic models field by field.
_AUTH: RequestOptions = {"security": {"bearer_auth": True}}
_COMPLETIONS = "/chat/completions"  # under base_url, merged once by ModelClient


class ModelUnavailable(Exception):
    """The model did not answer after the retries the budget allows."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Transient(Exception):
    """A model error worth retrying; carries the server's Retry-After hint."""

    def __init__(self, reason: str, retry_after_s: float | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


@dataclass
class ModelReply:
    content: str
    tool_calls: list[tuple[str, str, str]]  # (id, name, raw JSON arguments)
    usage: Usage


class ModelTurn(Protocol):
    """The turn an answer is for (agent.py's Turn), as its model calls see it: the turn
    itself rather than its parts, so that a call costs no extra object."""

    # What a call sends, and whether a streamed one tells its text (`send`) or it is read
    # whole.
    id: uuid.UUID  # names a streamed tool call that came without an id
    session_id: uuid.UUID  # in each call's log line
    model: str
    messages: list[ChatCompletionMessageParam]
    tools: TodoTools
    streamed: bool
    # What the calls cost, counted here: every try, failed ones included.
    steps: int  # answers asked for
    usage: Usage
    model_calls: int
    model_seconds: float

    def send(self, event: str, data: dict[str, Any]) -> None: ...


class ModelCaller:
    def __init__(self, *, settings: Settings, client: ModelClient) -> None:
        self._settings = settings
        self._client = client

    @classmethod
    def from_settings(cls, settings: Settings) -> "ModelCaller | None":
        """The configured model's caller; None without an API key (the stub answers)."""
        if not settings.openai_api_key:
            return None
        client = ModelClient(
            api_key=settings.openai_api_key.get_secret_value(),
            base_url=settings.openai_base_url,
            timeout=settings.openai_timeout_s,
            max_retries=0,  # retries are ours (tenacity), within a time budget
            # On the SDK's aiohttp client (DefaultAioHttpClient): the same SDK client,
            # errors and timeouts, at less CPU per call than httpcore2, and building its
            # requests with less work (model_http.py; bench/README.md).
        )
        return cls(settings=settings, client=client)

    async def close(self) -> None:
        await self._client.close()

    async def answer(self, turn: ModelTurn, *, tool_choice: ToolChoice) -> ModelReply:
        """One model answer, retrying transient failures within the time budget. The first
        try runs bare: the retry machinery is only set up once a try has failed."""
        started = time.monotonic()
        turn.steps += 1
        try:
            reply = await self._observed_call(turn, tool_choice)
        except _Transient as failure:
            reply = await self._retried(turn, tool_choice, failure, started)
        turn.usage = _add(turn.usage, reply.usage)
        return reply

    async def _retried(
        self, turn: ModelTurn, tool_choice: ToolChoice, failure: _Transient, started: float
    ) -> ModelReply:
        """The tries after a first that failed with `failure`: the server's Retry-After, or
        exponential backoff with jitter, while tries and the time budget last."""
        settings = self._settings

        def wait_after(failure: BaseException | None, tries: int) -> float:
            hinted = failure.retry_after_s if isinstance(failure, _Transient) else None
            backoff = min(0.5 * 2 ** (tries - 1), 8.0) * random.uniform(0.5, 1.0)  # noqa: S311
            return hinted if hinted is not None else backoff

        def stops_after(failure: BaseException | None, tries: int) -> bool:
            remaining = settings.openai_retry_budget_s - (time.monotonic() - started)
            return tries > settings.openai_max_retries or wait_after(failure, tries) > remaining

        def tries(state: RetryCallState) -> tuple[BaseException | None, int]:
            # The first try ran before this loop: its attempt 1 is the turn's try 2.
            return state.outcome.exception() if state.outcome else None, state.attempt_number + 1

        if stops_after(failure, 1):
            raise ModelUnavailable(failure.reason) from failure
        await asyncio.sleep(wait_after(failure, 1))
        try:
            async for attempt in AsyncRetrying(
                wait=lambda state: wait_after(*tries(state)),
                stop=lambda state: stops_after(*tries(state)),
                retry=retry_if_exception_type(_Transient),
                reraise=True,
            ):
                with attempt:
                    return await self._observed_call(turn, tool_choice)
        except _Transient as last:
            raise ModelUnavailable(last.reason) from last
        raise AssertionError("unreachable")  # pragma: no cover

    async def _observed_call(self, turn: ModelTurn, tool_choice: ToolChoice) -> ModelReply:
        """One model call, counted and logged whatever its outcome."""
        started = time.perf_counter()
        outcome, reply = "error", None
        try:
            reply = await self._call_model(turn, tool_choice)
            outcome = "ok"
            return reply
        except (_Transient, ModelUnavailable) as failure:
            outcome = failure.reason
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            seconds = time.perf_counter() - started
            turn.model_calls += 1
            turn.model_seconds += seconds
            usage = reply.usage if reply is not None else Usage()
            metrics.record_model_call(
                seconds=seconds,
                outcome=outcome,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                cached_tokens=usage.cached_tokens,
            )
            log_model_call(
                session_id=turn.session_id,
                latency_ms=seconds * 1000,
                outcome=outcome,
                tools=[name for _, name, _ in reply.tool_calls] if reply is not None else [],
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
            )

    async def _call_model(self, turn: ModelTurn, tool_choice: ToolChoice) -> ModelReply:
        """Call the model once; classify what goes wrong."""
        settings = self._settings
        streamed = False
        body: dict[str, Any] = {
            "model": turn.model,
            "messages": turn.messages,
            "tools": _encoded_once(turn.tools.definitions),
            "tool_choice": tool_choice,
            "max_completion_tokens": settings.agent_max_tokens,
        }
        if settings.agent_temperature is not None:
            body["temperature"] = settings.agent_temperature
        try:
            if not turn.streamed:
                completion = await self._client.post_bytes(_COMPLETIONS, orjson.dumps(body))
                return _reply_from_completion(orjson.loads(completion))
            body |= {"stream": True, "stream_options": {"include_usage": True}}
            stream = await self._client.post(
                _COMPLETIONS,
                cast_to=ChatCompletion,
                content=orjson.dumps(body),
                options=_AUTH,
                stream=True,
                stream_cls=AsyncStream[ChatCompletionChunk],
            )
            content: list[str] = []
            calls: dict[int, list[str]] = {}
            usage = Usage()
            finished = False
            async with stream:
                async for chunk in stream:
                    if chunk.usage is not None:
                        usage = _usage(chunk.usage.to_dict())
                    for choice in chunk.choices:
                        finished = finished or choice.finish_reason is not None
                        delta = choice.delta
                        if delta.content:
                            streamed = True
                            content.append(delta.content)
                            turn.send("delta", {"text": delta.content})
                            # Let the client's stream write it now, not after the whole
                            # (possibly buffered) model answer has been read.
                            await asyncio.sleep(0)
                        for piece in delta.tool_calls or ():
                            slot = calls.setdefault(piece.index, ["", "", ""])
                            slot[0] = piece.id or slot[0]
                            if piece.function is not None:
                                slot[1] += piece.function.name or ""
                                slot[2] += piece.function.arguments or ""
            if not finished:
                raise ValueError("the stream ended without a finish_reason")
            return ModelReply(
                content="".join(content),
                tool_calls=[
                    (call_id or f"call_{turn.id.hex[:8]}_{index}", name, arguments)
                    for index, (call_id, name, arguments) in sorted(calls.items())
                ],
                usage=usage,
            )
        except openai.APIStatusError as failure:
            status = failure.status_code
            reason = "rate_limited" if status == 429 else f"http_{status}"
            if (status >= 500 or status in _TRANSIENT_STATUS) and not streamed:
                raise _Transient(reason, _retry_after(failure.response)) from failure
            raise ModelUnavailable(reason) from failure
        except openai.APIConnectionError as failure:
            reason = "timeout" if _timed_out(failure) else "connection"
            if streamed:  # the user already saw part of this answer; do not repeat it
                raise ModelUnavailable(reason) from failure
            raise _Transient(reason, None) from failure
        except (openai.OpenAIError, ValueError, KeyError, TypeError, AttributeError) as failure:
            # Garbage instead of a completion (the SDK may even hand back a bare string).
            raise ModelUnavailable("bad_response") from failure


def _reply_from_completion(completion: Any) -> ModelReply:
    """A chat completion's JSON (anything else raises ValueError, KeyError or TypeError)."""
    if not completion["choices"]:
        raise ValueError("no choices in the completion")
    message = completion["choices"][0]["message"]
    calls = [
        (call["id"], call["function"]["name"], call["function"].get("arguments") or "")
        for call in message.get("tool_calls") or ()
        if call.get("function") is not None
    ]
    usage = _usage(completion["usage"]) if completion.get("usage") else Usage()
    return ModelReply(content=message.get("content") or "", tool_calls=calls, usage=usage)


def _usage(usage: Mapping[str, Any]) -> Usage:
    details = usage.get("prompt_tokens_details") or {}
    return Usage(
        prompt_tokens=usage.get("prompt_tokens") or 0,
        completion_tokens=usage.get("completion_tokens") or 0,
        total_tokens=usage.get("total_tokens") or 0,
        cached_tokens=details.get("cached_tokens") or 0,
    )


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        total_tokens=a.total_tokens + b.total_tokens,
        cached_tokens=a.cached_tokens + b.cached_tokens,
    )


# The last list of tool definitions sent, and its JSON.
_ENCODED_TOOLS: list[tuple[object, orjson.Fragment]] = []


def _encoded_once(definitions: list[Any]) -> orjson.Fragment:
    """Tool definitions (a list that does not change once built) as JSON, encoded again only
    when another list is sent; orjson embeds the fragment as it is."""
    if not _ENCODED_TOOLS or _ENCODED_TOOLS[0][0] is not definitions:
        _ENCODED_TOOLS[:] = [(definitions, orjson.Fragment(orjson.dumps(definitions)))]
    return _ENCODED_TOOLS[0][1]


def _timed_out(failure: openai.APIConnectionError) -> bool:
    """Whether the call timed out, rather than lost its connection. The SDK's aiohttp
    transport reports a refused connection as a connect timeout, so a timeout counts as one
    only if no plain OS error (refused, reset, unreachable) caused it."""
    if not isinstance(failure, openai.APITimeoutError):
        return False
    cause = failure.__cause__
    while cause is not None:
        if isinstance(cause, OSError) and not isinstance(cause, TimeoutError):
            return False
        cause = cause.__cause__
    return True


def _retry_after(response: Any) -> float | None:
    """Seconds from a Retry-After (or retry-after-ms) header, if the server sent one."""
    headers = getattr(response, "headers", None) or {}
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(float(ms) / 1000, 0.0)
        if (seconds := headers.get("retry-after")) is not None:
            return max(float(seconds), 0.0)
    except ValueError:
        return None
    return None
