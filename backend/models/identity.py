"""The identity provider's webhook: IdentityWebhookMessage (table), the ids of the messages
received, so that a replay is refused; IdentityEvent, what a message says."""

from datetime import datetime
from typing import Any

from pydantic import BaseModel
from pydantic import Field as PydanticField
from sqlalchemy import Column, Index, String
from sqlmodel import Field, SQLModel

from backend.models._types import Timestamp


class IdentityWebhookMessage(SQLModel, table=True):
    """A webhook message (`webhook-id`, Clerk's `svix-id`) taken in; kept past the time its
    provider may still retry it, then pruned by the upkeep loop."""

    __tablename__ = "identity_webhook_messages"
    __table_args__ = (Index("ix_identity_webhook_messages_received_at", "received_at"),)

    id: str = Field(sa_column=Column(String(255), primary_key=True))
    received_at: datetime = Timestamp()


class IdentityEvent(BaseModel):
    """An identity provider's event, as Clerk sends them: `{"type", "data": {"id", ...}}`."""

    type: str = PydanticField(max_length=100)
    data: dict[str, Any] = PydanticField(default_factory=dict)


class DeletedUser(BaseModel):
    """`data` of a `user.deleted` event: the user's id (the `sub` of their tokens)."""

    id: str = PydanticField(min_length=1, max_length=255)
