"""CalDAV: AppPassword, DavSignIn, DavCollection, DavItem (tables) -> AppPasswordCreate /
AppPasswordCreated / AppPasswordPublic / AppPasswordsPublic.

A calendar collection is a list; an item is a task (or a step). What CalDAV needs beyond
the task itself lives beside it: each list's change counter (its `getctag` and
`sync-token`), and each item's name, UID, revision (its ETag) and what a client sent that
the service does not model. A trigger on `tasks` (migration 0018) keeps both, so a change
made anywhere (chat, REST, MCP) reaches every client's next sync.
"""

import uuid
from datetime import datetime
from typing import Annotated

from pydantic import Field as PydanticField
from pydantic import StringConstraints
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    text,
)
from sqlmodel import Field, SQLModel

from backend.models._types import NotBlank, OptionalTimestamp, Text, Timestamp

AppPasswordName = Annotated[
    Text, StringConstraints(strip_whitespace=True, min_length=1, max_length=100), NotBlank
]


class AppPassword(SQLModel, table=True):
    """A password for one device's CalDAV client; only its SHA-256 is stored (it is 32
    random bytes, so a fast hash is as safe as a slow one, and verifying it per request
    costs nothing)."""

    __tablename__ = "app_passwords"
    __table_args__ = (Index("ux_app_passwords_user_secret", "user_id", "secret_hash", unique=True),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    user_id: str = Field(
        sa_column=Column(String(255), ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    )
    name: str = Field(max_length=100)
    secret_hash: str = Field(max_length=64)
    read_only: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default=text("false"))
    )
    created_at: datetime = Timestamp()
    last_used_at: datetime | None = OptionalTimestamp()


class DavSignIn(SQLModel, table=True):
    """Wrong passwords given for a user on the DAV routes, so that guessing is slowed on
    every replica alike."""

    __tablename__ = "dav_sign_ins"

    user_id: str = Field(
        sa_column=Column(String(255), ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    )
    failures: int = Field(sa_column=Column(Integer, nullable=False, server_default=text("0")))
    last_failure_at: datetime | None = OptionalTimestamp()
    blocked_until: datetime | None = OptionalTimestamp()


class DavCollection(SQLModel, table=True):
    """A list's change counter: bumped by every change of one of its tasks."""

    __tablename__ = "dav_collections"

    list_id: uuid.UUID = Field(
        sa_column=Column(ForeignKey("lists.id", ondelete="CASCADE"), primary_key=True)
    )
    revision: int = Field(sa_column=Column(BigInteger, nullable=False))


class DavItem(SQLModel, table=True):
    """A task as a CalDAV resource of its list, or (deleted) the tombstone of one that left
    it (trashed, purged, moved), which `sync-collection` reports as gone."""

    __tablename__ = "dav_items"
    __table_args__ = (
        PrimaryKeyConstraint("list_id", "name"),
        Index("ix_dav_items_list_revision", "list_id", "revision"),
        Index("ix_dav_items_task", "task_id", "list_id"),
        Index(
            "ux_dav_items_list_uid",
            "list_id",
            "uid",
            unique=True,
            postgresql_where=text("NOT deleted"),
        ),
    )

    list_id: uuid.UUID = Field(
        sa_column=Column(ForeignKey("lists.id", ondelete="CASCADE"), nullable=False)
    )
    name: str = Field(max_length=255)
    # NULL once the task is gone for good: the row is then only a tombstone.
    task_id: uuid.UUID | None = None
    uid: str = Field(max_length=255)
    revision: int = Field(sa_column=Column(BigInteger, nullable=False))
    deleted: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default=text("false"))
    )
    # The client's properties and alarms the service does not model, as iCalendar lines.
    extra: str | None = None


class AppPasswordCreate(SQLModel):
    name: AppPasswordName = PydanticField(description='Which device it is for ("iPhone").')
    read_only: bool = PydanticField(default=False, description="It may read but not change.")


class AppPasswordPublic(SQLModel):
    id: uuid.UUID
    name: str
    username: str = PydanticField(description="What to type as the CalDAV user name.")
    read_only: bool
    created_at: datetime
    last_used_at: datetime | None


class AppPasswordCreated(SQLModel):
    """A new app password: `password` is shown this once."""

    id: uuid.UUID
    name: str
    username: str
    password: str
    read_only: bool
    created_at: datetime


class AppPasswordsPublic(SQLModel):
    data: list[AppPasswordPublic]
