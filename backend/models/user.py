"""Users: created on first sight from a verified token; everything else hangs off them."""

from datetime import date, datetime

from sqlalchemy import BigInteger, Column, Date, DateTime, Integer, String, text
from sqlmodel import Field, SQLModel

from backend.models._types import Timestamp


class User(SQLModel, table=True):
    __tablename__ = "users"

    id: str = Field(sa_column=Column(String(255), primary_key=True))
    email: str | None = Field(default=None, max_length=320)
    name: str | None = Field(default=None, max_length=255)
    timezone: str = Field(default="UTC", max_length=64, sa_column_kwargs={"server_default": "UTC"})
    # Settings the user chose (the token's `name` is refreshed on sign-in; this is not).
    display_name: str | None = Field(default=None, max_length=255)
    instructions: str | None = Field(default=None, max_length=2000)
    model: str | None = Field(default=None, max_length=100)
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
    created_at: datetime = Timestamp()
    updated_at: datetime = Timestamp()
