"""The user's events as server-sent events: replayed from Last-Event-ID, then live."""

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from backend.deps import Context, CurrentUser
from backend.errors import InvalidLastEventId
from backend.models.errors import API_ERRORS

router = APIRouter(prefix="/api/{user_id}", tags=["events"], responses=API_ERRORS)


def _event_id(value: str | None) -> int | None:
    if value is None or not value.strip():
        return None
    if not value.strip().isdigit() or len(value.strip()) > 18:
        raise InvalidLastEventId()
    return int(value)


@router.get(
    "/events",
    operation_id="followEvents",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "Server-sent events: `id` (increasing per user), `event` (the "
            "type: task.created, task.updated, task.completed, task.reopened, task.deleted, "
            "reminder.due) and `data` (a CloudEvents 1.0 JSON object); comments keep the "
            "connection alive.",
            "content": {"text/event-stream": {}},
        }
    },
)
async def follow_events(
    user: CurrentUser,
    context: Context,
    request: Request,
    last_event_id_header: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    last_event_id: Annotated[
        str | None, Query(description="The same as the Last-Event-ID header.", max_length=18)
    ] = None,
) -> StreamingResponse:
    """Follow the user's task changes and reminders as they happen. With Last-Event-ID,
    every retained event after it comes first, none lost or repeated."""
    after = _event_id(last_event_id_header or last_event_id)
    stream = await context.events.open(user.user_id, last_event_id=after)
    frames = context.events.frames(
        stream, keepalive_s=context.settings.events_keepalive_s, closed=request.is_disconnected
    )
    return StreamingResponse(
        frames,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
