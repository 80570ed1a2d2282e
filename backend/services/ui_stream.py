"""A chat turn told in the Vercel AI SDK's UI message stream protocol (v1), which `useChat`
reads: the same turn as /chat/stream, its events translated as they happen.

The chunks are the ones `ai` 5.0.0 declares in `ui-message-stream/ui-message-chunks.ts`;
that version validates them with strict schemas, so a chunk carries no key it does not
know and never a null. A turn's answer goes out as

    start (messageId = our assistant message id, metadata: session_id)
    start-step, [text-start, text-delta..., text-end], tool-input-available,
        tool-output-available | tool-output-error, [source-document...], ...,
        finish-step                                                     (per model answer)
    finish (metadata: session_id, using_stub, usage)  |  error (errorText)
    [DONE]

each as one `data: {json}` server-sent event. A `search_documents` output is followed by a
`source-document` chunk per document section it found (once an answer), the AI SDK's own
part for a cited document, which `useChat` shows with no adapter. Each reader translates
the turn's events (its feed, turn_streams.py) for itself, so a client that reconnects on
any replica (`useChat({resume: true})`) is told the stream again from the start and then
follows it.

A call held for the person's yes (approvals.py) is told one of two ways:
- in words, by default (`ai` 5 rejects chunk types it does not know): the held call is
  not shown, the question comes as text, and the next user message answers it; a call
  that answer runs (or denies) shows as a whole tool part of the new answer.
- as a card, when the request says `"approvals": "ai-sdk"` (AI SDK 6): the call streams as
  `tool-input-available` and `tool-approval-request` (approvalId, toolCallId), without
  the question's words. The client answers with `addToolApprovalResponse` and sends that
  assistant message back; the turn then goes on in that message. Its `start` names the
  message the client sent (as the AI SDK's own `toUIMessageStream` does when the last
  message is an assistant's: ai 6's client continues the message whose id it is, and
  would add a second one under a new id), the answered calls get only their end
  (`tool-output-available`, `tool-output-error` or `tool-output-denied`, before any step,
  as ai 6's `streamText` sends them), then the answer's steps.
A call that expired unanswered ends as `tool-output-error`.
"""

import json
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

from sqlmodel.ext.asyncio.session import AsyncSession

from backend.auth import Identity
from backend.db import Database
from backend.models.session import AgentMessage, Usage
from backend.models.ui import UIChatRequest, UIMessagePublic
from backend.services import approvals, sessions, turn_streams, turns
from backend.services.agent import OpenAIAgentService
from backend.services.idempotency import Replay
from backend.services.tools import error, passage_citation, passage_source
from backend.services.turn_streams import Feed

HEADERS = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}
_DONE = "data: [DONE]\n\n"
# A source's media type is its document's, as uploaded (a passage carries it); a passage
# recorded before passages carried it was told as Markdown, and still is.
PASSAGE_MEDIA_TYPE = "text/markdown"
_EXPIRED = "Nobody answered in time, so this was not done."

# Who reads a frame: the client that posted (and its idempotent retries), or one that
# resumed the stream (GET .../stream); None: both.
Reader = Literal["posted", "resumed"]


def _frame(chunk: dict[str, Any]) -> str:
    return f"data: {json.dumps(chunk, ensure_ascii=False, separators=(',', ':'))}\n\n"


class UIMessageStream:
    """One turn's chunks for one reader, translated from the turn's events in order.

    `cards`: held calls are asked about with approval chunks (AI SDK 6), not in words.
    `continued`: the tool calls of the message this turn goes on with (the client's last
    message, whose approval requests it answered): their input is the client's already.
    `resumed`: the reader resumed the stream rather than posted the turn."""

    def __init__(
        self,
        *,
        message_id: str,
        session_id: str,
        cards: bool = False,
        continued: frozenset[str] = frozenset(),
        resumed: bool = False,
    ) -> None:
        self.session_id = session_id
        self.finished = False
        self._cards = cards
        self._continued = continued
        self._reader: Reader = "resumed" if resumed else "posted"
        self._frames: list[str] = []
        self._step: int | None = None  # the model answer whose step is open
        self._text_id: str | None = None
        self._texts = 0
        self._answer_text = ""  # text told since the last tool call: the final answer
        self._asked = False  # a card asked about a held call: its question is not told
        self._sourced: set[str] = set()  # the passages told as sources, by sourceId
        start: dict[str, Any] = {"type": "start"}
        if message_id:
            start["messageId"] = message_id
        self._push(start | {"messageMetadata": self._meta()})

    def _meta(self, **more: Any) -> dict[str, Any]:
        return {"session_id": self.session_id, **more}

    @classmethod
    def of(cls, feed: Feed, *, resumed: bool = False) -> "UIMessageStream":
        """The stream of the turn a feed tells, as the client that started it asked."""
        meta = feed.meta or {}
        return cls(
            message_id=str(meta.get("message_id", "")),
            session_id=str(feed.session_id),
            cards=bool(meta.get("cards")),
            continued=frozenset(meta.get("continued", ())),
            resumed=resumed,
        )

    def _push(self, chunk: dict[str, Any], only: Reader | None = None) -> None:
        if only in (None, self._reader):
            self._frames.append(_frame(chunk))

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

    def _tool_input(self, step: int, call_id: str, name: str, arguments: Any) -> None:
        self._open_step(step)
        self._close_text()
        self._answer_text = ""
        self._push(_input(call_id, name, arguments))

    def on_event(self, event: str, data: dict[str, Any], step: int) -> None:
        """Translate one event of the turn (see `Turn.send`); `step` counts the model
        answers asked for so far, so a change of it starts a new step."""
        if self.finished:
            return
        if event == "delta" and data["text"]:
            if not self._asked:
                self._text(step, data["text"])
        elif event == "approval_request" and self._cards:
            call_id = data["tool_call_id"]
            self._tool_input(step, call_id, data["name"], data["arguments"])
            self._push(
                {"type": "tool-approval-request", "approvalId": data["id"], "toolCallId": call_id}
            )
            self._asked = True
        elif event == "tool_call" and data["id"] in self._continued:
            # A resumer's client rebuilds the message from this stream alone (ai 6 replays
            # a resumed stream into an empty message): it is told the whole call.
            self._push(_input(data["id"], data["name"], data["arguments"]), only="resumed")
        elif event == "tool_call":
            self._tool_input(step, data["id"], data["name"], data["arguments"])
        elif event == "tool_result" and data["tool_call_id"] in self._continued:
            call_id, result = data["tool_call_id"], data["result"]
            self._push(_tool_output(call_id, result, approved_here=True), only="posted")
            self._push(_tool_output(call_id, result), only="resumed")
        elif event == "tool_result":
            self._push(_tool_output(data["tool_call_id"], data["result"]))
            for source in sources(data["name"], data["result"], self._sourced):
                self._push(source)
        elif event == "done":
            # A reply the agent wrote itself (a summary of what the tools did) is not
            # streamed as deltas; the client still gets it as the answer's text.
            if data["response"] and not self._answer_text and not self._asked:
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

    def take(self) -> str:
        """The frames translated since the last take."""
        text, self._frames = "".join(self._frames), []
        return text


async def frames(feed: Feed, *, keepalive_s: float, resumed: bool = False) -> AsyncIterator[str]:
    """The UI message stream of the turn a feed tells, from its start, as the turn goes on;
    SSE comments keep idle proxies open."""
    stream = UIMessageStream.of(feed, resumed=resumed) if feed.meta is not None else None
    async for batch in turn_streams.follow(feed, keepalive_s=keepalive_s):
        if batch is None:
            yield ": keep-alive\n\n"
            continue
        if stream is None:  # joined elsewhere: the turn's first message told how
            stream = UIMessageStream.of(feed, resumed=resumed)
        for event in batch:
            stream.on_event(event.event, event.data, event.step)
        if text := stream.take():
            yield text
    if stream is not None and stream.finished:
        yield _DONE


async def start_chat(
    *,
    agent: OpenAIAgentService,
    database: Database,
    identity: Identity,
    request: UIChatRequest,
    idempotency_key: str | None,
) -> Feed:
    """Answer the last message of a `useChat` request in the session its chat id names: a
    user message (or, to regenerate, the stored last one again), or the assistant message
    whose approval requests the person answered, which then goes on; the turn's feed (or
    that of the stored answer, for a repeated Idempotency-Key). Raises as `agent.begin`
    does."""
    async with database.connection(as_user=identity.user_id) as db:
        session_id = await turns.find_chat_session(db, owner=identity.user_id, chat_id=request.id)
    continued = request.messages[-1] if request.continues() else None
    if continued is not None and session_id is None:
        # A chat without a session holds no calls: a session id that names none refuses
        # the answers as any other session does (409, or 404 for another user's).
        session_id = uuid.uuid4()
    turn = await agent.begin(
        identity=identity,
        request=request.chat_request(session_id=session_id),
        idempotency_key=idempotency_key,
        chat_id=request.id,
        regenerate=request.trigger == "regenerate-message",
    )
    told_as: dict[str, Any] = {"cards": request.approvals == "ai-sdk"}
    if continued is not None:
        told_as |= {"message_id": continued.id, "continued": sorted(continued.tool_call_ids())}
    if isinstance(turn, Replay):
        # The stored answer of an earlier request with the same Idempotency-Key, told again.
        body = turn.body
        meta = {"message_id": body["message_id"]} | told_as
        return turn_streams.told(uuid.UUID(body["session_id"]), turn.events(), meta)
    turn.told_as = told_as
    return agent.stream(turn)


def _input(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {
        "type": "tool-input-available",
        "toolCallId": call_id,
        "toolName": name,
        "input": arguments,
    }


def _tool_output(
    call_id: str, result: dict[str, Any], *, approved_here: bool = False
) -> dict[str, Any]:
    """The chunk that ends a tool part. A denied call is `tool-output-denied` where the
    client holds the part's approval (`approved_here`; ai 6 keeps `approved: false` on
    it), else its result; an expired one is an error, as a failed one is."""
    status = result.get("status")
    if status == approvals.DENIED and approved_here:
        return {"type": "tool-output-denied", "toolCallId": call_id}
    if status in ("error", approvals.EXPIRED):
        text = result.get("error") if status == "error" else _EXPIRED
        return {
            "type": "tool-output-error",
            "toolCallId": call_id,
            "errorText": text if isinstance(text, str) else "The tool failed.",
        }
    return {"type": "tool-output-available", "toolCallId": call_id, "output": result}


def sources(name: str, result: Mapping[str, Any], told: set[str]) -> list[dict[str, Any]]:
    """The `source-document` chunks of the passages a `search_documents` result holds, each
    once an answer (`told`: the sourceIds told already). A chunk and the part it becomes
    have the same fields, so the history tells them as the stream did."""
    passages = result.get("passages") if name == "search_documents" else None
    chunks: list[dict[str, Any]] = []
    for passage in passages if isinstance(passages, list) else ():
        source_id = passage_source(passage)
        if source_id in told:
            continue
        told.add(source_id)
        media_type = passage.get("media_type")
        chunks.append(
            {
                "type": "source-document",
                "sourceId": source_id,
                "mediaType": media_type if isinstance(media_type, str) else PASSAGE_MEDIA_TYPE,
                "title": passage_citation(passage),
            }
        )
    return chunks


async def history(
    *, db: AsyncSession, owner: str, session_id: uuid.UUID, limit: int, cursor: str | None
) -> list[UIMessagePublic]:
    """The session's latest messages as UIMessages, with what was asked of held calls."""
    rows, _ = await sessions.latest_messages(
        db=db, owner=owner, session_id=session_id, limit=limit, cursor=cursor
    )
    ids = {
        approval_id
        for row in rows
        for record in row.tool_results or ()
        if (approval_id := approvals.approval_id(record)) is not None
    }
    held = await approvals.held_calls(await db.connection(), owner=owner, ids=ids)
    return to_ui_messages(rows, session_id=session_id, held=held)


def to_ui_messages(
    rows: list[AgentMessage],
    *,
    session_id: uuid.UUID,
    held: Mapping[str, approvals.HeldCall] | None = None,
) -> list[UIMessagePublic]:
    """Stored messages as the UIMessages their streams assembled: a model's answer with
    tools as two steps (the calls, then the text), the stub's as one. Held calls are told
    as AI SDK 6 approval parts (the card asks: the question's words are left out), and the
    answer to them that came without a user message goes on in the message that asked,
    as it does in the client."""
    messages: list[UIMessagePublic] = []
    asked = False  # the row before was an answer that asked about held calls
    for row in rows:
        message, asks = _ui_message(row, str(session_id), held or {})
        if asked and row.role == "assistant":
            last = messages[-1]
            messages[-1] = UIMessagePublic(
                id=last.id,
                role=last.role,
                parts=last.parts + message.parts,
                metadata=message.metadata,
            )
        else:
            messages.append(message)
        asked = asks
    return messages


def _ui_message(
    row: AgentMessage, session_id: str, held: Mapping[str, approvals.HeldCall]
) -> tuple[UIMessagePublic, bool]:
    """The row as a UIMessage, and whether it asked about held calls."""
    if row.role == "user":
        message = UIMessagePublic(
            id=str(row.id),
            role="user",
            parts=[{"type": "text", "text": row.content or ""}],
            metadata={"session_id": session_id},
        )
        return message, False
    records = {r["tool_call_id"]: r for r in row.tool_results or ()}
    interrupted = {"result": error("This call was interrupted.")}
    parts: list[dict[str, Any]] = [{"type": "step-start"}]
    asked_about: list[approvals.HeldCall | None] = []  # the held calls (None: not known)
    sourced: set[str] = set()
    for call in row.tool_calls or ():
        record = records.get(call["id"], interrupted)
        approval_id = approvals.approval_id(record)
        if approval_id is None:
            part = _ended(call["id"], call["arguments"], record["result"])
        else:
            asked_about.append(held.get(approval_id))
            part = _held(call, record, approval_id, held.get(approval_id))
        parts.append({"type": f"tool-{call['name']}", "toolCallId": call["id"]} | part)
        parts += sources(call["name"], record["result"], sourced)
    text = _without_question(row.content or "", asked_about)
    if text:
        if row.tool_calls and not row.using_stub:
            parts.append({"type": "step-start"})
        parts.append({"type": "text", "text": text, "state": "done"})
    usage = (sessions.stored_usage(row) or Usage()).model_dump()
    message = UIMessagePublic(
        id=str(row.id),
        role="assistant",
        parts=parts,
        metadata={"session_id": session_id, "using_stub": row.using_stub, "usage": usage},
    )
    return message, bool(asked_about)


def _held(
    call: dict[str, Any],
    record: dict[str, Any],
    approval_id: str,
    asked: approvals.HeldCall | None,
) -> dict[str, Any]:
    """A held call's tool part: waiting for its answer, or ended by it."""
    arguments = call["arguments"] if asked is None else asked.arguments  # as streamed
    result = record["result"]
    if result.get("status") == approvals.PENDING:
        return {"state": "approval-requested", "input": arguments, "approval": {"id": approval_id}}
    answer = record["approval"]
    approval = {"id": approval_id, "approved": answer["approved"]}
    if answer.get("reason") is not None:
        approval["reason"] = answer["reason"]
    return _ended(call["id"], arguments, result, approval)


def _ended(
    call_id: str, arguments: Any, result: dict[str, Any], approval: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A tool part's state and fields once its call has a result, as the stream ends it."""
    output = _tool_output(call_id, result, approved_here=approval is not None)
    state = output["type"].removeprefix("tool-")
    part = {"state": state, "input": arguments}
    part |= {key: output[key] for key in ("output", "errorText") if key in output}
    # ai 6 keeps the approval on an answered part; on a failed one only if it was granted.
    if approval is not None and (approval["approved"] or state == "output-denied"):
        part["approval"] = approval
    return part


def _without_question(text: str, asked_about: list[approvals.HeldCall | None]) -> str:
    """An answer's text without the question it ended with about its held calls (their
    approval parts ask it); as stored when what was asked is not known."""
    if not asked_about or None in asked_about:
        return text
    question = approvals.question([asked.summary for asked in asked_about if asked])
    if not text.endswith(question):
        return text
    return text.removesuffix(question).removesuffix("\n\n")
