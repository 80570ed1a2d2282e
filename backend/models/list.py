"""Lists and who shares them: TodoList, ListMember, ListInvitation (tables) -> ListCreate /
ListUpdate / ListPublic / ListsPublic, MemberPublic / MembersPublic, InvitationCreate /
InvitationPublic; and TaskNumber, each reader's own number for a task they can reach."""

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field as PydanticField
from pydantic import StringConstraints
from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    UniqueConstraint,
    func,
    text,
)
from sqlmodel import Field, SQLModel

from backend.models._types import NotBlank, Text, Timestamp

Role = Literal["owner", "editor", "viewer"]
InvitedRole = Literal["editor", "viewer"]
ListName = Annotated[
    Text, StringConstraints(strip_whitespace=True, min_length=1, max_length=100), NotBlank
]
INBOX = "Inbox"


class TodoList(SQLModel, table=True):
    __tablename__ = "lists"
    __table_args__ = (
        # A name its owner has already, in any case, is refused (409).
        Index("ux_lists_owner_name", "owner_id", func.lower(text("name")), unique=True),
        Index("ux_lists_owner_inbox", "owner_id", unique=True, postgresql_where=text("inbox")),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    owner_id: str = Field(
        sa_column=Column(String(255), ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    )
    name: str = Field(max_length=100)
    # Every user's first list, made on first use: cannot be renamed, shared or deleted.
    inbox: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default=text("false"))
    )
    created_at: datetime = Timestamp()
    updated_at: datetime = Timestamp()


class ListMember(SQLModel, table=True):
    """Who may reach a list's tasks, and how: the owner is a member too."""

    __tablename__ = "list_members"
    __table_args__ = (
        PrimaryKeyConstraint("list_id", "user_id"),
        Index("ix_list_members_user", "user_id", "list_id"),
        CheckConstraint("role IN ('owner', 'editor', 'viewer')", name="ck_list_members_role"),
    )

    list_id: uuid.UUID = Field(
        sa_column=Column(ForeignKey("lists.id", ondelete="CASCADE"), nullable=False)
    )
    user_id: str = Field(
        sa_column=Column(String(255), ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    )
    role: str = Field(max_length=10)
    joined_at: datetime = Timestamp()


class ListInvitation(SQLModel, table=True):
    """A secret to join a list with a role, good once until it expires; only its SHA-256
    is stored."""

    __tablename__ = "list_invitations"
    __table_args__ = (
        Index("ix_list_invitations_list", "list_id"),
        Index("ix_list_invitations_created_by", "created_by"),
        CheckConstraint("role IN ('editor', 'viewer')", name="ck_list_invitations_role"),
    )

    token_hash: str = Field(sa_column=Column(String(64), primary_key=True))
    list_id: uuid.UUID = Field(
        sa_column=Column(ForeignKey("lists.id", ondelete="CASCADE"), nullable=False)
    )
    role: str = Field(max_length=10)
    created_by: str = Field(
        sa_column=Column(String(255), ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    )
    created_at: datetime = Timestamp()
    expires_at: datetime = Field(sa_type=DateTime(timezone=True), nullable=False)


class TaskNumber(SQLModel, table=True):
    """A reader's number for a task: unique among everything that reader can reach, from 1,
    never reused (drawn from their `users.task_seq`). Kept when they lose the task, so a
    member who comes back finds it under the same number."""

    __tablename__ = "task_numbers"
    __table_args__ = (
        PrimaryKeyConstraint("user_id", "task_id"),
        UniqueConstraint("user_id", "number", name="uq_task_numbers_user_number"),
        Index("ix_task_numbers_task", "task_id"),
    )

    user_id: str = Field(
        sa_column=Column(String(255), ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    )
    task_id: uuid.UUID = Field(
        sa_column=Column(ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False)
    )
    number: int = Field(sa_column=Column(Integer, nullable=False))


class ListCreate(SQLModel):
    name: ListName


class ListUpdate(SQLModel):
    name: ListName


class ListPublic(SQLModel):
    id: uuid.UUID
    name: str
    role: Role = PydanticField(description="Your role in it.")
    owner_id: str
    shared: bool = PydanticField(description="Whether anyone besides its owner is a member.")
    inbox: bool = False
    pending_count: int = PydanticField(description="Its pending tasks (not in the trash).")
    created_at: datetime


class ListsPublic(SQLModel):
    data: list[ListPublic]


class MemberPublic(SQLModel):
    user_id: str
    display_name: str | None
    role: Role
    joined_at: datetime


class MembersPublic(SQLModel):
    data: list[MemberPublic]


class MemberUpdate(SQLModel):
    role: InvitedRole


class InvitationCreate(SQLModel):
    role: InvitedRole = "editor"


class InvitationPublic(SQLModel):
    token: str = PydanticField(description="The secret to send; shown once, stored hashed.")
    role: InvitedRole
    expires_at: datetime
