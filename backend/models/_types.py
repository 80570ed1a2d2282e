"""Column types and small validated types shared by the model families."""

from datetime import UTC, date, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, StringConstraints
from pydantic import Field as PydanticField
from sqlalchemy import DateTime, func
from sqlmodel import Field


def utcnow() -> datetime:
    return datetime.now(UTC)


def Timestamp() -> Any:
    """A NOT NULL timestamptz column that defaults to now(), in Python and on the server."""
    return Field(
        default_factory=utcnow,
        sa_type=DateTime(timezone=True),
        nullable=False,
        sa_column_kwargs={"server_default": func.now()},
    )


def OptionalTimestamp() -> Any:
    return Field(default=None, sa_type=DateTime(timezone=True))


def _storable(value: str) -> str:
    """PostgreSQL text holds neither NUL nor unpaired surrogates; refuse them as bad input."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as invalid:
        raise ValueError("must be valid Unicode text") from invalid
    return value


Text = Annotated[str, AfterValidator(_storable)]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


def _date_if_date_only(value: object) -> object:
    # "2026-11-22" is a date (due by the end of that day), not midnight.
    if isinstance(value, str) and len(value) == 10:
        return date.fromisoformat(value)
    return value


Title = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
Description = Annotated[str, StringConstraints(max_length=2000)]


def _normalize_tag(value: object) -> object:
    return value.strip().lstrip("#").strip().lower() if isinstance(value, str) else value


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


Tag = Annotated[
    Text, BeforeValidator(_normalize_tag), StringConstraints(min_length=1, max_length=32)
]
NotBlank = AfterValidator(_not_blank)
Tags = Annotated[list[Tag], PydanticField(max_length=10), AfterValidator(_unique)]


def _convertible(value: datetime | date) -> datetime | date:
    # Read in a timezone and converted to UTC, a value on the first or last day Python can
    # hold would move out of its range.
    day = value.date() if isinstance(value, datetime) else value
    if not date.min < day < date.max:
        raise ValueError("must be between 0001-01-02 and 9999-12-30")
    return value


# A due date or date-time; naive values are read in the user's timezone by the service.
DueAt = Annotated[
    datetime | date, BeforeValidator(_date_if_date_only), AfterValidator(_convertible)
]


def _rule(value: str) -> str:
    from backend.services.recurrence import normalize_rule  # a pure function, no I/O

    return normalize_rule(value)


# An RFC 5545 RRULE value ("FREQ=WEEKLY;BYDAY=MO", with or without "RRULE:"), kept in
# canonical form; what is not allowed is refused with a message naming it.
Recurrence = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=500),
    AfterValidator(_rule),
]
# When a reminder fires; a naive value is read in the user's timezone by the service.
RemindAt = Annotated[datetime, AfterValidator(_convertible)]
