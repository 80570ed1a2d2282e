"""A person's notification settings and push subscriptions (GET/PATCH, subscribe, list,
unsubscribe), and verifying an email address with a mailed code."""

import hashlib
import json
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import delete, func, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.auth import Identity
from backend.db import Database
from backend.models.notify import (
    DigestPublic,
    EmailPublic,
    NotificationSettings,
    NotificationsPublic,
    NotificationsUpdate,
    NtfyPublic,
    PushSubscription,
    PushSubscriptionCreate,
    PushSubscriptionPublic,
    PushSubscriptionsPublic,
    QuietHours,
)
from backend.models.user import User
from backend.services.notify.addresses import AddressGuard
from backend.services.notify.errors import (
    ChannelNotConfigured,
    NoEmailCode,
    SubscriptionNotFound,
    WrongEmailCode,
)
from backend.services.notify.schedule import hhmm, next_digest_at, parse_hhmm

CODE_LIFE = timedelta(hours=1)
CODE_TRIES = 5
WAKE = text("SELECT pg_notify('todo_agent_notify', '')")


async def settings_row(*, db: AsyncSession, identity: Identity) -> NotificationSettings:
    """The person's settings, made on first use: with the address their sign-in token says
    is theirs and verified (`email_verified`), if any."""
    row = await db.get(NotificationSettings, identity.user_id)
    if row is not None:
        return row
    adopted = identity.email if identity.email and identity.email_verified else None
    await db.exec(
        insert(NotificationSettings)
        .values(user_id=identity.user_id, email_address=adopted, email_verified=adopted is not None)
        .on_conflict_do_nothing()
    )
    row = await db.get(NotificationSettings, identity.user_id)
    assert row is not None
    return row


async def subscriptions(*, db: AsyncSession, owner: str) -> list[PushSubscriptionPublic]:
    rows = await db.exec(
        select(PushSubscription)
        .where(col(PushSubscription.user_id) == owner)
        .order_by(col(PushSubscription.created_at), col(PushSubscription.id))
    )
    return [_subscription(row) for row in rows]


def _subscription(row: PushSubscription) -> PushSubscriptionPublic:
    return PushSubscriptionPublic(
        id=row.id,
        endpoint=row.endpoint,
        expiration_time=row.expiration_time,
        created_at=row.created_at,
    )


async def get_notifications(*, db: AsyncSession, identity: Identity) -> NotificationsPublic:
    row = await settings_row(db=db, identity=identity)
    return _public(row, await subscriptions(db=db, owner=identity.user_id))


def _public(row: NotificationSettings, push: list[PushSubscriptionPublic]) -> NotificationsPublic:
    quiet = None
    if row.quiet_start is not None and row.quiet_end is not None:
        quiet = QuietHours(start=hhmm(row.quiet_start) or "", end=hhmm(row.quiet_end) or "")
    return NotificationsPublic(
        email=EmailPublic(address=row.email_address, verified=row.email_verified)
        if row.email_address
        else None,
        ntfy=NtfyPublic(url=row.ntfy_url) if row.ntfy_url else None,
        push=push,
        reminders=row.reminder_channels,
        digest=DigestPublic(at=hhmm(row.digest_at), channels=row.digest_channels),
        quiet_hours=quiet,
    )


async def update_notifications(
    *,
    database: Database,
    identity: Identity,
    data: NotificationsUpdate,
    guard: AddressGuard,
    mail_configured: bool,
) -> NotificationsPublic:
    """Change what was sent. A new email address is unverified until the code mailed to it
    comes back; an ntfy URL is checked (where it resolves to) before it is kept, with no
    database connection held while it resolves."""
    if data.ntfy is not None:
        await guard.check(data.ntfy.url)
    async with database.transaction(as_user=identity.user_id) as db:
        return await _update(db=db, identity=identity, data=data, mail_configured=mail_configured)


async def _update(
    *, db: AsyncSession, identity: Identity, data: NotificationsUpdate, mail_configured: bool
) -> NotificationsPublic:
    owner = identity.user_id
    row = await settings_row(db=db, identity=identity)
    sent = data.model_fields_set
    changes: dict[str, Any] = {}
    if "ntfy" in sent:
        changes["ntfy_url"] = data.ntfy.url if data.ntfy is not None else None
    if "reminders" in sent and data.reminders is not None:
        changes["reminder_channels"] = list(data.reminders)
    if "quiet_hours" in sent:
        quiet = data.quiet_hours
        changes["quiet_start"] = parse_hhmm(quiet.start) if quiet else None
        changes["quiet_end"] = parse_hhmm(quiet.end) if quiet else None
    if "digest" in sent and data.digest is not None:
        digest = data.digest
        if digest.channels is not None:
            changes["digest_channels"] = list(dict.fromkeys(digest.channels))
        if "at" in digest.model_fields_set:
            at = parse_hhmm(digest.at) if digest.at else None
            changes["digest_at"] = at
            changes["digest_next_at"] = None
            if at is not None:
                tz = await _zone(db=db, owner=owner)
                changes["digest_next_at"] = next_digest_at(at, tz, datetime.now(UTC))
    if "email" in sent:
        if data.email is None:
            changes |= _no_email()
        elif data.email.address.lower() != (row.email_address or "").lower() or not (
            row.email_verified
        ):
            if not mail_configured:
                raise ChannelNotConfigured("Email is not configured on this service.")
            changes |= await _ask_for_code(db=db, owner=owner, address=data.email.address)
    if changes:
        statement = (
            update(NotificationSettings)
            .where(col(NotificationSettings.user_id) == owner)
            .values(**changes, updated_at=func.now())
            .returning(NotificationSettings)
        )
        row = (await db.exec(statement)).scalars().one()
        if "digest_next_at" in changes:
            await (await db.connection()).execute(WAKE)
    return _public(row, await subscriptions(db=db, owner=owner))


def _no_email() -> dict[str, Any]:
    return {
        "email_address": None,
        "email_verified": False,
        "email_code_hash": None,
        "email_code_tries": 0,
        "email_code_expires_at": None,
    }


def _code_hash(owner: str, address: str, code: str) -> str:
    return hashlib.sha256(f"{owner}\0{address.lower()}\0{code}".encode()).hexdigest()


async def _ask_for_code(*, db: AsyncSession, owner: str, address: str) -> dict[str, Any]:
    """Queue the mail with a new code (the delivery worker sends it) and keep its hash."""
    code = f"{secrets.randbelow(1_000_000):06d}"
    await (await db.connection()).execute(
        text(
            "INSERT INTO notify_deliveries (user_id, kind, channel, payload, due_at)"
            " VALUES (:user, 'verify', 'email', CAST(:payload AS jsonb), now())"
        ),
        {"user": owner, "payload": _json({"address": address, "code": code})},
    )
    await (await db.connection()).execute(WAKE)
    return {
        "email_address": address,
        "email_verified": False,
        "email_code_hash": _code_hash(owner, address, code),
        "email_code_tries": 0,
        "email_code_expires_at": datetime.now(UTC) + CODE_LIFE,
    }


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False)


async def verify_email(*, database: Database, identity: Identity, code: str) -> NotificationsPublic:
    """Confirm the address with the mailed code; wrong codes spend it after CODE_TRIES (each
    wrong try is counted in a transaction of its own, committed though the request fails)."""
    owner = identity.user_id
    async with database.transaction(as_user=owner) as db:
        row = await settings_row(db=db, identity=identity)
        expires = row.email_code_expires_at
        if (
            row.email_code_hash is None
            or row.email_address is None
            or expires is None
            or expires <= datetime.now(UTC)
        ):
            raise NoEmailCode()
        right = secrets.compare_digest(
            row.email_code_hash, _code_hash(owner, row.email_address, code)
        )
        if right:
            statement = (
                update(NotificationSettings)
                .where(col(NotificationSettings.user_id) == owner)
                .values(
                    email_verified=True,
                    email_code_hash=None,
                    email_code_tries=0,
                    email_code_expires_at=None,
                    updated_at=func.now(),
                )
                .returning(NotificationSettings)
            )
            row = (await db.exec(statement)).scalars().one()
            return _public(row, await subscriptions(db=db, owner=owner))
        tries = row.email_code_tries + 1
        spent = tries >= CODE_TRIES
        await db.exec(
            update(NotificationSettings)
            .where(col(NotificationSettings.user_id) == owner)
            .values(email_code_tries=tries, email_code_hash=None if spent else row.email_code_hash)
        )
    if spent:
        raise WrongEmailCode("That code is not the one mailed; it is spent: ask for a new one.")
    raise WrongEmailCode()


async def subscribe(
    *, database: Database, owner: str, data: PushSubscriptionCreate, guard: AddressGuard
) -> tuple[PushSubscriptionPublic, bool]:
    """Keep the browser's subscription (its endpoint checked first, with no database
    connection held); the same endpoint again is the same subscription, its keys refreshed.
    True when it is new."""
    await guard.check(data.endpoint)
    async with database.transaction(as_user=owner) as db:
        return await _subscribe(db=db, owner=owner, data=data)


async def _subscribe(
    *, db: AsyncSession, owner: str, data: PushSubscriptionCreate
) -> tuple[PushSubscriptionPublic, bool]:
    expiration = (
        datetime.fromtimestamp(data.expirationTime / 1000, UTC)
        if data.expirationTime is not None and 0 < data.expirationTime < 1e15
        else None
    )
    existing = (
        await db.exec(
            select(PushSubscription).where(
                col(PushSubscription.user_id) == owner,
                col(PushSubscription.endpoint) == data.endpoint,
            )
        )
    ).one_or_none()
    values = {
        "p256dh": data.keys.p256dh,
        "auth": data.keys.auth,
        "expiration_time": expiration,
    }
    if existing is not None:
        await db.exec(
            update(PushSubscription).where(col(PushSubscription.id) == existing.id).values(**values)
        )
        await db.refresh(existing)
        return _subscription(existing), False
    statement = (
        insert(PushSubscription)
        .values(id=uuid.uuid4(), user_id=owner, endpoint=data.endpoint, **values)
        .on_conflict_do_update(index_elements=["user_id", "endpoint"], set_=values)
        .returning(PushSubscription)
    )
    row = (await db.exec(statement)).scalars().one()
    return _subscription(row), True


async def list_subscriptions(*, db: AsyncSession, owner: str) -> PushSubscriptionsPublic:
    data = await subscriptions(db=db, owner=owner)
    return PushSubscriptionsPublic(data=data, count=len(data))


async def unsubscribe(*, db: AsyncSession, owner: str, subscription_id: uuid.UUID) -> None:
    """Forget a subscription: its pending deliveries and its action tokens go with it."""
    result = await db.exec(
        delete(PushSubscription).where(
            col(PushSubscription.user_id) == owner, col(PushSubscription.id) == subscription_id
        )
    )
    if not result.rowcount:
        raise SubscriptionNotFound()


async def _zone(*, db: AsyncSession, owner: str) -> ZoneInfo:
    name = (await db.exec(select(col(User.timezone)).where(col(User.id) == owner))).one_or_none()
    return ZoneInfo(name or "UTC")
