"""The calendar feed: issue or revoke its secret URL; the feed itself, read by calendar apps."""

from fastapi import APIRouter, Request, Response, status

from backend.deps import Context, CurrentUser, DbSession
from backend.models.errors import API_ERRORS, error_responses
from backend.models.event import CalendarFeed
from backend.services import calendar

router = APIRouter(tags=["calendar"])


@router.post(
    "/api/{user_id}/calendar",
    status_code=status.HTTP_201_CREATED,
    operation_id="createCalendarFeed",
    responses=API_ERRORS,
)
async def create_feed(
    user: CurrentUser, db: DbSession, context: Context, request: Request
) -> CalendarFeed:
    """A secret URL of the user's dated tasks for calendar apps; calling again rotates it
    (the old URL stops working)."""
    secret = await calendar.issue(db=db, owner=user.user_id)
    base = context.settings.public_base_url or str(request.base_url).rstrip("/")
    return CalendarFeed(url=f"{base}/calendar/{secret}.ics")


@router.delete(
    "/api/{user_id}/calendar",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="deleteCalendarFeed",
    responses=API_ERRORS,
)
async def delete_feed(user: CurrentUser, db: DbSession) -> Response:
    """Revoke the calendar feed URL."""
    await calendar.revoke(db=db, owner=user.user_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/calendar/{secret}.ics",
    operation_id="getCalendarFeed",
    response_class=Response,
    responses={
        200: {"content": {"text/calendar": {}}, "description": "An iCalendar document."},
        **error_responses(404, 429),
    },
)
async def get_feed(secret: str, context: Context, request: Request) -> Response:
    """The feed: one VEVENT per pending task with a due date (no bearer token: the secret in
    the URL is the credential)."""
    # Per client and per feed: guessing secrets and polling one feed hard both stop here.
    context.feed_limiter.check("client:" + (request.client.host if request.client else "?"))
    context.feed_limiter.check("feed:" + calendar.digest(secret))
    body = await calendar.feed(database=context.database, secret=secret)
    return Response(body, media_type="text/calendar; charset=utf-8")
