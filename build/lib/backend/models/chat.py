"""The chat turn's request and response."""

import uuid
from datetime import datetime
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, AliasChoices, Field, StringConstraints, model_validator
from sqlmodel import SQLModel

from backend.models._types import NotBlank, Text
from backend.models.session import Usage

MAX_MESSAGE_CHARS = 10_000


def _iana_timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ValueError(f"unknown IANA timezone: {value!r}") from error
    return value


Timezone = Annotated[
    str, StringConstraints(min_length=1, max_length=64), AfterValidator(_iana_timezone)
]


class ChatRequest(SQLModel):
    message: Annotated[
        Text, StringConstraints(min_length=1, max_length=MAX_MESSAGE_CHARS), NotBlank
    ]
    session_id: uuid.UUID | None = Field(
        default=None,
        validation_alias=AliasChoices("session_id", "conversation_id"),
        description="Continue this session; null starts a new one. Alias: conversation_id.",
    )
    timezone: Timezone | None = Field(
        default=None, description="IANA name, e.g. Europe/Berlin; remembered for the user."
    )

    @model_validator(mode="before")
    @classmethod
    def _either_id(cls, data: Any) -> Any:
        # {"session_id": null, "conversation_id": "..."} continues that conversation.
        if isinstance(data, dict) and data.get("session_id") is None:
            data = {k: v for k, v in data.items() if k != "session_id"}
        return data


class ToolCallPublic(SQLModel):
    id: str
    name: str
    arguments: dict[str, Any] | str


class ToolResultPublic(SQLModel):
    tool_call_id: str
    name: str
    result: dict[str, Any]


class ChatResponse(SQLModel):
    session_id: uuid.UUID
    conversation_id: uuid.UUID
    message_id: uuid.UUID
    response: str
    timestamp: datetime
    tool_calls: list[ToolCallPublic]
    tool_results: list[ToolResultPublic]
    using_stub: bool
    usage: Usage
