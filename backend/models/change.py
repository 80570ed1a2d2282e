"""What a chat turn changed, recorded as it happened, so the turn can be undone:
TaskChange (one row per changed task per change) -> UndoChange / UndoResult."""

import uuid
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import BigInteger, Column, ForeignKey, Identity, Index, String, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

from backend.models._types import OptionalTimestamp, Timestamp

ChangeAction = Literal["created", "updated", "completed", "reopened", "deleted", "restored"]
UndoAction = Literal["removed", "reverted", "reopened", "completed", "restored", "deleted"]


class TaskChange(SQLModel, table=True):
    """Written by the `tasks_record_change` trigger (migration 0006) in the transaction of
    the change, while a turn's tool call runs (`todo_agent.turn` is set): the task's whole
    row before (NULL for a task the turn created) and its visible state after."""

    __tablename__ = "task_changes"
    __table_args__ = (
        # The session's turns that can still be undone, newest last.
        Index(
            "ix_task_changes_session",
            "session_id",
            "id",
            postgresql_where=text("undone_at IS NULL"),
        ),
        Index("ix_task_changes_message", "message_id"),
        # A session deleted deletes its records, undone or not (the cascade's lookup).
        Index("ix_task_changes_session_all", "session_id"),
        Index("ix_task_changes_user", "user_id"),
    )

    id: int = Field(sa_column=Column(BigInteger, Identity(always=True), primary_key=True))
    user_id: str = Field(
        sa_column=Column(String(255), ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    )
    session_id: uuid.UUID = Field(
        sa_column=Column(ForeignKey("agent_sessions.id", ondelete="CASCADE"), nullable=False)
    )
    # The assistant message of the turn (its tool calls' record).
    message_id: uuid.UUID
    task_id: uuid.UUID
    action: str = Field(max_length=16)
    before: dict[str, Any] | None = Field(default=None, sa_type=JSONB)
    after: dict[str, Any] | None = Field(default=None, sa_type=JSONB)
    created_at: datetime = Timestamp()
    undone_at: datetime | None = OptionalTimestamp()


class UndoChange(SQLModel):
    task_id: uuid.UUID
    number: int
    title: str
    action: UndoAction


class UndoResult(SQLModel):
    message_id: uuid.UUID
    changes: list[UndoChange]
    summary: str
