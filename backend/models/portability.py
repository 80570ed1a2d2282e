"""A person's data as one document (`todo-agent-export/1`): what GET /export writes and
POST /import reads. ExportDocument -> ExportUser, ExportList, ExportTask (ExportStep),
ExportedDocument, ExportSession (ExportMessage, ExportApproval); ImportResult.

Reading is lenient about what it does not know (fields a later version adds are ignored)
and strict about what it keeps: every value is validated as the API validates it, and a
document that refers to something it does not hold (a task in a list it does not list, a
held call of a message it does not have) is refused whole."""

import uuid
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints, model_validator
from pydantic import Field as PydanticField

from backend.models._types import Description, Recurrence, Tags, Text, Title
from backend.models.approval import ApprovalState
from backend.models.chat import Timezone
from backend.models.document import DocumentTitle, MediaType
from backend.models.list import ListName, Role
from backend.models.memory import CreatedBy, MemoryText
from backend.models.session import Role as MessageRole
from backend.models.task import Priority
from backend.models.user import Confirm, DisplayName, Instructions

FORMAT = "todo-agent-export/1"


def _aware(value: datetime) -> datetime:
    """A time without an offset is read as UTC (this service writes every time with one)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


Instant = Annotated[datetime, AfterValidator(_aware)]


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ExportUser(_Part):
    """Who the document was exported for, and their settings (import fills in the settings
    an account has not chosen)."""

    id: str | None = PydanticField(default=None, max_length=255)
    email: str | None = PydanticField(default=None, max_length=320)
    name: str | None = PydanticField(default=None, max_length=255)
    display_name: DisplayName | None = None
    timezone: Timezone | None = None
    instructions: Instructions | None = None
    model: str | None = PydanticField(default=None, max_length=100)
    confirm: Confirm | None = None
    created_at: Instant | None = None
    # Where notifications went (no push endpoint, ntfy URL or code): kept, not imported.
    notifications: dict[str, Any] | None = None


class ExportList(_Part):
    """A list the user owns (`role: owner`), or one shared with them: then only its name and
    their role, which an import cannot bring back (membership is by invitation)."""

    id: uuid.UUID
    name: ListName
    role: Role = "owner"
    inbox: bool = False
    created_at: Instant | None = None
    updated_at: Instant | None = None
    joined_at: Instant | None = None


class ExportStep(_Part):
    id: uuid.UUID
    number: int | None = PydanticField(default=None, description="The user's number for it.")
    title: Title
    description: Description | None = None
    priority: Priority = "none"
    tags: Tags = PydanticField(default_factory=list)
    completed: bool = False
    completed_at: Instant | None = None
    due_at: Instant | None = None
    created_at: Instant | None = None
    updated_at: Instant | None = None
    recurrence: Recurrence | None = None
    recurrence_text: str | None = PydanticField(default=None, description="Read-only.")
    series_id: uuid.UUID | None = None
    series_start: Instant | None = None
    previous_id: uuid.UUID | None = PydanticField(
        default=None, description="The occurrence of its series that this one follows."
    )
    remind_at: Instant | None = None
    reminded_at: Instant | None = None
    deleted_at: Instant | None = PydanticField(default=None, description="In the trash since.")

    @model_validator(mode="after")
    def _repeating_has_due(self) -> "ExportStep":
        if self.recurrence is not None and self.due_at is None:
            raise ValueError("a repeating task needs due_at")
        return self


class ExportTask(ExportStep):
    list_id: uuid.UUID
    steps: list[ExportStep] = PydanticField(default_factory=list)


class MessageUsage(_Part):
    prompt_tokens: int | None = PydanticField(default=None, ge=0, le=2**31 - 1)
    completion_tokens: int | None = PydanticField(default=None, ge=0, le=2**31 - 1)
    cached_tokens: int | None = PydanticField(default=None, ge=0, le=2**31 - 1)


class SessionUsage(_Part):
    prompt_tokens: int = PydanticField(default=0, ge=0)
    completion_tokens: int = PydanticField(default=0, ge=0)
    total_tokens: int = PydanticField(default=0, ge=0)
    cached_tokens: int = PydanticField(default=0, ge=0)


class ExportMessage(_Part):
    id: uuid.UUID
    role: MessageRole
    content: Text | None = None
    created_at: Instant
    tool_calls: list[dict[str, Any]] | None = None
    tool_results: list[dict[str, Any]] | None = None
    using_stub: bool = False
    usage: MessageUsage | None = None


class ExportApproval(_Part):
    """A call the agent held for the person's yes, and how it was answered."""

    id: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    message_id: uuid.UUID
    tool_call_id: Annotated[Text, StringConstraints(max_length=255)]
    name: Annotated[Text, StringConstraints(max_length=64)]
    arguments: dict[str, Any]
    summary: Annotated[Text, StringConstraints(max_length=500)]
    state: ApprovalState
    reason: Annotated[Text, StringConstraints(max_length=500)] | None = None
    created_at: Instant
    expires_at: Instant
    answered_at: Instant | None = None


class ExportSession(_Part):
    id: uuid.UUID
    title: Title
    chat_id: Annotated[Text, StringConstraints(max_length=255)] | None = None
    created_at: Instant | None = None
    updated_at: Instant | None = None
    usage: SessionUsage | None = None
    digest: Annotated[Text, StringConstraints(max_length=20000)] | None = PydanticField(
        default=None, description="What the session's older messages asked and did."
    )
    digest_through: uuid.UUID | None = PydanticField(
        default=None, description="The last of its messages that the digest holds."
    )
    messages: list[ExportMessage] = PydanticField(default_factory=list)
    approvals: list[ExportApproval] = PydanticField(default_factory=list)
    changes: list[dict[str, Any]] = PydanticField(
        default_factory=list,
        description="What each turn changed, for undo (exported; not imported: an imported "
        "conversation's turns cannot be undone).",
    )

    @model_validator(mode="after")
    def _approvals_of_its_messages(self) -> "ExportSession":
        messages = {message.id for message in self.messages}
        if self.digest_through is not None and self.digest_through not in messages:
            raise ValueError(
                f"digest_through {self.digest_through} is not one of the session's messages"
            )
        for approval in self.approvals:
            if approval.message_id not in messages:
                raise ValueError(
                    f"approval {approval.id} is of message {approval.message_id}, which is not "
                    "in its session"
                )
        return self


class ExportedDocument(_Part):
    """A document of one of the person's own lists, as its text."""

    id: uuid.UUID
    list_id: uuid.UUID
    title: DocumentTitle
    media_type: MediaType
    text: Annotated[Text, StringConstraints(min_length=1)]
    created_at: Instant | None = None


class ExportMemory(_Part):
    """A fact the person told the assistant; imported as theirs, without its source."""

    id: uuid.UUID | None = None
    text: MemoryText
    created_at: Instant | None = None
    updated_at: Instant | None = None
    created_by: CreatedBy = "user"


class ExportDocument(_Part):
    """Everything the service holds about one person: their settings, the lists they own
    with all their tasks (steps under their parent, the trash included) and documents, the
    lists shared
    with them (name and role only), and every conversation with each message, tool call
    and result, and the memories. Never a secret; nothing of another person's."""

    format: Literal["todo-agent-export/1"]
    exported_at: Instant | None = None
    user: ExportUser = PydanticField(default_factory=ExportUser)
    lists: list[ExportList] = PydanticField(default_factory=list)
    tasks: list[ExportTask] = PydanticField(default_factory=list)
    documents: list[ExportedDocument] = PydanticField(default_factory=list)
    sessions: list[ExportSession] = PydanticField(default_factory=list)
    memories: list[ExportMemory] = PydanticField(default_factory=list)

    @model_validator(mode="after")
    def _whole(self) -> "ExportDocument":
        """Each id once, and every reference to something the document holds."""
        _unique("list", (item.id for item in self.lists))
        owned = {item.id for item in self.lists if item.role == "owner"}
        if sum(1 for item in self.lists if item.role == "owner" and item.inbox) > 1:
            raise ValueError("more than one Inbox")
        _unique("task", (item.id for task in self.tasks for item in (task, *task.steps)))
        for task in self.tasks:
            if task.list_id not in owned:
                raise ValueError(
                    f"task {task.id} is in list {task.list_id}, which is not one of the "
                    "document's own lists"
                )
        _unique("document", (item.id for item in self.documents))
        for item in self.documents:
            if item.list_id not in owned:
                raise ValueError(
                    f"document {item.id} is in list {item.list_id}, which is not one of the "
                    "document's own lists"
                )
        _unique("session", (session.id for session in self.sessions))
        _unique("message", (m.id for session in self.sessions for m in session.messages))
        _unique("approval", (a.id for session in self.sessions for a in session.approvals))
        return self


def _unique(what: str, ids: Iterable[Any]) -> None:
    repeated = [value for value, count in Counter(ids).items() if count > 1]
    if repeated:
        raise ValueError(f"{what} {repeated[0]} appears more than once")


class ImportResult(BaseModel):
    """What the import added to the account (all of it new: new ids, new numbers)."""

    lists: int
    tasks: int
    documents: int = 0
    sessions: int
    messages: int
    memories: int = 0
