"""The chat endpoints: a message in, the agent's answer out (whole, or as it is written)."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response, StreamingResponse

from backend.auth import Identity
from backend.deps import Agent, Context, CurrentUser, IdempotencyKey
from backend.models.chat import ChatRequest, ChatResponse
from backend.models.errors import API_ERRORS, error_responses
from backend.services.agent import OpenAIAgentService, Turn
from backend.services.idempotency import Replay, check_key

router = APIRouter(prefix="/api/{user_id}", tags=["chat"], responses=API_ERRORS)
EventQueue = asyncio.Queue[tuple[str, dict[str, Any]]]
_ERRORS = error_responses(409, 429)
_REPLAYED = {"Idempotent-Replayed": "true"}


@router.post("/chat", operation_id="chat", response_model=ChatResponse, responses=_ERRORS)
async def chat(
    user: CurrentUser, agent: Agent, request: ChatRequest, idempotency_key: IdempotencyKey = None
) -> Any:
    """Send a message; the agent answers, using tools on the user's todos."""
    answer = await answer_chat(
        agent=agent,
        identity=user,
        request=request,
        idempotency_key=check_key(idempotency_key) if idempotency_key is not None else None,
    )
    if isinstance(answer, Replay):
        return JSONResponse(answer.body, answer.status_code, headers=_REPLAYED)
    return Response(answer, media_type="application/json")


async def answer_chat(
    *,
    agent: OpenAIAgentService,
    identity: Identity,
    request: ChatRequest,
    idempotency_key: str | None = None,
) -> bytes | Replay:
    """The turn of a `/chat` request, run to its answer as JSON; or, for a repeated
    Idempotency-Key, the first answer. The route above and ChatFastPath (backend/fast_path.py)
    both answer through this, so the two cannot drift apart."""
    turn = await agent.begin(identity=identity, request=request, idempotency_key=idempotency_key)
    if isinstance(turn, Replay):
        return turn
    # Shielded: if the client goes away, the turn still completes and is stored.
    answer = await asyncio.shield(agent.start(turn))
    # Already validated: serialized once here rather than re-validated by FastAPI.
    return answer.__pydantic_serializer__.to_json(answer)


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
async def chat_stream(
    user: CurrentUser,
    agent: Agent,
    context: Context,
    request: ChatRequest,
    idempotency_key: IdempotencyKey = None,
) -> StreamingResponse:
    """Send a message and receive the answer as server-sent events while it is written."""
    turn = await agent.begin(
        identity=user,
        request=request,
        idempotency_key=check_key(idempotency_key) if idempotency_key is not None else None,
    )
    if isinstance(turn, Replay):
        events, headers = _replayed(turn), _REPLAYED
    else:
        events, headers = _start_streaming(agent, turn), {}
    return StreamingResponse(
        _frames(events, keepalive_s=context.settings.chat_stream_keepalive_s),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers},
    )


def _start_streaming(agent: OpenAIAgentService, turn: Turn) -> EventQueue:
    events: EventQueue = asyncio.Queue()
    agent.stream(turn, lambda event, data: events.put_nowait((event, data)))
    return events


def _replayed(replay: Replay) -> EventQueue:
    events: EventQueue = asyncio.Queue()
    for event in replay.events():
        events.put_nowait(event)
    return events


async def _frames(events: EventQueue, *, keepalive_s: float) -> AsyncIterator[str]:
    """SSE frames until `done` or `error`; comments keep idle proxies from closing."""
    while True:
        try:
            async with asyncio.timeout(keepalive_s):
                batch = [await events.get()]
        except TimeoutError:
            yield ": keep-alive\n\n"
            continue
        while not events.empty():  # whatever else is ready goes out in the same write
            batch.append(events.get_nowait())
        yield "".join(
            f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
            for event, data in batch
        )
        if any(event in ("done", "error") for event, _ in batch):
            return
