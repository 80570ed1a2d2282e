"""Webhooks from outside: the identity provider telling of a deleted user."""

from fastapi import APIRouter, Request, Response, status

from backend.deps import Context
from backend.errors import NotFound
from backend.models.errors import error_responses
from backend.services import identity_hook

router = APIRouter(tags=["hooks"])


@router.post(
    "/hooks/identity",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="identityWebhook",
    responses=error_responses(401, 404, 409, 413, 422, 503),
)
async def identity_webhook(request: Request, context: Context) -> Response:
    """The identity provider's user-deletion webhook (Clerk's `user.deleted`, signed per
    Standard Webhooks with IDENTITY_WEBHOOK_SECRET, `webhook-*` or `svix-*` headers): erases
    that user. No bearer token: the signature is the credential. Other event types are
    ignored (204); a replayed message is 409; without the secret configured, 404."""
    secret = context.settings.identity_webhook_secret
    if secret is None:
        raise NotFound()
    await identity_hook.handle(
        database=context.database,
        secret=secret.get_secret_value(),
        body=await request.body(),
        headers=request.headers,
        forget=context.known_users.discard,
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)
