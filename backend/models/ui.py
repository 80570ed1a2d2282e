"""The Vercel AI SDK's shapes: the body `useChat` posts, and stored turns as UIMessages.

Only what todo-agent reads or writes is declared; a UIMessage part is otherwise whatever
the client sent (it keeps the history itself and takes only the last user message).
Plain pydantic models: a UIMessage has a `metadata` field, which SQLModel reserves."""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, ValidationError, model_validator

from backend.models.chat import ChatRequest, Timezone

ChatId = Annotated[str, StringConstraints(min_length=1, max_length=255)]


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


class UIChatRequest(BaseModel):
    """What `useChat`'s DefaultChatTransport posts, plus our `timezone`; other fields a
    frontend adds to the body are ignored."""

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

    @model_validator(mode="after")
    def _last_user_message_is_a_chat_message(self) -> "UIChatRequest":
        # A trailing assistant message would be a client-side tool's result, which this
        # service does not take (its tools run on the server); answering the user message
        # before it again would store that message twice.
        if self.messages[-1].role != "user":
            raise ValueError("messages must end with the user message to answer")
        try:
            ChatRequest(message=self.last_user_text())
        except ValidationError as invalid:
            problem = invalid.errors()[0]["msg"]
            raise ValueError(f"the text of the last user message: {problem}") from None
        return self

    def last_user_text(self) -> str:
        """The text of the last message, a user's: the only one the server takes."""
        return self.messages[-1].text()


class UIMessagePublic(BaseModel):
    id: str
    role: Literal["user", "assistant"]
    parts: list[dict[str, Any]] = Field(
        description="`text`, `step-start`, and `tool-<name>` parts (state `output-available` "
        "with `input` and `output`, or `output-error` with `errorText`), as streamed."
    )
    metadata: dict[str, Any] = Field(
        description="session_id; for assistant messages also using_stub and usage."
    )
