"""Phrasing: every sentence the stub says, and how a task is shown in one."""

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from backend.services.documents.sections import HEADING_JOINER

EXAMPLES = '"Add a task to buy milk", "Show my tasks", "Mark task 2 as done" or "Delete task 3"'
DIDNT_UNDERSTAND = f"Sorry, I didn't understand that. Try {EXAMPLES}."
TOO_LONG = f"That is too long for me to follow. Try a short command, like {EXAMPLES}."
WELCOME = "You're welcome! Anything else?"
LEFT_AS_IS = "OK, I left your tasks as they are."
HELP = (
    "I can manage your todo list. Try:\n"
    '- "Add a task to buy milk tomorrow" or "add apples, pears and flour"\n'
    '- "Dentist next Tuesday at 3pm p1 #health" or "Remind me to water the plants every other'
    ' Thursday at 6pm"\n'
    '- "Show my tasks", "What\'s pending?", "What do I have this week?" or "Anything overdue?"\n'
    '- "Mark task 2 as done", "I emailed Jo" or "Reopen task 2"\n'
    '- "Rename task 1 to Call mom" or "Move task 1 to Friday"\n'
    '- "Delete task 3" or "Delete the dentist task" (to the trash: "What did I delete?", '
    '"Restore task 3", "Undo")\n'
    '- "Plan the move: pack, book a van, clean" or "What are the steps for the move?"\n'
    '- "What does my packing list say about passports?" or "Make tasks from my moving '
    'checklist"'
)
ADD_EXAMPLE = '"Add a task to buy milk"'
ASK_WHAT = f"What should the task say? For example: {ADD_EXAMPLE}."
ASK_REMIND_WHAT = 'What should I remind you about? For example: "Remind me to call mom at 5".'
SHOW_HINT = 'Say "Show my tasks" to see them with their numbers.'
PLAN_NEEDS_MODEL = (
    "Suggesting steps needs the AI model, which isn't available right now. Tell me the steps "
    'and I\'ll add them, for example: "Plan {title}: first step, second step, third step".'
)
MAX_ECHO = 60
NO_DOCUMENTS = (
    "You have no documents yet. Add a note, a checklist or minutes to a list first (on the "
    'page), then ask "What does my packing list say about passports?" or "Make tasks from my '
    'moving checklist".'
)
UNDO_HINT = '(Say "undo" to take it back.)'
REMEMBER_HINT = 'Tell me, for example: "Remember that my gate code is 4711".'
NOTHING_REMEMBERED = f"I don't remember anything about you yet. {REMEMBER_HINT}"
MAX_QUOTED_LINES = 12


def clean(text: str, *, limit: int = 200) -> str:
    """One line of at most `limit` characters: stored text never breaks a reply's layout."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shorten(text: str) -> str:
    return clean(text.strip(" '\""), limit=MAX_ECHO)


def title(todo: Mapping[str, Any]) -> str:
    """A task's title for a reply, without a doubled full stop."""
    return clean(str(todo.get("title") or "")).rstrip(".")


def due(todo: Mapping[str, Any], field: str = "due_at") -> str | None:
    value = todo.get(field)
    if not isinstance(value, str) or len(value) < 10:
        return None
    # A date-only due date is stored as the end of that day.
    return value[:10] if value[11:16] in ("", "23:59") else f"{value[:10]} {value[11:16]}"


def day(todo: Mapping[str, Any]) -> str:
    """ "Monday Dec 7", "Thursday Dec 10 at 18:00": when a task is due, in words."""
    value = todo.get("due_at")
    if not isinstance(value, str):
        return "no set day"
    when = datetime.fromisoformat(value)
    at = "" if value[11:16] in ("", "23:59") else f" at {value[11:16]}"
    return f"{when:%A %b} {when.day}{at}"


def extras(todo: Mapping[str, Any]) -> str:
    notes = []
    if todo.get("priority") in ("high", "medium", "low"):
        notes.append(f"{todo['priority']} priority")
    if when := due(todo):
        notes.append(f"due {when}")
    if repeats := todo.get("recurrence_text"):
        notes.append(clean(str(repeats), limit=60))
    if reminder := due(todo, "remind_at"):
        notes.append(f"reminder {reminder}")
    if tags := todo.get("tags"):
        notes.append(" ".join(f"#{clean(str(tag), limit=32)}" for tag in tags))
    if todo.get("steps_total"):
        notes.append(f"{todo.get('steps_done', 0)}/{todo['steps_total']} steps done")
    return f" ({', '.join(notes)})" if notes else ""


def line(todo: Mapping[str, Any], *, show_done: bool, overdue: bool = False) -> str:
    done = " (done)" if show_done and todo.get("completed") else ""
    late = " (overdue)" if overdue else ""
    return f"- #{todo.get('number')} {title(todo)}{done}{late}{extras(todo)}"


def count(n: int, noun: str = "task") -> str:
    return f"{n} {noun if n == 1 else noun + 's'}"


def added(todos: Sequence[Mapping[str, Any]]) -> str:
    if len(todos) == 1:
        todo = todos[0]
        return f"Added task {todo.get('number')}: {title(todo)}{extras(todo)}."
    lines = [line(todo, show_done=False) for todo in todos]
    return "\n".join([f"Added {count(len(todos))}:", *lines])


MAX_CHOICES = 10


def named(text: str) -> str:
    """A document's or section's name in a reply: “Moving checklist”."""
    return f"\u201c{clean(text, limit=100)}\u201d"


def source(title: str, heading: str) -> str:
    """Where a passage is: its document, then its heading path, "“Moving” \u203a Week before" (a
    path that starts with the title, the document's first heading, does not say it twice)."""
    path = [part for part in heading.split(HEADING_JOINER) if part.strip()]
    if path and path[0].strip() == title.strip():
        path = path[1:]
    return HEADING_JOINER.join([named(title), *(clean(part, limit=100) for part in path)])


def quote(text: str) -> str:
    """A passage quoted line by line: its lines can never read as a reply's own (a task
    line "- #3 ..." is what the stub's context looks for)."""
    lines = [clean(line, limit=300) for line in text.splitlines() if line.strip()]
    if len(lines) > MAX_QUOTED_LINES:
        lines = [*lines[:MAX_QUOTED_LINES], "\u2026"]
    return "\n".join(f"> {line}" for line in lines)
