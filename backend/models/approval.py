"""Tool calls held for the person's yes: Approval (table) -> PendingApproval / ApprovalAnswer."""

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import Field as PydanticField
from sqlalchemy import CheckConstraint, Column, DateTime, ForeignKey, Index, String, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

from backend.models._types import OptionalTimestamp, Text, Timestamp

ApprovalState = Literal["pending", "approved", "denied", "expired"]


class Approval(SQLModel, table=True):
    """A call the agent wanted to make, stored instead of run: bound to its user, session,
    turn (the assistant message that recorded it) and the exact call. Answered once: a
    conditional UPDATE ... WHERE state = 'pending' takes it."""

    __tablename__ = "approvals"
    __table_args__ = (
        Index(
            "ix_approvals_session_pending",
            "session_id",
            postgresql_where=text("state = 'pending'"),
        ),
        Index("ix_approvals_user", "user_id"),
        # A session deleted deletes its approvals (the cascade looks them up by session).
        Index("ix_approvals_session", "session_id"),
        CheckConstraint(
            "state IN ('pending', 'approved', 'denied', 'expired')", name="ck_approvals_state"
        ),
    )

    id: str = Field(sa_column=Column(String(64), primary_key=True))
    user_id: str = Field(
        sa_column=Column(String(255), ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    )
    session_id: uuid.UUID = Field(
        sa_column=Column(ForeignKey("agent_sessions.id", ondelete="CASCADE"), nullable=False)
    )
    message_id: uuid.UUID
    tool_call_id: str = Field(max_length=255)
    name: str = Field(max_length=64)
    arguments: dict[str, Any] = Field(sa_type=JSONB)
    summary: str = Field(max_length=500)
    state: str = Field(
        default="pending", max_length=10, sa_column_kwargs={"server_default": "pending"}
    )
    reason: str | None = Field(default=None, max_length=500)
    created_at: datetime = Timestamp()
    expires_at: datetime = Field(sa_type=DateTime(timezone=True), nullable=False)
    answered_at: datetime | None = OptionalTimestamp()


class PendingApproval(SQLModel):
    """A call waiting for the person's yes or no."""

    id: str = PydanticField(description="Answer with this id in `approvals`.")
    tool_call_id: str
    name: str
    arguments: dict[str, Any]
    summary: str = PydanticField(description='In plain words: "Delete task 3 “Buy milk”".')


class ApprovalAnswer(SQLModel):
    id: str = PydanticField(min_length=1, max_length=64)
    approved: bool
    reason: Text | None = PydanticField(default=None, max_length=500)
