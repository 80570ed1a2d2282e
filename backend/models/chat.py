"""The chat turn's request and response."""

import uuid
from datetime import datetime
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, AliasChoices, Field, StringConstraints, model_validator
from sqlmodel import SQLModel

from backend.models._types import NotBlank, Text
from backend.models.approval import ApprovalAnswer, PendingApproval
from backend.models.session import Usage

MAX_MESSAGE_CHARS = 10_000
MAX_APPROVALS = 20


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
    message: (
        Annotated[Text, StringConstraints(min_length=1, max_length=MAX_MESSAGE_CHARS), NotBlank]
        | None
    ) = Field(
        default=None,
        description="What the person says. Optional only when `approvals` answers held calls.",
    )
    session_id: uuid.UUID | None = Field(
        default=None,
        validation_alias=AliasChoices("session_id", "conversation_id"),
        description="Continue this session; null starts a new one. Alias: conversation_id.",
    )
    timezone: Timezone | None = Field(
        default=None, description="IANA name, e.g. Europe/Berlin; remembered for the user."
    )
    temporary: bool = Field(
        default=False,
        description="A temporary turn: nothing is read from or written to the person's "
        "memories, and `remember` is not offered.",
    )
    approvals: list[ApprovalAnswer] | None = Field(
        default=None,
        max_length=MAX_APPROVALS,
        description="Answers to the session's held tool calls (`pending_approvals` of the last "
        "answer): an approved call runs exactly as it was stored, a denied one is reported to "
        "the agent, and the turn goes on.",
    )

    @model_validator(mode="before")
    @classmethod
    def _either_id(cls, data: Any) -> Any:
        # {"session_id": null, "conversation_id": "..."} continues that conversation.
        if isinstance(data, dict) and data.get("session_id") is None:
            data = {k: v for k, v in data.items() if k != "session_id"}
        return data

    @model_validator(mode="after")
    def _something_to_answer(self) -> "ChatRequest":
        if self.message is None and not self.approvals:
            raise ValueError("send a message, or approvals that answer held tool calls")
        if self.approvals and self.session_id is None:
            raise ValueError("approvals answer held calls of a session: give its session_id")
        if self.approvals and len({a.id for a in self.approvals}) < len(self.approvals):
            raise ValueError("each approval may be answered once")
        return self


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
    pending_approvals: list[PendingApproval] = Field(
        default_factory=list,
        description="Tool calls held for the person's yes; answer them with `approvals` in the "
        "next request to this session (or a plain yes / no).",
    )
