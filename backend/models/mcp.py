"""What the MCP server at /mcp publishes: its RFC 9728 metadata, and the shapes of the tool
results (the tools' output schemas)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ProtectedResourceMetadata(BaseModel):
    """RFC 9728 OAuth 2.0 Protected Resource Metadata."""

    resource: str = Field(description="The MCP server's URL: the audience of its tokens.")
    # Strings, not URL types: an issuer identifier must be compared exactly, and URL types
    # would add a trailing slash to a bare origin.
    authorization_servers: list[str] | None = Field(
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
    due_at: str | None = Field(default=None, description="In the user's timezone.")
    priority: str
    tags: list[str]
    recurrence: str | None = Field(default=None, description="An RRULE, when it repeats.")
    recurrence_text: str | None = Field(default=None, description='"every Monday"')
    remind_at: str | None = Field(default=None, description="In the user's timezone.")


class TodoListResult(_Result):
    todos: list[TodoResult]
    total: int


class TodoChangeResult(_Result):
    status: Literal["created", "updated", "completed", "reopened", "restored"]
    todo: TodoResult
    next_todo: TodoResult | None = Field(
        default=None, description="The next occurrence, created by completing a repeating one."
    )


class TodoDeletedResult(_Result):
    status: Literal["deleted"]
    todo_id: str
    number: int
    title: str


class TrashPurgedResult(_Result):
    status: Literal["purged"]
    todo_id: str | None = Field(default=None, description="The task purged, if one was named.")
    number: int | None = None
    title: str | None = None
    count: int | None = Field(default=None, description="Tasks purged by emptying the trash.")


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


class UserContextResult(_Result):
    name: str | None
    timezone: str
    local_time: str
    weekday: str
    pending: int
    completed: int
    overdue: int
