"""Idempotency keys: a retried request gets the first answer instead of a second effect."""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Column, DateTime, Index, PrimaryKeyConstraint, String
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

from backend.models._types import OptionalTimestamp, Timestamp


class IdempotencyKey(SQLModel, table=True):
    __tablename__ = "idempotency_keys"
    __table_args__ = (
        PrimaryKeyConstraint("user_id", "key"),
        Index("ix_idempotency_keys_expires_at", "expires_at"),
    )

    user_id: str = Field(sa_column=Column(String(255), nullable=False))
    key: str = Field(sa_column=Column(String(255), nullable=False))
    # Which endpoint and body the key was first used with.
    request_hash: str = Field(max_length=64)
    status_code: int | None = None
    response: dict[str, Any] | None = Field(default=None, sa_type=JSONB)
    # While the first request runs; past it, a crashed request's key can be taken over.
    locked_until: datetime | None = OptionalTimestamp()
    # The user message a chat turn stored: the key names that turn until it is answered,
    # whichever replica finishes it.
    message_id: uuid.UUID | None = None
    created_at: datetime = Timestamp()
    expires_at: datetime = Field(sa_type=DateTime(timezone=True), nullable=False)
