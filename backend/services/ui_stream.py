"""A chat turn told in the Vercel AI SDK's UI message stream protocol (v1), which `useChat`
reads: the same turn as /chat/stream, its events translated as they happen.

The chunks are the ones `ai` 5.0.0 declares in `ui-message-stream/ui-message-chunks.ts`;
that version validates them with strict schemas, so a chunk carries no key it does not
know and never a null. A turn's answer goes out as

    start (messageId = our assistant message id, metadata: session_id)
    start-step, [text-start, text-delta..., text-end], tool-input-available,
        tool-output-available | tool-output-error, ..., finish-step     (per model answer)
    finish (metadata: session_id, using_stub, usage)  |  error (errorText)
    [DONE]

each as one `data: {json}` server-sent event. The stream of a running turn is kept until
the turn ends, so a client that reconnects (`useChat({resume: true})`) is told it again
from the start and then follows it.
"""

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from backend.auth import Identity
from backend.db import Database
from backend.models.chat import ChatRequest
from backend.models.session import AgentMessage, Usage
from backend.models.ui import UIChatRequest, UIMessagePublic
from backend.services import turns
from backend.services.agent import OpenAIAgentService, Turn
from backend.services.idempotency import Replay
from backend.services.sessions import stored_usage
from backend.services.tools import error

HEADERS = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}
_DONE = "data: [DONE]\n\n"


def _frame(chunk: dict[str, Any]) -> str:
    return f"data: {json.dumps(chunk, ensure_ascii=False, separators=(',', ':'))}\n\n"


class UIMessageStream:
    """One turn's chunks, translated from its events as the turn emits them; any number of
    readers follow it, each from the start."""

    def __init__(self, *, message_id: str, session_id: str) -> None:
        self.session_id = session_id
        self.finished = False
        self._frames: list[str] = []
        self._changed = asyncio.Event()
        self._step: int | None = None  # the model answer whose step is open
        self._text_id: str | None = None
        self._texts = 0
        self._answer_text = ""  # text told since the last tool call: the final answer
        self._push({"type": "start", "messageId": message_id, "messageMetadata": self._meta()})

    def _meta(self, **more: Any) -> dict[str, Any]:
        return {"session_id": self.session_id, **more}

    def _push(self, chunk: dict[str, Any]) -> None:
        self._frames.append(_frame(chunk))
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _open_step(self, step: int) -> None:
        if self._step is not None and self._step != step:
            self._close_step()
        if self._step is None:
            self._push({"type": "start-step"})
            self._step = step

    def _close_text(self) -> None:
        if self._text_id is not None:
            self._push({"type": "text-end", "id": self._text_id})
            self._text_id = None

    def _close_step(self) -> None:
        self._close_text()
        if self._step is not None:
            self._push({"type": "finish-step"})
            self._step = None

    def _text(self, step: int, text: str) -> None:
        self._open_step(step)
        if self._text_id is None:
            self._texts += 1
            self._text_id = f"text-{self._texts}"
            self._push({"type": "text-start", "id": self._text_id})
        self._push({"type": "text-delta", "id": self._text_id, "delta": text})
        self._answer_text += text

    def on_event(self, event: str, data: dict[str, Any], step: int) -> None:
        """Translate one event of the turn (see `Turn.send`); `step` counts the model
        answers asked for so far, so a change of it starts a new step."""
        if self.finished:
            return
        if event == "delta" and data["text"]:
            self._text(step, data["text"])
        elif event == "tool_call":
            self._open_step(step)
            self._close_text()
            self._answer_text = ""
            self._push(
                {
                    "type": "tool-input-available",
                    "toolCallId": data["id"],
                    "toolName": data["name"],
                    "input": data["arguments"],
                }
            )
        elif event == "tool_result":
            self._push(_tool_output(data["tool_call_id"], data["result"]))
        elif event == "done":
            # A reply the agent wrote itself (a summary of what the tools did) is not
            # streamed as deltas; the client still gets it as the answer's text.
            if data["response"] and not self._answer_text:
                self._text(step, data["response"])
            self._close_step()
            meta = self._meta(using_stub=data["using_stub"], usage=data["usage"])
            self._end({"type": "finish", "messageMetadata": meta})
        elif event == "error":
            self._close_step()
            self._end({"type": "error", "errorText": str(data["detail"])})

    def _end(self, chunk: dict[str, Any]) -> None:
        self._push(chunk)
        self.finished = True

    async def frames(self, *, keepalive_s: float) -> AsyncIterator[str]:
        """The stream from its start, as it grows; SSE comments keep idle proxies open."""
        sent = 0
        while True:
            changed = self._changed
            if sent < len(self._frames):
                batch, sent = self._frames[sent:], len(self._frames)
                yield "".join(batch)
                continue
            if self.finished:
                yield _DONE
                return
            try:
                async with asyncio.timeout(keepalive_s):
                    await changed.wait()
            except TimeoutError:
                yield ": keep-alive\n\n"


class UIStreams:
    """The UI streams of the turns running in this process, by (user, chat id)."""

    def __init__(self) -> None:
        self._running: dict[tuple[str, str], UIMessageStream] = {}

    def start(self, *, agent: OpenAIAgentService, turn: Turn, chat_id: str) -> UIMessageStream:
        """Run the turn (it completes even if every reader goes away), told as a stream."""
        stream = UIMessageStream(
            message_id=str(turn.assistant_message_id), session_id=str(turn.session_id)
        )
        key = (turn.owner, chat_id)
        self._running[key] = stream

        def emit(event: str, data: dict[str, Any]) -> None:
            stream.on_event(event, data, turn.steps)
            if stream.finished and self._running.get(key) is stream:
                del self._running[key]

        agent.stream(turn, emit)
        return stream

    def running(self, *, owner: str, chat_id: str) -> UIMessageStream | None:
        return self._running.get((owner, chat_id))


async def start_chat(
    *,
    agent: OpenAIAgentService,
    database: Database,
    streams: UIStreams,
    identity: Identity,
    request: UIChatRequest,
    idempotency_key: str | None,
) -> UIMessageStream:
    """Answer the last user message of a `useChat` request (or, to regenerate, the stored
    last one again) in the session its chat id names. Raises as `agent.begin` does."""
    async with database.connection(as_user=identity.user_id) as db:
        session_id = await turns.find_chat_session(db, owner=identity.user_id, chat_id=request.id)
    turn = await agent.begin(
        identity=identity,
        request=ChatRequest(
            message=request.last_user_text(), session_id=session_id, timezone=request.timezone
        ),
        idempotency_key=idempotency_key,
        chat_id=request.id,
        regenerate=request.trigger == "regenerate-message",
    )
    if isinstance(turn, Replay):
        return _replayed(turn)
    return streams.start(agent=agent, turn=turn, chat_id=request.id)


def _replayed(replay: Replay) -> UIMessageStream:
    """The stored answer of an earlier request with the same Idempotency-Key, told again."""
    answer = replay.body
    stream = UIMessageStream(message_id=answer["message_id"], session_id=answer["session_id"])
    for event, data in replay.events():
        stream.on_event(event, data, 0)
    return stream


def _tool_output(call_id: str, result: dict[str, Any]) -> dict[str, Any]:
    if result.get("status") == "error":
        error = result.get("error")
        return {
            "type": "tool-output-error",
            "toolCallId": call_id,
            "errorText": error if isinstance(error, str) else "The tool failed.",
        }
    return {"type": "tool-output-available", "toolCallId": call_id, "output": result}


def to_ui_messages(rows: list[AgentMessage], *, session_id: uuid.UUID) -> list[UIMessagePublic]:
    """Stored messages as the UIMessages their streams assembled: a model's answer with
    tools as two steps (the calls, then the text), the stub's as one."""
    return [_ui_message(row, str(session_id)) for row in rows]


def _ui_message(row: AgentMessage, session_id: str) -> UIMessagePublic:
    if row.role == "user":
        return UIMessagePublic(
            id=str(row.id),
            role="user",
            parts=[{"type": "text", "text": row.content or ""}],
            metadata={"session_id": session_id},
        )
    results = {r["tool_call_id"]: r["result"] for r in row.tool_results or ()}
    interrupted = error("This call was interrupted.")
    parts: list[dict[str, Any]] = [{"type": "step-start"}]
    for call in row.tool_calls or ():
        part = {"type": f"tool-{call['name']}", "toolCallId": call["id"]}
        output = _tool_output(call["id"], results.get(call["id"], interrupted))
        if output["type"] == "tool-output-error":
            part |= {"state": "output-error", "input": call["arguments"]}
            part["errorText"] = output["errorText"]
        else:
            part |= {"state": "output-available", "input": call["arguments"]}
            part["output"] = output["output"]
        parts.append(part)
    if row.content:
        if row.tool_calls and not row.using_stub:
            parts.append({"type": "step-start"})
        parts.append({"type": "text", "text": row.content, "state": "done"})
    usage = (stored_usage(row) or Usage()).model_dump()
    return UIMessagePublic(
        id=str(row.id),
        role="assistant",
        parts=parts,
        metadata={"session_id": session_id, "using_stub": row.using_stub, "usage": usage},
    )
