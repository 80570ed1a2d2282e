"""Reminders that reach people: notification settings, push subscriptions, the VAPID key,
acting from a notification, one-click unsubscribe (docs/notifications.md)."""

import uuid
from html import escape
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import HTMLResponse

from backend.deps import Context, CurrentUser, DbSession
from backend.errors import DomainError, NotFound
from backend.models.errors import API_ERRORS, ErrorResponse, error_responses
from backend.models.notify import (
    ActionDone,
    ActionToken,
    EmailCode,
    NotificationsPublic,
    NotificationsUpdate,
    PushKey,
    PushSubscriptionCreate,
    PushSubscriptionPublic,
    PushSubscriptionsPublic,
    TestSent,
    Unsubscribed,
)
from backend.services.notify import actions, preferences
from backend.services.notify.dispatcher import queue
from backend.services.notify.errors import ActionTokenInvalid, ChannelNotConfigured

router = APIRouter(tags=["notifications"])
_API = "/api/{user_id}"
# An action token's refusals: no WWW-Authenticate (there is no bearer scheme to offer).
_TOKEN_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "The token does not verify."},
    410: {"model": ErrorResponse, "description": "Expired, or what it names is gone."},
    **error_responses(400, 413, 422, 503),
}
_PAGE_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "The token does not verify.", "content": {"text/html": {}}},
    410: {"description": "Expired, or gone.", "content": {"text/html": {}}},
}
TokenQuery = Annotated[str, Query(min_length=10, max_length=2000)]
PageToken = Annotated[str | None, Query(max_length=2000)]


@router.get(f"{_API}/notifications", operation_id="getNotifications", responses=API_ERRORS)
async def get_notifications(user: CurrentUser, db: DbSession) -> NotificationsPublic:
    """Where your reminders and daily plan go; times are in your settings' timezone."""
    return await preferences.get_notifications(db=db, identity=user)


@router.patch(
    f"{_API}/notifications",
    operation_id="updateNotifications",
    responses={**API_ERRORS, **error_responses(409)},
)
async def update_notifications(
    user: CurrentUser, context: Context, data: NotificationsUpdate
) -> NotificationsPublic:
    """Change what is sent (partial). A new email address gets a code to confirm it; an
    ntfy URL that points at a private address is refused (422)."""
    return await preferences.update_notifications(
        database=context.database,
        identity=user,
        data=data,
        guard=context.notify.guard,
        mail_configured=context.notify.mail_configured,
    )


@router.post(
    f"{_API}/notifications/email/verify",
    operation_id="verifyNotificationEmail",
    responses={**API_ERRORS, **error_responses(409)},
)
async def verify_email(user: CurrentUser, context: Context, data: EmailCode) -> NotificationsPublic:
    """Confirm your email address with the code mailed to it (5 wrong codes spend it)."""
    return await preferences.verify_email(database=context.database, identity=user, code=data.code)


@router.post(
    f"{_API}/notifications/test",
    status_code=status.HTTP_202_ACCEPTED,
    operation_id="sendTestNotification",
    responses=API_ERRORS,
)
async def send_test(user: CurrentUser, db: DbSession) -> TestSent:
    """Send a test notification to every device and address you set up (whichever
    channels reminders go to); how many it goes to."""
    await preferences.settings_row(db=db, identity=user)
    connection = await db.connection()
    queued = await queue(
        connection,
        user_id=user.user_id,
        kind="test",
        channels=["push", "email", "ntfy"],
        payload={},
    )
    return TestSent(queued=queued)


@router.post(
    f"{_API}/push/subscriptions",
    status_code=status.HTTP_201_CREATED,
    operation_id="createPushSubscription",
    responses={**API_ERRORS, **error_responses(409), 200: {"model": PushSubscriptionPublic}},
)
async def create_subscription(
    user: CurrentUser,
    context: Context,
    data: PushSubscriptionCreate,
    response: Response,
) -> PushSubscriptionPublic:
    """Keep this browser's push subscription (`PushSubscription.toJSON()`); the same
    endpoint again is the same subscription (200). 409 where Web Push is not configured."""
    if context.notify.keys is None:
        raise ChannelNotConfigured("Web Push is not configured on this service.")
    subscription, created = await preferences.subscribe(
        database=context.database, owner=user.user_id, data=data, guard=context.notify.guard
    )
    if not created:
        response.status_code = status.HTTP_200_OK
    return subscription


@router.get(
    f"{_API}/push/subscriptions", operation_id="listPushSubscriptions", responses=API_ERRORS
)
async def list_subscriptions(user: CurrentUser, db: DbSession) -> PushSubscriptionsPublic:
    """Your push subscriptions (one per browser or installed page)."""
    return await preferences.list_subscriptions(db=db, owner=user.user_id)


@router.delete(
    f"{_API}/push/subscriptions/{{subscription_id}}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="deletePushSubscription",
    responses=API_ERRORS,
)
async def delete_subscription(
    user: CurrentUser, db: DbSession, subscription_id: uuid.UUID
) -> Response:
    """Stop pushing to that browser; its notifications' buttons stop working too."""
    await preferences.unsubscribe(db=db, owner=user.user_id, subscription_id=subscription_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/push/key", operation_id="getPushKey", responses=error_responses(404))
async def push_key(context: Context) -> PushKey:
    """The VAPID application server key (base64url) a browser subscribes with; no token."""
    keys = context.notify.keys
    if keys is None:
        raise NotFound("Web Push is not configured on this service (VAPID_PRIVATE_KEY).")
    return PushKey(public_key=keys.public_key)


@router.post("/notifications/actions", operation_id="actOnNotification", responses=_TOKEN_ERRORS)
async def act(context: Context, data: ActionToken) -> ActionDone:
    """Do what a notification's button names (done, snooze) for that task; the token is
    the authority, no bearer token. Done twice changes nothing (200)."""
    return await actions.act(
        database=context.database,
        signer=_signer(context),
        token=data.token,
        snooze_min=context.settings.notify_snooze_min,
    )


@router.get(
    "/notifications/actions",
    operation_id="notificationActionPage",
    response_class=HTMLResponse,
    responses=_PAGE_ERRORS,
)
async def action_page(context: Context, token: PageToken = None) -> HTMLResponse:
    """An HTML page with a button: a link in a mail only shows it (mail scanners follow
    links); the button's POST acts."""
    try:
        claims = _signer(context).verify(token or "")
        label = {"done": "Mark it done", "snooze": "Snooze it"}.get(claims.action)
        if label is None:
            raise ActionTokenInvalid()
    except DomainError as error:
        return _message(error.detail, status_code=error.status_code)
    return _page(label, "/notifications/actions/form", token or "")


@router.post("/notifications/actions/form", response_class=HTMLResponse, include_in_schema=False)
async def act_from_page(context: Context, request: Request) -> HTMLResponse:
    """The action page's button."""
    try:
        done = await actions.act(
            database=context.database,
            signer=_signer(context),
            token=_form_token(await request.body()),
            snooze_min=context.settings.notify_snooze_min,
        )
    except DomainError as error:
        return _message(error.detail, status_code=error.status_code)
    title = str(done.task.get("title", ""))
    said = "done" if done.action == "done" else "snoozed"
    return _message(f"{title}: {said}." if done.changed else f"{title}: nothing to change.")


@router.get(
    "/notifications/unsubscribe",
    operation_id="unsubscribePage",
    response_class=HTMLResponse,
    responses=_PAGE_ERRORS,
)
async def unsubscribe_page(context: Context, token: PageToken = None) -> HTMLResponse:
    """An HTML page with a button to stop that kind of mail."""
    try:
        _signer(context).verify(token or "")
    except DomainError as error:
        return _message(error.detail, status_code=error.status_code)
    return _page("Stop these mails", "/notifications/unsubscribe", token or "", in_query=True)


@router.post("/notifications/unsubscribe", operation_id="unsubscribeMail", responses=_TOKEN_ERRORS)
async def unsubscribe(context: Context, token: TokenQuery) -> Unsubscribed:
    """RFC 8058 one-click unsubscribe (the `List-Unsubscribe` URL, no login): stops the
    kind of mail it came with (`reminder` or `digest`)."""
    kind = await actions.unsubscribe(
        database=context.database, signer=_signer(context), token=token
    )
    return Unsubscribed(stopped=kind)


def _signer(context: Context) -> actions.ActionSigner:
    signer = context.notify.signer
    if signer is None:
        raise ActionTokenInvalid()
    return signer


def _form_token(body: bytes) -> str:
    values = parse_qs(body.decode("utf-8", "replace"))
    token = (values.get("token") or [""])[0]
    if not 10 <= len(token) <= 2000:
        raise ActionTokenInvalid()
    return token


def _page(label: str, action: str, token: str, *, in_query: bool = False) -> HTMLResponse:
    target = f"{action}?token={escape(token)}" if in_query else action
    field = "" if in_query else f'<input type="hidden" name="token" value="{escape(token)}">'
    return HTMLResponse(
        "<!doctype html><html><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width">'
        "<title>todo-agent</title></head><body>"
        f'<form method="post" action="{target}">{field}'
        f"<button type=submit>{escape(label)}</button></form></body></html>"
    )


def _message(text: str, *, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(
        "<!doctype html><html><head><meta charset=utf-8><title>todo-agent</title></head>"
        f"<body><p>{escape(text)}</p></body></html>",
        status_code=status_code,
    )
