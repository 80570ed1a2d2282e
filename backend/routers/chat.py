"""The chat endpoints: a message in, the agent's answer out (whole, or as it is written)."""

import asyncio
import uuid
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from fastapi.responses import JSONResponse, Response, StreamingResponse

from backend.auth import Identity
from backend.context import AppContext
from backend.deps import Agent, Context, CurrentUser, IdempotencyKey
from backend.models.chat import ChatRequest, ChatResponse
from backend.models.errors import API_ERRORS, error_responses
from backend.services import turn_streams
from backend.services.agent import OpenAIAgentService
from backend.services.idempotency import Replay, check_key

router = APIRouter(prefix="/api/{user_id}", tags=["chat"], responses=API_ERRORS)
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
    answer = await asyncio.shield(agent.replica.start(turn))
    # Already validated: serialized once here rather than re-validated by FastAPI.
    return answer.__pydantic_serializer__.to_json(answer)


_TURN_EVENTS = {
    "description": "Server-sent events, each with its `id` (`<attempt>-<seq>`): session, "
    "delta, tool_call, tool_result, approval_request, then done (the same JSON as /chat) or "
    "error.",
    "content": {"text/event-stream": {}},
}


@router.post(
    "/chat/stream",
    operation_id="chatStream",
    response_class=StreamingResponse,
    responses={200: _TURN_EVENTS, **_ERRORS},
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
        session_id = uuid.UUID(turn.body["session_id"])
        return _streamed(context, turn_streams.told(session_id, turn.events()), _REPLAYED)
    return _streamed(context, agent.stream(turn))


@router.get(
    "/sessions/{session_id}/stream",
    operation_id="followSessionTurn",
    response_class=StreamingResponse,
    responses={200: _TURN_EVENTS, 204: {"description": "No turn of this session is running."}},
)
async def follow_session_turn(
    user: CurrentUser,
    context: Context,
    session_id: uuid.UUID,
    last_event_id_header: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    last_event_id: Annotated[
        str | None, Query(description="The same as the Last-Event-ID header.", max_length=40)
    ] = None,
) -> Response:
    """Join the session's running turn, on any replica: its events so far (or those after
    Last-Event-ID), then the rest as they come, as `/chat/stream` tells them."""
    after = turn_streams.parse_event_id(last_event_id_header or last_event_id)
    feed = await context.turn_streams.join(owner=user.user_id, session_id=session_id, after=after)
    if feed is None:
        return Response(status_code=204)
    return _streamed(context, feed, after=after)


def _streamed(
    context: AppContext,
    feed: turn_streams.Feed,
    headers: Mapping[str, str] | None = None,
    *,
    after: turn_streams.EventId | None = None,
) -> StreamingResponse:
    keepalive_s = context.settings.chat_stream_keepalive_s
    return StreamingResponse(
        turn_streams.sse(feed, after=after, keepalive_s=keepalive_s),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})},
    )
