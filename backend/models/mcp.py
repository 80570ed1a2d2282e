"""What the MCP server at /mcp publishes: its RFC 9728 metadata, and the shapes of the tool
results (the tools' output schemas); and McpRequestState (table), the answered questions."""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic import Field as PydanticField
from sqlalchemy import Column, DateTime, ForeignKey, Index, String
from sqlmodel import Field, SQLModel

from backend.models._types import Timestamp


class McpRequestState(SQLModel, table=True):
    """A sealed `requestState` (an MCP call that asked the user first) that came back with
    the answer: its nonce, kept until the state has expired, so that it works once, on
    whichever replica it arrives."""

    __tablename__ = "mcp_request_states"
    __table_args__ = (
        Index("ix_mcp_request_states_expires_at", "expires_at"),
        Index("ix_mcp_request_states_user", "user_id"),
    )

    nonce: str = Field(sa_column=Column(String(64), primary_key=True))
    user_id: str = Field(
        sa_column=Column(String(255), ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    )
    answered_at: datetime = Timestamp()
    expires_at: datetime = Field(sa_type=DateTime(timezone=True), nullable=False)


class ProtectedResourceMetadata(BaseModel):
    """RFC 9728 OAuth 2.0 Protected Resource Metadata."""

    resource: str = PydanticField(description="The MCP server's URL: the audience of its tokens.")
    # Strings, not URL types: an issuer identifier must be compared exactly, and URL types
    # would add a trailing slash to a bare origin.
    authorization_servers: list[str] | None = PydanticField(
        default=None, description="Issuers of tokens for this resource (JWT_ISSUER)."
    )
    bearer_methods_supported: list[str] = ["header"]
    resource_name: str = "todo-agent"


# The results are described, not closed: a field a tool starts returning (a task's steps)
# must not make its results invalid against the schema clients hold.
class _Result(BaseModel):
    model_config = ConfigDict(extra="allow")


class TodoResult(_Result):
    id: str
    number: int = Field(description="The user's own number for it.")
    title: str
    description: str | None = None
    completed: bool
    due_at: str | None = PydanticField(default=None, description="In the user's timezone.")
    priority: str
    tags: list[str]
    recurrence: str | None = PydanticField(default=None, description="An RRULE, when it repeats.")
    recurrence_text: str | None = PydanticField(default=None, description='"every Monday"')
    remind_at: str | None = PydanticField(default=None, description="In the user's timezone.")


class TodoListResult(_Result):
    todos: list[TodoResult]
    total: int


class TodoChangeResult(_Result):
    status: Literal["created", "updated", "completed", "reopened", "restored"]
    todo: TodoResult
    next_todo: TodoResult | None = PydanticField(
        default=None, description="The next occurrence, created by completing a repeating one."
    )


class TodoDeletedResult(_Result):
    status: Literal["deleted"]
    todo_id: str
    number: int
    title: str


class TrashPurgedResult(_Result):
    status: Literal["purged"]
    todo_id: str | None = PydanticField(
        default=None, description="The task purged, if one was named."
    )
    number: int | None = None
    title: str | None = None
    count: int | None = PydanticField(
        default=None, description="Tasks purged by emptying the trash."
    )


class NotDoneResult(_Result):
    """A call the user was asked about first and did not accept: nothing was changed."""

    status: Literal["declined", "cancelled"]
    summary: str = PydanticField(description='What was asked about: "Delete task 3 “Buy milk”".')
    message: str = PydanticField(description='"Nothing was deleted." or "Nothing was changed."')


class ListResult(_Result):
    id: str
    name: str
    role: Literal["owner", "editor", "viewer"]
    shared: bool
    pending: int


class ListListsResult(_Result):
    lists: list[ListResult]


class ListCreatedResult(_Result):
    status: Literal["created"]
    list: ListResult


class PassageResult(_Result):
    document_id: str
    title: str = PydanticField(description="The document's title.")
    media_type: str = PydanticField(description="The document's media type, as uploaded.")
    heading: str = PydanticField(description="Its heading path, from the document's top.")
    text: str
    score: float


class DocumentSearchResult(_Result):
    passages: list[PassageResult] = PydanticField(description="Best first, at most 5.")


class UserContextResult(_Result):
    name: str | None
    timezone: str
    local_time: str
    weekday: str
    pending: int
    completed: int
    overdue: int
