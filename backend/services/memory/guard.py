"""Who may make the assistant believe something about a person: only the person. A
`remember` call in a turn whose user message asked for nothing to be remembered (the
model read an instruction in a shared task, a document, a tool result) waits for the
person's yes, as a delete does; so does every `forget`. The person's message is read by
the stub's own understanding of such requests (stub/memories.py), never by what the model
says it heard."""

from typing import Any

from backend.services.stub.memories import asks_to_remember


def holds(name: str, message: str) -> bool:
    """Whether a call of tool `name`, in a turn whose user message is `message`, waits for
    the person's yes whatever their `confirm` setting."""
    if name == "forget":
        return True
    return name == "remember" and not asks_to_remember(message)


def describe(result: dict[str, Any]) -> str:
    """A remembered or forgotten memory, in the words of a reply the service writes."""
    text = (result.get("memory") or {}).get("text")
    verb = "Remembered" if result.get("status") == "remembered" else "Forgot"
    return f"{verb}: “{text}”."
