"""Tasks: TaskBase -> TaskCreate / TaskUpdate / Task(table) / TaskPublic / TasksPublic."""

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field as PydanticField
from pydantic import StringConstraints, model_validator
from pydantic.json_schema import SkipJsonSchema
from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    String,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlmodel import Field, SQLModel

from backend.models._types import (
    Description,
    DueAt,
    OptionalTimestamp,
    Recurrence,
    RemindAt,
    Tags,
    Text,
    Timestamp,
    Title,
)

# "none": no priority given (the default). A value, not NULL, so that a filter, an order
# and a client all read one kind of thing; CalDAV sends it as no PRIORITY (docs/caldav.md).
Priority = Literal["none", "low", "medium", "high"]
StatusFilter = Literal["all", "pending", "completed"]
DueFilter = Literal["overdue", "today", "week"]

MAX_PAGE = 100
MAX_STEPS = 20
TaskNumber = Annotated[int, PydanticField(ge=1, le=999_999_999)]


class TaskBase(SQLModel):
    title: Title
    description: Description | None = None
    priority: Priority = "none"
    tags: Tags = PydanticField(default_factory=list)


_RECURRENCE = (
    "An RFC 5545 RRULE (FREQ=WEEKLY;BYDAY=MO): FREQ DAILY, WEEKLY, MONTHLY or YEARLY with "
    "INTERVAL, BYDAY, BYMONTHDAY, BYMONTH, COUNT, UNTIL. Completing an occurrence creates "
    "the next one."
)
_REMIND_AT = "When to remind; naive values are read in your timezone. Not in the past."


ListRef = Annotated[uuid.UUID, PydanticField(description="A list's id (default: your Inbox).")]
AssigneeId = Annotated[
    Text,
    StringConstraints(min_length=1, max_length=255),
    PydanticField(description="A member of the task's list (a user id)."),
]


class TaskCreate(TaskBase):
    list_id: ListRef | None = None
    assignee_id: AssigneeId | None = None
    due_at: DueAt | None = PydanticField(
        default=None,
        description="ISO 8601 date or date-time; naive values are read in your timezone.",
    )
    recurrence: Recurrence | None = PydanticField(default=None, description=_RECURRENCE)
    remind_at: RemindAt | None = PydanticField(default=None, description=_REMIND_AT)
    parent_id: uuid.UUID | Annotated[int, PydanticField(ge=1, le=999_999_999)] | None = (
        PydanticField(
            default=None,
            description="Make this task a step of that top-level task (its UUID or number).",
        )
    )
    steps: list[Title] = PydanticField(
        default_factory=list,
        max_length=MAX_STEPS,
        description="Titles of steps to create with the task, in order (same transaction).",
    )


class TaskUpdate(SQLModel):
    """A partial update: only the fields sent change; `null` clears an optional field."""

    # Omitted is None here, but `null` is refused, so the schema does not offer it.
    title: Title | SkipJsonSchema[None] = None
    description: Description | None = None
    due_at: DueAt | None = None
    priority: Priority | SkipJsonSchema[None] = None
    tags: Tags | SkipJsonSchema[None] = None
    completed: bool | SkipJsonSchema[None] = None
    list_id: ListRef | SkipJsonSchema[None] = PydanticField(
        default=None, description="Move it (and its steps) to this list."
    )
    assignee_id: AssigneeId | None = PydanticField(
        default=None, description="A member of its list; null: nobody."
    )
    recurrence: Recurrence | None = PydanticField(
        default=None, description=_RECURRENCE + " `null` stops the series."
    )
    remind_at: RemindAt | None = PydanticField(default=None, description=_REMIND_AT)

    @model_validator(mode="after")
    def _required_fields_not_null(self) -> "TaskUpdate":
        for name in ("title", "priority", "tags", "completed", "list_id"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} cannot be null")
        return self


class TaskCompletion(SQLModel):
    completed: bool


class Task(SQLModel, table=True):
    """A task is in a list; who may reach it is who is a member of that list. Its number is
    each reader's own (`TaskNumber`)."""

    __tablename__ = "tasks"
    __table_args__ = (
        Index(  # live tasks by state and due date; a reader's count is read from it alone
            "ix_tasks_list_status_due",
            "list_id",
            "completed",
            "due_at",
            postgresql_where=text("deleted_at IS NULL"),
        ),
        CheckConstraint("priority IN ('none', 'low', 'medium', 'high')", name="ck_tasks_priority"),
        # A step is in its parent's list: the foreign key says so, with the list in it, and
        # moving the task moves its steps (ON UPDATE CASCADE). Deleting a task deletes its
        # steps. That a step has no steps of its own is a trigger of migration 0002
        # (tasks_one_level), and the service checks it first to answer with a clear error.
        UniqueConstraint("list_id", "id", name="uq_tasks_list_id"),
        ForeignKeyConstraint(
            ["list_id", "parent_id"],
            ["tasks.list_id", "tasks.id"],
            name="fk_tasks_parent",
            ondelete="CASCADE",
            onupdate="CASCADE",
        ),
        Index("ix_tasks_list_parent", "list_id", "parent_id"),
        Index("ix_tasks_created_by", "created_by"),
        Index("ix_tasks_assignee", "assignee_id"),
        Index("ux_tasks_previous", "previous_id", unique=True),
        Index(
            "ix_tasks_reminders_due",
            "remind_at",
            postgresql_where=text(
                "remind_at IS NOT NULL AND reminded_at IS NULL AND NOT completed"
                " AND deleted_at IS NULL"
            ),
        ),
        # The trash: a list's, most recently deleted first; and what retention purges.
        Index(
            "ix_tasks_list_trash",
            "list_id",
            "deleted_at",
            postgresql_where=text("deleted_at IS NOT NULL"),
        ),
        Index("ix_tasks_trash_age", "deleted_at", postgresql_where=text("deleted_at IS NOT NULL")),
        CheckConstraint(
            "recurrence IS NULL OR (due_at IS NOT NULL AND series_id IS NOT NULL)",
            name="ck_tasks_repeating_has_due",
        ),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    list_id: uuid.UUID = Field(
        sa_column=Column(
            ForeignKey("lists.id", ondelete="CASCADE", name="fk_tasks_list"), nullable=False
        )
    )
    # Who made it (NULL once they erased their account) and who it is for, if anyone.
    created_by: str | None = Field(
        default=None,
        sa_column=Column(
            String(255), ForeignKey("users.id", ondelete="SET NULL", name="fk_tasks_created_by")
        ),
    )
    assignee_id: str | None = Field(
        default=None,
        sa_column=Column(
            String(255), ForeignKey("users.id", ondelete="SET NULL", name="fk_tasks_assignee")
        ),
    )
    parent_id: uuid.UUID | None = None
    title: str = Field(max_length=200)
    description: str | None = Field(default=None, max_length=2000)
    completed: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default=text("false"))
    )
    completed_at: datetime | None = OptionalTimestamp()
    due_at: datetime | None = OptionalTimestamp()
    priority: str = Field(default="none", max_length=6, sa_column_kwargs={"server_default": "none"})
    tags: list[str] = Field(
        default_factory=list,
        sa_column=Column(ARRAY(String(32)), nullable=False, server_default=text("'{}'")),
    )
    created_at: datetime = Timestamp()
    updated_at: datetime = Timestamp()
    recurrence: str | None = Field(default=None, max_length=500)
    recurrence_text: str | None = Field(default=None, max_length=200)
    series_id: uuid.UUID | None = None
    # Internal: where the rule is counted from, and the occurrence this one follows (unique:
    # at most one successor each).
    series_start: datetime | None = OptionalTimestamp()
    previous_id: uuid.UUID | None = None
    remind_at: datetime | None = OptionalTimestamp()
    reminded_at: datetime | None = OptionalTimestamp()
    # In the trash since then (NULL: not deleted); purged after TRASH_RETENTION_D days.
    deleted_at: datetime | None = OptionalTimestamp()


class TaskPublic(SQLModel):
    id: uuid.UUID
    number: int = PydanticField(description="Your number for it (each member has their own).")
    list_id: uuid.UUID
    assignee_id: str | None = None
    title: str
    description: str | None
    completed: bool
    completed_at: datetime | None
    due_at: datetime | None
    priority: Priority
    tags: list[str]
    created_at: datetime
    updated_at: datetime
    parent_id: uuid.UUID | None
    steps_done: int = 0
    steps_total: int = 0
    recurrence: str | None = PydanticField(default=None, description="An RRULE, or null.")
    recurrence_text: str | None = PydanticField(
        default=None, description='The rule in English ("every Monday").'
    )
    remind_at: datetime | None = None
    reminded_at: datetime | None = PydanticField(
        default=None, description="When its reminder fired."
    )
    series_id: uuid.UUID | None = PydanticField(
        default=None, description="Shared by the occurrences of one repeating task."
    )


class TaskChanged(TaskPublic):
    """A task after a change; when completing it created the next occurrence of a repeating
    task, that one is `next`."""

    next: TaskPublic | None = None


class TaskDetail(TaskPublic):
    """A task read alone: with its steps, in order."""

    steps: list[TaskPublic] = PydanticField(default_factory=list)


class TasksPublic(SQLModel):
    data: list[TaskPublic]
    count: int


class TrashedTask(TaskPublic):
    deleted_at: datetime


class TrashPublic(SQLModel):
    data: list[TrashedTask]
    next_cursor: str | None


class TaskFilters(SQLModel):
    status: StatusFilter = "all"
    q: Text | None = PydanticField(default=None, max_length=200)
    priority: Priority | None = None
    tag: Text | None = PydanticField(default=None, max_length=32)
    due: DueFilter | None = None
    parent: Text | None = PydanticField(
        default=None, max_length=64, description="Only the steps of this task (number or UUID)."
    )
    top_level: bool = PydanticField(default=False, description="Only tasks that are not steps.")
    list: uuid.UUID | None = PydanticField(default=None, description="Only this list's tasks.")
    assignee: Text | None = PydanticField(
        default=None, max_length=255, description="Only tasks assigned to this user id, or `me`."
    )
    limit: int = PydanticField(default=50, ge=1, le=MAX_PAGE)
    offset: int = PydanticField(default=0, ge=0, le=1_000_000)
