"""What the session's recent turns say: the tasks just shown or touched, and the question
the stub just asked."""

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# (role, content, tool_calls, tool_results), as stored for each message.
HistoryRow = tuple[str, str | None, list[dict[str, Any]] | None, list[dict[str, Any]] | None]

_SHOWN = re.compile(r"^- #(\d{1,9}) ", re.MULTILINE)  # a task line of a reply
MUTATING = frozenset({"add_todo", "update_todo", "complete_todo", "delete_todo", "restore_todo"})
ASKED_WHICH = "Which one?"


@dataclass(slots=True)
class Context:
    listing: list[int] = field(default_factory=list)  # task numbers, as the last reply showed them
    last_task: int | None = None  # the task "it" means
    last_added: bool = False  # the previous answer added tasks ("and a call to the dentist")
    question_from: str | None = None  # the user message the stub asked "Which one?" about


def read(history: Sequence[HistoryRow]) -> Context:
    """The context for the next message, from the turns before it (oldest first)."""
    context = Context()
    last_user: str | None = None
    for role, content, calls, results in history:
        if role == "user":
            last_user = content
            continue
        by_id = {r.get("tool_call_id"): r.get("result") for r in results or ()}
        added = False
        for call in calls or ():
            result = by_id.get(call.get("id"))
            if not isinstance(result, dict) or result.get("status") == "error":
                continue
            name = call.get("name")
            todo = result.get("todo") if name != "delete_todo" else result
            if name in MUTATING and isinstance(todo, dict) and "number" in todo:
                context.last_task = None if name == "delete_todo" else int(todo["number"])
                added = added or name == "add_todo"
        context.last_added = added
        shown = [int(n) for n in _SHOWN.findall(content or "")]
        if shown:
            context.listing = shown
        if len(shown) == 1:  # "what's due tomorrow?", then "move it to 8pm"
            context.last_task = shown[0]
        context.question_from = last_user if content and ASKED_WHICH in content else None
    return context
