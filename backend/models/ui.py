"""The Vercel AI SDK's shapes: the body `useChat` posts, and stored turns as UIMessages.

Only what todo-agent reads or writes is declared; a UIMessage part is otherwise whatever
the client sent (it keeps the history itself and takes only the last message).
Plain pydantic models: a UIMessage has a `metadata` field, which SQLModel reserves."""

import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, ValidationError, model_validator

from backend.models.chat import ChatRequest, Timezone

ChatId = Annotated[str, StringConstraints(min_length=1, max_length=255)]

# Checking the answers before the chat's session is looked up: any session id will do.
_SOME_SESSION = uuid.UUID(int=0)


def _is_tool_part(part: dict[str, Any]) -> bool:
    kind = part.get("type")
    return isinstance(kind, str) and (kind.startswith("tool-") or kind == "dynamic-tool")


class UIMessageIn(BaseModel):
    id: str = ""
    role: Literal["system", "user", "assistant"]
    parts: list[dict[str, Any]] = Field(default_factory=list)

    def text(self) -> str:
        return "\n".join(
            part["text"]
            for part in self.parts
            if part.get("type") == "text" and isinstance(part.get("text"), str)
        )

    def tool_call_ids(self) -> frozenset[str]:
        return frozenset(
            part["toolCallId"]
            for part in self.parts
            if _is_tool_part(part) and isinstance(part.get("toolCallId"), str)
        )

    def approval_responses(self) -> list[dict[str, Any]]:
        """The answers in this message: its tool parts in state `approval-responded`, as
        `addToolApprovalResponse` leaves them (`approval: {id, approved, reason?}`)."""
        return [
            {"id": approval.get("id"), "approved": approval.get("approved")}
            | ({"reason": approval["reason"]} if approval.get("reason") is not None else {})
            for part in self.parts
            if _is_tool_part(part)
            and part.get("state") == "approval-responded"
            and isinstance(approval := part.get("approval"), dict)
        ]


class UIChatRequest(BaseModel):
    """What `useChat`'s DefaultChatTransport posts, plus our `timezone` and `approvals`;
    other fields a frontend adds to the body are ignored."""

    id: ChatId = Field(
        description="The chat id: one of the user's session ids continues that session; "
        "any other id names a session of its own for this user, created on first use."
    )
    messages: list[UIMessageIn] = Field(min_length=1, max_length=10_000)
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    messageId: str | None = Field(default=None, max_length=255)
    timezone: Timezone | None = Field(
        default=None, description="IANA name, e.g. Europe/Berlin; remembered for the user."
    )
    temporary: bool = Field(
        default=False,
        description="A temporary turn: nothing is read from or written to the person's "
        "memories, and `remember` is not offered.",
    )
    approvals: Literal["ai-sdk"] | None = Field(
        default=None,
        description="`ai-sdk`: this client speaks the AI SDK 6 tool-approval protocol. A call "
        "that waits for the person's yes streams as a tool part with `tool-approval-request` "
        "(instead of a question in words), and the next request may end with that assistant "
        "message, its tool parts in state `approval-responded`: the turn goes on in the same "
        "message (`tool-output-available` or `tool-output-denied`, then the answer). Leave it "
        "out for `ai` 5, which rejects chunk types it does not know.",
    )

    @model_validator(mode="after")
    def _last_message_is_one_to_answer(self) -> "UIChatRequest":
        # A trailing assistant message is a client's answer to our approval requests (with
        # the opt-in) or else a client-side tool's result, which this service does not take
        # (its tools run on the server); answering the user message before it again would
        # store that message twice.
        if self.continues():
            if not self.messages[-1].approval_responses():
                raise ValueError(
                    "the last message, an assistant message, answers no approval request "
                    "(no tool part in state approval-responded)"
                )
            what = "the approval responses of the last message"
        elif self.messages[-1].role == "user":
            what = "the text of the last user message"
        else:
            raise ValueError(
                "messages must end with the user message to answer (or, with approvals: "
                "ai-sdk, the assistant message that answers approval requests)"
            )
        try:
            self.chat_request(session_id=_SOME_SESSION)
        except ValidationError as invalid:
            problem = invalid.errors()[0]["msg"]
            raise ValueError(f"{what}: {problem}") from None
        return self

    def continues(self) -> bool:
        """The request answers approval requests of its last message, which then goes on."""
        return (
            self.approvals == "ai-sdk"
            and self.trigger == "submit-message"
            and self.messages[-1].role == "assistant"
        )

    def chat_request(self, *, session_id: uuid.UUID | None) -> ChatRequest:
        """The turn this asks for: the last user message answered, or the approval
        responses of the last (assistant) message carried out, in the session."""
        if self.continues():
            return ChatRequest.model_validate(
                {
                    "session_id": session_id,
                    "approvals": self.messages[-1].approval_responses(),
                    "timezone": self.timezone,
                    "temporary": self.temporary,
                }
            )
        return ChatRequest(
            message=self.messages[-1].text(),
            session_id=session_id,
            timezone=self.timezone,
            temporary=self.temporary,
        )


class UIMessagePublic(BaseModel):
    id: str
    role: Literal["user", "assistant"]
    parts: list[dict[str, Any]] = Field(
        description="`text`, `step-start`, and `tool-<name>` parts (state `output-available` "
        "with `input` and `output`, or `output-error` with `errorText`), as streamed. A call "
        "held for the person's yes is in state `approval-requested` (`approval: {id}`) until "
        "answered, then `output-available` or `output-error` (`approval: {id, approved: "
        "true, reason?}`) or `output-denied` (`approval: {id, approved: false, reason?}`); "
        "one that expired unanswered is `output-error`. These are AI SDK 6 states."
    )
    metadata: dict[str, Any] = Field(
        description="session_id; for assistant messages also using_stub and usage."
    )
