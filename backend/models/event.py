"""Events: the outbox of task changes (rows written by the `tasks_events` trigger of
migration 0005, in the transaction of the change), and what streams and webhooks send."""

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic import Field as PydanticField
from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Identity,
    Index,
    Integer,
    String,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

from backend.models._types import OptionalTimestamp

EventType = Literal[
    "task.created", "task.updated", "task.completed", "task.reopened", "task.deleted",
    "task.restored", "reminder.due", "list.created", "list.updated", "list.deleted",
    "list.member_added", "list.member_removed", "document.created", "document.updated",
    "document.deleted", "user.deleted",
    "memory.created", "memory.updated", "memory.deleted",
]  # fmt: skip


class Event(SQLModel, table=True):
    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_user_id", "user_id", "id"),
        Index("ix_events_occurred_at", "occurred_at"),
        Index(
            "ix_events_webhook_due",
            "webhook_due_at",
            postgresql_where=text("webhook_due_at IS NOT NULL"),
        ),
    )

    id: int = Field(sa_column=Column(BigInteger, Identity(always=False), primary_key=True))
    # Not a foreign key: the `user.deleted` event outlives the user it is about (an erasure
    # deletes the user's other events itself).
    user_id: str = Field(sa_column=Column(String(255), nullable=False))
    type: str = Field(max_length=32)
    subject: uuid.UUID | None = None  # NULL: the event is about the user (`user.deleted`)
    occurred_at: datetime = Field(
        sa_column=Column(
            DateTime(timezone=True),
            nullable=False,
            server_default=text("clock_timestamp()"),
        )
    )
    data: dict[str, Any] = Field(sa_column=Column(JSONB, nullable=False))
    webhook_due_at: datetime | None = OptionalTimestamp()
    webhook_attempts: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default=text("0"))
    )
    webhook_outcome: str | None = Field(default=None, max_length=16)


class CloudEvent(BaseModel):
    """A CloudEvents 1.0 JSON event, as streams and webhooks carry it."""

    model_config = ConfigDict(extra="forbid")

    specversion: Literal["1.0"] = "1.0"
    id: str = PydanticField(description="Increasing per user; the stream's `id:`.")
    source: str
    type: EventType
    time: datetime
    subject: str = PydanticField(
        description="The task's id (a list's, for list events; a document's, for document "
        "events; the memory's, for memory events; the user's, for user.deleted)."
    )
    datacontenttype: Literal["application/json"] = "application/json"
    data: dict[str, Any] = PydanticField(
        description='{"user_id" (the recipient), "task"} with the recipient\'s own number; for '
        'task.deleted the task\'s id, number and title; for reminder.due also "remind_at" and '
        '"late"; list events carry {"user_id", "list": {"id", "name", "owner_id", "role"}} and, '
        'for member events, "member"; document events carry {"user_id", "document_id", '
        '"list_id", "title"}; memory events carry {"user_id", "memory_id", "text"}; '
        'user.deleted carries {"user_id"} alone (the user erased).'
    )


class CalendarFeed(BaseModel):
    url: str = PydanticField(description="The secret feed URL for calendar apps.")
