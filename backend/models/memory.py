"""Memories: short facts a person told the assistant about themselves.
Memory (table) -> MemoryCreate / MemoryUpdate / MemoryPublic / MemoriesPublic."""

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import StringConstraints
from sqlalchemy import CheckConstraint, Column, ForeignKey, Index, String, text
from sqlmodel import Field, SQLModel

from backend.models._types import NotBlank, Text, Timestamp

MAX_MEMORY_CHARS = 500
CreatedBy = Literal["user", "model", "stub"]
MemoryText = Annotated[
    Text,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_MEMORY_CHARS),
    NotBlank,
]


class Memory(SQLModel, table=True):
    """One fact, the person's own: row-level security holds it to them (migration 0019).
    `source_*`: the session and the assistant message whose tool call saved it (undoing
    that turn removes it); NULL for one the person wrote themselves."""

    __tablename__ = "memories"
    __table_args__ = (
        Index("ix_memories_user_created", "user_id", "created_at"),
        Index(
            "ix_memories_source_message",
            "source_message_id",
            postgresql_where=text("source_message_id IS NOT NULL"),
        ),
        CheckConstraint("created_by IN ('user', 'model', 'stub')", name="ck_memories_created_by"),
        CheckConstraint("char_length(text) BETWEEN 1 AND 500", name="ck_memories_text"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    user_id: str = Field(
        sa_column=Column(String(255), ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    )
    text: str = Field(sa_column=Column(String(500), nullable=False))
    created_at: datetime = Timestamp()
    updated_at: datetime = Timestamp()
    created_by: str = Field(max_length=8)
    source_session_id: uuid.UUID | None = None
    source_message_id: uuid.UUID | None = None


class MemoryCreate(SQLModel):
    text: MemoryText


class MemoryUpdate(SQLModel):
    text: MemoryText


class MemorySource(SQLModel):
    session_id: uuid.UUID
    message_id: uuid.UUID | None


class MemoryPublic(SQLModel):
    id: uuid.UUID
    text: str
    created_at: datetime
    updated_at: datetime
    created_by: CreatedBy
    source: MemorySource | None = Field(
        description="The chat turn that saved it; null for one the person wrote themselves."
    )


class MemoriesPublic(SQLModel):
    data: list[MemoryPublic] = Field(description="Newest first.")
