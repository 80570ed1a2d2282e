"""The chat endpoints: a message in, the agent's answer out (whole, or as it is written)."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from backend.deps import Agent, CurrentUser
from backend.errors import DomainError
from backend.models.chat import ChatRequest, ChatResponse
from backend.models.errors import ErrorResponse
from backend.services.agent import OpenAIAgentService, Turn

router = APIRouter(prefix="/api/{user_id}", tags=["chat"])
KEEPALIVE_S = 15.0
EventQueue = asyncio.Queue[tuple[str, dict[str, Any]]]
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (401, 403, 404, 409, 413, 429, 503)
}


@router.post("/chat", operation_id="chat", responses=_ERRORS)
async def chat(user: CurrentUser, agent: Agent, request: ChatRequest) -> ChatResponse:
    """Send a message; the agent answers, using tools on the user's todos."""
    turn = await agent.begin(identity=user, request=request)
    # Shielded: if the client goes away, the turn still completes and is stored.
    return await asyncio.shield(agent.start(turn))


@router.post(
    "/chat/stream",
    operation_id="chatStream",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "Server-sent events: session, delta, tool_call, tool_result, "
            "then done (the same JSON as /chat) or error.",
            "content": {"text/event-stream": {}},
        },
        **_ERRORS,
    },
)
async def chat_stream(user: CurrentUser, agent: Agent, request: ChatRequest) -> StreamingResponse:
    """Send a message and receive the answer as server-sent events while it is written."""
    turn = await agent.begin(identity=user, request=request)
    return StreamingResponse(
        _frames(_start_streaming(agent, turn)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _start_streaming(agent: OpenAIAgentService, turn: Turn) -> EventQueue:
    events: EventQueue = asyncio.Queue()
    turn.emit = lambda event, data: events.put_nowait((event, data))
    task = agent.start(turn)

    def report_failure(done: "asyncio.Task[ChatResponse]") -> None:
        if done.cancelled():
            events.put_nowait(("error", {"detail": "The turn was cancelled."}))
        elif (failure := done.exception()) is not None:
            detail = failure.detail if isinstance(failure, DomainError) else "Internal error."
            events.put_nowait(("error", {"detail": detail}))

    task.add_done_callback(report_failure)
    return events


async def _frames(events: EventQueue) -> AsyncIterator[str]:
    """SSE frames until `done` or `error`; comments keep idle proxies from closing."""
    while True:
        try:
            event, data = await asyncio.wait_for(events.get(), KEEPALIVE_S)
        except TimeoutError:
            yield ": keep-alive\n\n"
            continue
        yield f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
        if event in ("done", "error"):
            return
