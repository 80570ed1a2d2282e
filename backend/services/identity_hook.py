"""The identity provider's webhook: a user deleted there is erased here.

A message is verified by the `standardwebhooks` library with IDENTITY_WEBHOOK_SECRET: the
signature over its id, timestamp and body, and a timestamp within 5 minutes of now, under
the Standard Webhooks header names (`webhook-id`, `webhook-timestamp`, `webhook-signature`)
or the `svix-*` ones Clerk sends. Its id is then taken in `identity_webhook_messages`, whose
primary key lets it through once: a replay (the same message again, re-signed or not) is
refused and never erases twice, which matters most once the person has signed up again.
If the erasure fails, the id is given back so that the provider's retry can finish it (an
erasure that died with its process is finished by the upkeep loop). Ids are kept for
KEEP_MESSAGES_H, past the retries of Clerk's (Svix's) schedule, then pruned.

Only `user.deleted` is acted on; any other event type is answered 2xx and ignored, so that
a provider sending several types to this endpoint does not retry them.
"""

import contextlib
from collections.abc import Callable, Mapping

from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from backend.db import Database
from backend.errors import DomainError, WebhookNotVerified, WebhookReplayed
from backend.models.identity import DeletedUser, IdentityEvent
from backend.services import erasure

KEEP_MESSAGES_H = 72
_HEADERS = ("id", "timestamp", "signature")
_TAKE = text(
    "INSERT INTO identity_webhook_messages (id) VALUES (:id) ON CONFLICT (id) DO NOTHING"
    " RETURNING id"
)
_GIVE_BACK = text("DELETE FROM identity_webhook_messages WHERE id = :id")
_PRUNE = text(
    "DELETE FROM identity_webhook_messages WHERE id IN (SELECT id FROM identity_webhook_messages"
    " WHERE received_at < now() - make_interval(hours => :hours) LIMIT 5000)"
)


class MalformedEvent(DomainError):
    status_code = 422
    detail = "The webhook's body is not an identity provider's event."


def verify(secret: str, body: bytes, headers: Mapping[str, str]) -> tuple[str, IdentityEvent]:
    """The message's id and event, once its signature and timestamp verify."""
    named = {
        f"webhook-{part}": headers.get(f"webhook-{part}") or headers.get(f"svix-{part}") or ""
        for part in _HEADERS
    }
    try:
        Webhook(secret).verify(body, named, json_parse=False)
    except WebhookVerificationError as refused:
        if "timestamp" in str(refused).lower():
            raise WebhookNotVerified(
                "The webhook's timestamp is more than 5 minutes from now."
            ) from None
        raise WebhookNotVerified() from None
    except (ValueError, UnicodeDecodeError):  # a signature or body that cannot be read
        raise WebhookNotVerified() from None
    message_id = named["webhook-id"]
    if len(message_id) > 255:
        raise WebhookNotVerified("The webhook's id is too long.")
    try:
        return message_id, IdentityEvent.model_validate_json(body)
    except ValidationError:
        raise MalformedEvent() from None


async def handle(
    *,
    database: Database,
    secret: str,
    body: bytes,
    headers: Mapping[str, str],
    forget: Callable[[str], None] | None = None,
) -> str | None:
    """Verify the message and act on it: the id of the user erased, or None when the event
    is not a user's deletion. A replayed message is WebhookReplayed (409)."""
    message_id, event = verify(secret, body, headers)
    if event.type != "user.deleted":
        return None
    try:
        user_id = DeletedUser.model_validate(event.data).id
    except ValidationError:
        raise MalformedEvent("A user.deleted event needs data.id, the user's id.") from None
    async with database.system() as connection:
        if (await connection.execute(_TAKE, {"id": message_id})).first() is None:
            raise WebhookReplayed()
    try:
        await erasure.erase(database, user_id, forget=forget)
    except BaseException:
        with contextlib.suppress(Exception):  # best effort: the error that came first stands
            async with database.system() as connection:
                await connection.execute(_GIVE_BACK, {"id": message_id})
        raise
    return user_id


async def prune(connection: AsyncConnection) -> int:
    """Forget (a batch of) message ids older than any retry of theirs."""
    return int((await connection.execute(_PRUNE, {"hours": KEEP_MESSAGES_H})).rowcount)
