"""Chat for the Vercel AI SDK: `useChat` posts here and reads the UI message stream."""

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import Response, StreamingResponse

from backend.deps import Agent, Context, CurrentUser, IdempotencyKey
from backend.models.errors import API_ERRORS, error_responses
from backend.models.ui import ChatId, UIChatRequest
from backend.services import ui_stream
from backend.services.idempotency import check_key

router = APIRouter(prefix="/api/{user_id}/chat/ui", tags=["chat"], responses=API_ERRORS)
_STREAM = {
    "description": "The AI SDK UI message stream (v1): `data: {chunk}` server-sent events "
    "(start, start-step, text-*, tool-input-available, tool-approval-request (with "
    "`approvals: ai-sdk`), tool-output-*, finish-step, finish or error), then `data: [DONE]`.",
    "content": {"text/event-stream": {}},
}


@router.post(
    "",
    operation_id="chatUi",
    response_class=StreamingResponse,
    responses={200: _STREAM, **error_responses(409, 429)},
)
async def chat_ui(
    user: CurrentUser,
    agent: Agent,
    context: Context,
    request: UIChatRequest,
    idempotency_key: IdempotencyKey = None,
) -> StreamingResponse:
    """Answer the last message of an AI SDK `useChat` chat, streamed as UI chunks."""
    feed = await ui_stream.start_chat(
        agent=agent,
        database=context.database,
        identity=user,
        request=request,
        idempotency_key=check_key(idempotency_key) if idempotency_key is not None else None,
    )
    keepalive_s = context.settings.chat_stream_keepalive_s
    frames = ui_stream.frames(feed, keepalive_s=keepalive_s)
    return StreamingResponse(frames, headers=ui_stream.HEADERS)


@router.get(
    "/{chat_id}/stream",
    operation_id="resumeChatUi",
    response_class=StreamingResponse,
    responses={200: _STREAM, 204: {"description": "No turn of this chat is running."}},
)
async def resume_chat_ui(
    user: CurrentUser, context: Context, chat_id: Annotated[ChatId, Path()]
) -> Response:
    """The stream of this chat's running turn, on any replica, told again from its start
    (`resume: true`)."""
    feed = await context.turn_streams.join(owner=user.user_id, chat_id=chat_id)
    if feed is None:
        return Response(status_code=204)
    frames = ui_stream.frames(
        feed, keepalive_s=context.settings.chat_stream_keepalive_s, resumed=True
    )
    return StreamingResponse(frames, headers=ui_stream.HEADERS)
