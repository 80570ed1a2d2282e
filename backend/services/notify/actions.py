"""Acting from a notification: a signed, single-purpose, expiring token for one action on
one task and one reminder (Done, Snooze), or for stopping one kind of mail (one-click
unsubscribe), never the person's bearer token.

A token is its claims (JSON, base64url) and their HMAC-SHA256, keyed by a key derived from
the VAPID private key, so every replica reads it. It carries no more authority than it
names: the action runs as that person, through the same task services as REST (their
events, row-level security), so a task they can no longer reach, an account erased, a push
subscription removed (the token names it), or a token past its time is 410; a token that
does not verify is 401. Done a second time changes nothing."""

import hashlib
import hmac
import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import func, update
from sqlmodel import col, select

from backend.db import Database
from backend.errors import NotFound
from backend.models.notify import ActionDone, NotificationSettings, PushSubscription
from backend.models.task import Task, TaskUpdate
from backend.services import tasks
from backend.services.notify.errors import ActionTokenGone, ActionTokenInvalid
from backend.services.notify.keys import b64url, b64url_decode
from backend.services.tasks import TaskRef

Action = Literal["done", "snooze"]
UNSUBSCRIBE_LIFE = timedelta(days=90)


@dataclass(frozen=True, slots=True)
class Claims:
    user: str
    action: str  # done, snooze, unsubscribe
    task: uuid.UUID | None = None
    occurrence: str | None = None  # the reminder: the task's reminded_at when it fired
    subscription: uuid.UUID | None = None
    kind: str | None = None  # unsubscribe: reminder or digest
    expires: int = 0


class ActionSigner:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def sign(self, claims: Claims) -> str:
        body = {
            "u": claims.user,
            "a": claims.action,
            "t": str(claims.task) if claims.task else None,
            "r": claims.occurrence,
            "s": str(claims.subscription) if claims.subscription else None,
            "k": claims.kind,
            "e": claims.expires,
        }
        encoded = b64url(json.dumps(body, separators=(",", ":")).encode())
        return f"{encoded}.{self._mac(encoded)}"

    def _mac(self, encoded: str) -> str:
        return b64url(hmac.new(self._secret, encoded.encode(), hashlib.sha256).digest()[:24])

    def verify(self, token: str) -> Claims:
        """The token's claims; 401 when it does not verify, 410 when it has expired."""
        encoded, _, mac = token.strip().partition(".")
        # As bytes: a token with non-ASCII characters is simply not ours.
        expected = self._mac(encoded).encode()
        if not encoded or not hmac.compare_digest(mac.encode(), expected):
            raise ActionTokenInvalid()
        try:
            body: dict[str, Any] = json.loads(b64url_decode(encoded))
            claims = Claims(
                user=str(body["u"]),
                action=str(body["a"]),
                task=uuid.UUID(body["t"]) if body.get("t") else None,
                occurrence=body.get("r"),
                subscription=uuid.UUID(body["s"]) if body.get("s") else None,
                kind=body.get("k"),
                expires=int(body["e"]),
            )
        except (ValueError, KeyError, TypeError) as error:
            raise ActionTokenInvalid() from error
        if claims.expires <= time.time():
            raise ActionTokenGone()
        return claims


def instant(moment: datetime) -> str:
    """How a reminder's time is named in a token (the same whatever the session's zone)."""
    return moment.astimezone(UTC).isoformat()


def expires_in(hours: float) -> int:
    return int(time.time() + hours * 3600)


async def act(
    *, database: Database, signer: ActionSigner, token: str, snooze_min: float
) -> ActionDone:
    """Do what the token names, once."""
    claims = signer.verify(token)
    if claims.action not in ("done", "snooze") or claims.task is None:
        raise ActionTokenInvalid()
    async with database.transaction(as_user=claims.user) as db:
        if claims.subscription is not None:
            alive = await db.get(PushSubscription, claims.subscription)
            if alive is None:
                raise ActionTokenGone()
        task = (await db.exec(select(Task).where(col(Task.id) == claims.task))).one_or_none()
        if task is None or task.deleted_at is not None:
            raise ActionTokenGone()
        ref = TaskRef(id=claims.task)
        try:
            if claims.action == "done":
                if task.completed:
                    return await _unchanged(db, claims, ref)
                changed = await tasks.update_task(
                    db=db, user=claims.user, ref=ref, data=TaskUpdate(completed=True)
                )
            else:
                fired = instant(task.reminded_at) if task.reminded_at else None
                if task.completed or fired != claims.occurrence:
                    return await _unchanged(db, claims, ref)  # snoozed or moved already
                later = datetime.now(UTC) + timedelta(minutes=snooze_min)
                changed = await tasks.update_task(
                    db=db, user=claims.user, ref=ref, data=TaskUpdate(remind_at=later)
                )
        except NotFound as error:
            raise ActionTokenGone() from error
    return ActionDone(
        action=claims.action,
        task=changed.model_dump(
            mode="json", include={"id", "number", "title", "completed", "remind_at"}
        ),
        changed=True,
    )


async def _unchanged(db: Any, claims: Claims, ref: TaskRef) -> ActionDone:
    detail = await tasks.get_task(db=db, user=claims.user, ref=ref)
    return ActionDone(
        action=claims.action,
        task=detail.model_dump(
            mode="json", include={"id", "number", "title", "completed", "remind_at"}
        ),
        changed=False,
    )


async def unsubscribe(*, database: Database, signer: ActionSigner, token: str) -> str:
    """RFC 8058 one-click: stop the kind of mail the token came with; which kind it was."""
    claims = signer.verify(token)
    if claims.action != "unsubscribe" or claims.kind not in ("reminder", "digest"):
        raise ActionTokenInvalid()
    column = "reminder_channels" if claims.kind == "reminder" else "digest_channels"
    async with database.transaction(as_user=claims.user) as db:
        await db.exec(
            update(NotificationSettings)
            .where(col(NotificationSettings.user_id) == claims.user)
            .values(
                {
                    column: func.array_remove(getattr(NotificationSettings, column), "email"),
                    "updated_at": func.now(),
                }
            )
        )
    return claims.kind
