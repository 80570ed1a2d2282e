"""The identity provider's webhook: IdentityWebhookMessage (table), the ids of the messages
received, so that a replay is refused."""

from datetime import datetime

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
