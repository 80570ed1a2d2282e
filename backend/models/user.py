"""Users: created on first sight from a verified token; everything else hangs off them.
Their settings: UserSettingsUpdate / UserSettingsPublic."""

from datetime import date, datetime
from typing import Annotated, Literal

from pydantic import Field as PydanticField
from pydantic import StringConstraints, model_validator
from pydantic.json_schema import SkipJsonSchema
from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Date,
    DateTime,
    Index,
    Integer,
    String,
    text,
)
from sqlmodel import Field, SQLModel

from backend.models._types import NotBlank, Text, Timestamp
from backend.models.chat import Timezone

MAX_INSTRUCTIONS_CHARS = 2000
Confirm = Literal["deletes", "changes", "never"]


class User(SQLModel, table=True):
    __tablename__ = "users"
    __table_args__ = (
        Index("ux_users_calendar_secret", "calendar_secret_hash", unique=True),
        CheckConstraint("confirm IN ('deletes', 'changes', 'never')", name="ck_users_confirm"),
        Index("ix_users_erasing", "erasing_at", postgresql_where=text("erasing_at IS NOT NULL")),
    )

    id: str = Field(sa_column=Column(String(255), primary_key=True))
    email: str | None = Field(default=None, max_length=320)
    name: str | None = Field(default=None, max_length=255)
    timezone: str = Field(default="UTC", max_length=64, sa_column_kwargs={"server_default": "UTC"})
    # Settings the user chose (the token's `name` is refreshed on sign-in; this is not).
    display_name: str | None = Field(default=None, max_length=255)
    instructions: str | None = Field(default=None, max_length=2000)
    model: str | None = Field(default=None, max_length=100)
    # Which of the agent's tool calls wait for the user's yes (NULL: AGENT_CONFIRM_DEFAULT).
    confirm: str | None = Field(default=None, max_length=10)
    # The last task number handed out; only ever grows, so numbers are never reused.
    task_seq: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default=text("0"))
    )
    # Chat rate limit state (GCRA "theoretical arrival time"), shared by all replicas.
    chat_tat: datetime | None = Field(default=None, sa_type=DateTime(timezone=True))
    tokens_day: date | None = Field(default=None, sa_type=Date)
    tokens_used: int = Field(
        default=0, sa_column=Column(BigInteger, nullable=False, server_default=text("0"))
    )
    # The calendar feed's secret, as its SHA-256 (hex); the secret itself is never stored.
    calendar_secret_hash: str | None = Field(default=None, max_length=64)
    # Set while the account is being erased (backend/services/erasure.py): when the erasure
    # last made progress. No event is written for the user meanwhile, and signing in again
    # waits until the row is gone.
    erasing_at: datetime | None = Field(default=None, sa_type=DateTime(timezone=True))
    created_at: datetime = Timestamp()
    updated_at: datetime = Timestamp()


DisplayName = Annotated[
    Text, StringConstraints(strip_whitespace=True, min_length=1, max_length=255), NotBlank
]
Instructions = Annotated[
    Text, StringConstraints(strip_whitespace=True, max_length=MAX_INSTRUCTIONS_CHARS)
]


class UserSettingsUpdate(SQLModel):
    """A partial update: only the fields sent change; `null` returns a field to its default."""

    display_name: DisplayName | None = PydanticField(
        default=None, description="How the assistant addresses you; null: the sign-in name."
    )
    timezone: Timezone | SkipJsonSchema[None] = PydanticField(
        default=None, description="IANA name, e.g. Europe/Berlin."
    )
    instructions: Instructions | None = PydanticField(
        default=None,
        description="Standing preferences for the assistant (at most 2,000 characters), e.g. "
        '"answer in Portuguese". They never override the service\'s own rules.',
    )
    model: Annotated[str, StringConstraints(max_length=100)] | None = PydanticField(
        default=None, description="One of `models`; null: the service's default."
    )
    confirm: Confirm | None = PydanticField(
        default=None,
        description="Which of the agent's tool calls wait for your yes: `deletes` (deleting "
        "tasks, purging the trash), `changes` (anything that changes something) or `never`; "
        "null: the service's default.",
    )

    @model_validator(mode="after")
    def _timezone_not_null(self) -> "UserSettingsUpdate":
        if "timezone" in self.model_fields_set and self.timezone is None:
            raise ValueError("timezone cannot be null")
        return self


class UserSettingsPublic(SQLModel):
    display_name: str | None
    timezone: str
    instructions: str | None
    model: str = PydanticField(description="The model your turns use.")
    models: list[str] = PydanticField(description="The models you may choose from.")
    confirm: Confirm = PydanticField(description="Which of the agent's tool calls wait for you.")
