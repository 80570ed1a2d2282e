"""Agent sessions (conversations) and their messages."""

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import Field as PydanticField
from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Identity,
    Index,
    Integer,
    String,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

from backend.models._types import OptionalTimestamp, Timestamp, Title

Role = Literal["user", "assistant"]


class Usage(SQLModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    # Of the prompt tokens, those the provider served from its prompt cache.
    cached_tokens: int = 0


def _token_column() -> Any:
    return Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default=text("0")))


class AgentSession(SQLModel, table=True):
    __tablename__ = "agent_sessions"
    __table_args__ = (
        # Scanned backwards for "most recently active first".
        Index("ix_agent_sessions_user_activity", "user_id", "updated_at", "id"),
        # A chat id a client generated (the AI SDK's useChat) names one session per user.
        Index(
            "ux_agent_sessions_user_chat",
            "user_id",
            "chat_id",
            unique=True,
            postgresql_where=text("chat_id IS NOT NULL"),
        ),
        # The sweeper's look for turns whose lease lapsed (services/sweeper.py).
        Index(
            "ix_agent_sessions_lease",
            "lease_expires_at",
            postgresql_where=text("lease_owner IS NOT NULL"),
        ),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    user_id: str = Field(
        sa_column=Column(String(255), ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    )
    title: str = Field(max_length=200)
    chat_id: str | None = Field(default=None, max_length=255)
    created_at: datetime = Timestamp()
    # Last activity: bumped by every turn; sessions are listed by it.
    updated_at: datetime = Timestamp()
    # The turn (each attempt at it its own token) that holds the session. A lease that
    # lapsed still names its turn: another replica's sweeper takes it over and finishes it.
    lease_owner: uuid.UUID | None = None
    lease_expires_at: datetime | None = OptionalTimestamp()
    # The turn that holds (or last held) the lease is temporary: it reads and writes no
    # memory, whichever replica finishes it.
    lease_temporary: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default=text("false"))
    )
    # How many times a turn of this session was taken over: each new attempt numbers its
    # stream's events after those of the attempts before it.
    takeovers: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default=text("0"))
    )
    prompt_tokens: int = _token_column()
    completion_tokens: int = _token_column()
    total_tokens: int = _token_column()
    cached_tokens: int = _token_column()
    # The session's older messages, folded into a short account (services/digest/), and
    # the last message folded into it (0: none); the model gets the messages after it.
    digest: str | None = Field(default=None, sa_type=Text)
    digest_seq: int = Field(
        default=0, sa_column=Column(BigInteger, nullable=False, server_default=text("0"))
    )


class AgentMessage(SQLModel, table=True):
    __tablename__ = "agent_messages"
    __table_args__ = (
        Index("ix_agent_messages_session_seq", "session_id", "seq"),
        # One reply per user message, whichever replica finishes the turn (migration 0013).
        Index(
            "ux_agent_messages_reply_to",
            "reply_to",
            unique=True,
            postgresql_where=text("reply_to IS NOT NULL"),
        ),
        CheckConstraint("role IN ('user', 'assistant')", name="ck_agent_messages_role"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    # Insertion order; several messages can share a created_at, never a seq.
    seq: int | None = Field(
        default=None,
        sa_column=Column(BigInteger, Identity(always=True), nullable=False),
    )
    session_id: uuid.UUID = Field(
        sa_column=Column(ForeignKey("agent_sessions.id", ondelete="CASCADE"), nullable=False)
    )
    user_id: str = Field(sa_column=Column(String(255), nullable=False))
    role: str = Field(max_length=16)
    content: str | None = Field(default=None, sa_type=Text)
    tool_calls: list[dict[str, Any]] | None = Field(default=None, sa_type=JSONB)
    tool_results: list[dict[str, Any]] | None = Field(default=None, sa_type=JSONB)
    using_stub: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default=text("false"))
    )
    prompt_tokens: int | None = Field(default=None, sa_type=Integer)
    completion_tokens: int | None = Field(default=None, sa_type=Integer)
    cached_tokens: int | None = Field(default=None, sa_type=Integer)
    # An assistant message: the user message it answers (None: a regenerated answer, or the
    # continuation of answered approvals, which answer none).
    reply_to: uuid.UUID | None = None
    created_at: datetime = Timestamp()


class SessionPublic(SQLModel):
    id: uuid.UUID
    title: str
    created_at: datetime
    updated_at: datetime
    usage: Usage


class SessionDetail(SessionPublic):
    """One session read alone: also its digest."""

    digest: str | None = PydanticField(
        description="What the session's older messages asked and did, folded into a short "
        "account once the session holds more than AGENT_HISTORY_MESSAGES messages.",
    )


class SessionsPublic(SQLModel):
    data: list[SessionPublic]
    next_cursor: str | None


class SessionUpdate(SQLModel):
    title: Title


class MessagePublic(SQLModel):
    id: uuid.UUID
    role: Role
    content: str | None
    created_at: datetime
    tool_calls: list[dict[str, Any]] = PydanticField(default_factory=list)
    tool_results: list[dict[str, Any]] = PydanticField(default_factory=list)
    using_stub: bool
    usage: Usage | None = None


class MessagesPublic(SQLModel):
    data: list[MessagePublic]
    next_cursor: str | None
