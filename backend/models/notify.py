"""Reminders that reach people: NotificationSettings, PushSubscription, NotifyDelivery,
NotifyDigest (tables) -> NotificationsPublic / NotificationsUpdate, PushSubscriptionCreate /
PushSubscriptionPublic / PushSubscriptionsPublic, the action and verification bodies."""

import base64
import uuid
from datetime import date, datetime, time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints, field_validator
from pydantic import Field as PydanticField
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    String,
    Time,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlmodel import Field, SQLModel

from backend.models._types import Text, Timestamp

Channel = Literal["push", "email", "ntfy"]
CHANNELS: tuple[Channel, ...] = ("push", "email", "ntfy")
_ALL_CHANNELS = text("'{push,email,ntfy}'")


def _user_fk(primary_key: bool = False) -> Any:
    return Field(
        sa_column=Column(
            String(255),
            ForeignKey("users.id", ondelete="CASCADE"),
            primary_key=primary_key,
            nullable=False,
        )
    )


class NotificationSettings(SQLModel, table=True):
    """Where a person's reminders and daily plan go; times are their local time."""

    __tablename__ = "notification_settings"
    __table_args__ = (
        Index(
            "ix_notification_settings_digest_next",
            "digest_next_at",
            postgresql_where=text("digest_next_at IS NOT NULL"),
        ),
    )

    user_id: str = _user_fk(primary_key=True)
    email_address: str | None = Field(default=None, max_length=320)
    email_verified: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default=false())
    )
    # The code mailed to verify `email_address`, as SHA-256 (hex); wrong tries spend it.
    email_code_hash: str | None = Field(default=None, max_length=64)
    email_code_tries: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default=text("0"))
    )
    email_code_expires_at: datetime | None = Field(default=None, sa_type=DateTime(timezone=True))
    ntfy_url: str | None = Field(default=None, max_length=2000)
    reminder_channels: list[str] = Field(
        default_factory=lambda: list(CHANNELS),
        sa_column=Column(ARRAY(String(10)), nullable=False, server_default=_ALL_CHANNELS),
    )
    digest_at: time | None = Field(default=None, sa_type=Time)
    digest_channels: list[str] = Field(
        default_factory=lambda: list(CHANNELS),
        sa_column=Column(ARRAY(String(10)), nullable=False, server_default=_ALL_CHANNELS),
    )
    # When the daily plan is next looked at (its time today or tomorrow, in UTC).
    digest_next_at: datetime | None = Field(default=None, sa_type=DateTime(timezone=True))
    quiet_start: time | None = Field(default=None, sa_type=Time)
    quiet_end: time | None = Field(default=None, sa_type=Time)
    updated_at: datetime = Timestamp()


class PushSubscription(SQLModel, table=True):
    """A browser's (or installed page's) push subscription."""

    __tablename__ = "push_subscriptions"
    __table_args__ = (
        Index("ux_push_subscriptions_user_endpoint", "user_id", "endpoint", unique=True),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    user_id: str = _user_fk()
    endpoint: str = Field(max_length=2000)
    p256dh: str = Field(max_length=200)
    auth: str = Field(max_length=100)
    expiration_time: datetime | None = Field(default=None, sa_type=DateTime(timezone=True))
    created_at: datetime = Timestamp()


class NotifyDelivery(SQLModel, table=True):
    """One (notification, target): sent at most once after a success, retried until then.
    `due_at` NULL: settled."""

    __tablename__ = "notify_deliveries"
    __table_args__ = (
        Index("ix_notify_deliveries_due", "due_at", postgresql_where=text("due_at IS NOT NULL")),
        Index("ix_notify_deliveries_user", "user_id"),
        Index("ix_notify_deliveries_subscription", "subscription_id"),
        Index("ix_notify_deliveries_task", "task_id"),
    )

    id: int | None = Field(default=None, sa_column=Column(BigInteger, Identity(), primary_key=True))
    user_id: str = _user_fk()
    kind: str = Field(max_length=10)  # reminder, digest, test, verify
    channel: str = Field(max_length=10)
    subscription_id: uuid.UUID | None = Field(
        default=None,
        sa_column=Column(ForeignKey("push_subscriptions.id", ondelete="CASCADE"), nullable=True),
    )
    task_id: uuid.UUID | None = Field(
        default=None, sa_column=Column(ForeignKey("tasks.id", ondelete="CASCADE"), nullable=True)
    )
    occurrence: datetime | None = Field(default=None, sa_type=DateTime(timezone=True))
    payload: dict[str, Any] | None = Field(default=None, sa_column=Column(JSONB, nullable=True))
    due_at: datetime | None = Field(default=None, sa_type=DateTime(timezone=True))
    attempts: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default=text("0"))
    )
    outcome: str | None = Field(default=None, max_length=20)
    created_at: datetime = Timestamp()


class NotifyDigest(SQLModel, table=True):
    """The daily plan of one person and local date: written with its deliveries, once."""

    __tablename__ = "notify_digests"

    user_id: str = _user_fk(primary_key=True)
    local_date: date = Field(sa_column=Column(Date, primary_key=True, nullable=False))
    sent_at: datetime = Timestamp()


# -- the API's shapes ---------------------------------------------------------------------

LocalTime = Annotated[str, StringConstraints(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")]
EmailAddress = Annotated[
    Text,
    StringConstraints(
        strip_whitespace=True,
        max_length=320,
        pattern=r"^[^@\s<>\"(),;:]+@[^@\s<>\"(),;:]+\.[^@\s<>\"(),;:]+$",
    ),
]
Url = Annotated[Text, StringConstraints(strip_whitespace=True, min_length=8, max_length=2000)]


class EmailPublic(BaseModel):
    address: str
    verified: bool


class EmailUpdate(BaseModel):
    # `verified` sent back from a GET is ignored: only a code or the token verifies.
    model_config = ConfigDict(extra="ignore")
    address: EmailAddress


class NtfyPublic(BaseModel):
    url: str


class NtfyUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: Url


class DigestPublic(BaseModel):
    at: str | None = PydanticField(description="HH:MM in your timezone; null: no daily plan.")
    channels: list[Channel]


class DigestUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    at: LocalTime | None = None
    channels: list[Channel] | None = None


class QuietHours(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start: LocalTime
    end: LocalTime


class PushSubscriptionPublic(BaseModel):
    id: uuid.UUID
    endpoint: str
    expiration_time: datetime | None
    created_at: datetime


class PushSubscriptionsPublic(BaseModel):
    data: list[PushSubscriptionPublic]
    count: int


class NotificationsPublic(BaseModel):
    email: EmailPublic | None
    ntfy: NtfyPublic | None
    push: list[PushSubscriptionPublic]
    reminders: list[Channel] = PydanticField(description="The channels a reminder goes to.")
    digest: DigestPublic
    quiet_hours: QuietHours | None


class NotificationsUpdate(BaseModel):
    """A partial update: only the fields sent change; `null` clears email, ntfy, quiet hours."""

    model_config = ConfigDict(extra="forbid")
    email: EmailUpdate | None = None
    ntfy: NtfyUpdate | None = None
    push: list[dict[str, Any]] | None = PydanticField(
        default=None, description="Ignored (a GET sent back): see /push/subscriptions."
    )
    reminders: list[Channel] | None = None
    digest: DigestUpdate | None = None
    quiet_hours: QuietHours | None = None

    @field_validator("reminders")
    @classmethod
    def _no_repeats(cls, value: list[Channel] | None) -> list[Channel] | None:
        return list(dict.fromkeys(value)) if value is not None else None


class SubscriptionKeys(BaseModel):
    p256dh: Annotated[
        str, StringConstraints(min_length=20, max_length=200, pattern=r"^[A-Za-z0-9_\-=]+$")
    ]
    auth: Annotated[
        str, StringConstraints(min_length=8, max_length=100, pattern=r"^[A-Za-z0-9_\-=]+$")
    ]

    @field_validator("p256dh")
    @classmethod
    def _a_p256_point(cls, value: str) -> str:
        raw = _b64url_bytes(value)
        if len(raw) != 65 or raw[0] != 4:
            raise ValueError("must be an uncompressed P-256 point, base64url (65 bytes)")
        return value

    @field_validator("auth")
    @classmethod
    def _sixteen_bytes(cls, value: str) -> str:
        if len(_b64url_bytes(value)) != 16:
            raise ValueError("must be the 16-byte auth secret, base64url")
        return value


def _b64url_bytes(value: str) -> bytes:
    return base64.urlsafe_b64decode(value.rstrip("=") + "=" * (-len(value.rstrip("=")) % 4))


class PushSubscriptionCreate(BaseModel):
    """The browser's `PushSubscription.toJSON()`."""

    endpoint: Url
    keys: SubscriptionKeys
    expirationTime: float | None = PydanticField(  # the browser's name
        default=None, description="Milliseconds since the epoch, or null."
    )


class PushKey(BaseModel):
    public_key: str = PydanticField(description="The VAPID application server key, base64url.")


class EmailCode(BaseModel):
    code: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=20)]


class ActionToken(BaseModel):
    token: Annotated[str, StringConstraints(min_length=10, max_length=2000)]


class ActionDone(BaseModel):
    action: Literal["done", "snooze"]
    task: dict[str, Any]
    changed: bool


class TestSent(BaseModel):
    queued: int = PydanticField(description="How many targets the test notification goes to.")


class Unsubscribed(BaseModel):
    stopped: Literal["reminder", "digest"] = PydanticField(
        description="The kind of mail that no longer comes."
    )
