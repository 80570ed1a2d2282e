"""What the session's recent turns say: the tasks just shown or touched, the question the
stub just asked, and the last change it made (to undo it)."""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# (role, content, tool_calls, tool_results), as stored for each message.
HistoryRow = tuple[str, str | None, list[dict[str, Any]] | None, list[dict[str, Any]] | None]

_SHOWN = re.compile(r"^- #(\d{1,9}) ", re.MULTILINE)  # a task line of a reply
MUTATING = frozenset({"add_todo", "update_todo", "complete_todo", "delete_todo"})
ASKED_WHICH = "Which one?"


@dataclass(frozen=True, slots=True)
class Change:
    """One tool call that changed a task, with what the task looked like before."""

    tool: str
    arguments: Mapping[str, Any]
    result: Mapping[str, Any]
    before: Mapping[str, Any] | None


@dataclass(slots=True)
class Context:
    listing: list[int] = field(default_factory=list)  # task numbers, as the last reply showed them
    last_task: int | None = None  # the task "it" means
    last_added: bool = False  # the previous answer added tasks ("and a call to the dentist")
    question_from: str | None = None  # the user message the stub asked "Which one?" about
    last_change: list[Change] = field(default_factory=list)  # the stub's last changing turn


def _todos(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    todos = result.get("todos")
    return [t for t in todos if isinstance(t, dict)] if isinstance(todos, list) else []


def read(history: Sequence[HistoryRow]) -> Context:
    """The context for the next message, from the turns before it (oldest first)."""
    context = Context()
    last_user: str | None = None
    for role, content, calls, results in history:
        if role == "user":
            last_user = content
            continue
        by_id = {r.get("tool_call_id"): r.get("result") for r in results or ()}
        seen: dict[int, Mapping[str, Any]] = {}
        changes: list[Change] = []
        added = False
        for call in calls or ():
            result = by_id.get(call.get("id"))
            if not isinstance(result, dict) or result.get("status") == "error":
                continue
            name = call.get("name")
            arguments = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
            assert isinstance(arguments, dict)
            if name == "list_todos":
                todos = _todos(result)
                seen.update({int(t["number"]): t for t in todos if "number" in t})
            todo = result.get("todo") if name != "delete_todo" else result
            if name in MUTATING and isinstance(todo, dict) and "number" in todo:
                number = int(todo["number"])
                context.last_task = None if name == "delete_todo" else number
                added = added or name == "add_todo"
                if str(call.get("id", "")).startswith("stub_"):
                    changes.append(Change(name, arguments, result, seen.get(number)))
        if changes:
            context.last_change = changes
        context.last_added = added
        shown = [int(n) for n in _SHOWN.findall(content or "")]
        if shown:
            context.listing = shown
        context.question_from = last_user if content and ASKED_WHICH in content else None
    return context
