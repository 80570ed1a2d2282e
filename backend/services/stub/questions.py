"""List requests and questions about the list: "what's pending?", "anything overdue?",
"what do I have tomorrow?", "what's most urgent?", "how many tasks do I have left?".

A message is a list request when it asks ("what", "show", "any", ...) about the list's
words, or consists of nothing else ("pending", "my todo list"); the word lists below say
which filter and order each word asks for.
"""

import re
from itertools import pairwise

from backend.models.task import DueFilter, Priority, StatusFilter
from backend.services.stub.commands import ListTasks

_WORD = re.compile(r"[a-z0-9#'-]+")

# What a list request sounds like.
_LIST_CUES = frozenset(
    {
        "show", "list", "display", "view", "see", "get", "give", "tell", "what", "what's",
        "whats", "which", "how", "do", "does", "any", "anything", "are", "is", "have", "print",
        "check", "review", "read", "fetch", "open", "am", "where", "which's",
    }
)  # fmt: skip
_ITEMS = frozenset(
    {
        "task", "tasks", "todo", "todos", "to-do", "to-dos", "list", "items", "item",
        "reminders", "everything", "agenda", "things", "stuff", "plate",
    }
)  # fmt: skip
_PENDING = frozenset(
    {
        "pending", "open", "outstanding", "remaining", "incomplete", "unfinished",
        "uncompleted", "undone", "left", "still", "active", "due",
    }
)  # fmt: skip
_COMPLETED = frozenset(
    {"completed", "complete", "done", "finished", "accomplished", "closed", "checked"}
)
_NEGATIONS = frozenset(
    {
        "not", "haven't", "havent", "hasn't", "hasnt", "isn't", "isnt", "aren't", "arent",
        "didn't", "didnt", "don't", "dont",
    }
)  # fmt: skip
_OVERDUE = frozenset({"overdue", "late", "behind", "missed", "slipped"})
_TOMORROW = frozenset({"tomorrow", "tmrw", "tomorrow's"})
_URGENT = frozenset({"urgent", "urgently", "pressing", "first", "next", "priority", "important"})
_MOST = frozenset({"most", "first", "next", "top", "start", "biggest"})
_HIGH = frozenset({"high", "important", "urgent"})
_LOW = frozenset({"low"})
_TODAY = frozenset({"today", "tonight", "today's"})
_WEEK = frozenset({"week", "week's"})
_LIST_FILLERS = frozenset({"my", "all", "the", "of", "me", "i", "and", "this", "for", "ones"})
# A message of only these words is a list request: "pending", "my todo list", "all tasks".
_LIST_ONLY_WORDS = (
    _ITEMS | (_PENDING - {"due"}) | _COMPLETED | _OVERDUE | _TODAY | _WEEK | _LIST_FILLERS
)


# "on the shopping list", "in my work list", "on groceries": which of the user's lists a
# question may be about (the executor knows whether the user has one of that name).
_NAME = r"[\w'&-]+(?:\s+[\w'&-]+){0,3}?"
_NAMED_LIST = re.compile(
    rf"\b(?:on|in|from|of)\s+(?:the\s+|my\s+|our\s+)?(?P<name>{_NAME})(?:\s+list)?\s*\??$"
    rf"|\b(?:the|my|our)\s+(?P<name2>{_NAME})\s+list\s*\??$",
    re.IGNORECASE,
)


def list_request(text: str) -> ListTasks | None:
    words = _WORD.findall(text.lower())
    if not words:
        return None
    said = set(words)
    pending_phrase = any(a == "to" and b == "do" for a, b in pairwise(words))
    topics = _ITEMS | _PENDING | _COMPLETED | _OVERDUE | _TODAY | _TOMORROW | _WEEK | _URGENT
    asked = words[0] in _LIST_CUES and bool(said & topics)
    if not (asked or pending_phrase or all(w in _LIST_ONLY_WORDS for w in words)):
        return None
    done = bool(said & _COMPLETED)
    pending = pending_phrase or bool(said & _PENDING)
    status: StatusFilter = "all"
    if done and said & _NEGATIONS:
        status = "pending"
    elif done != pending:
        status = "completed" if done else "pending"
    due: DueFilter | None = None
    if said & _OVERDUE:
        due = "overdue"
    elif said & _TODAY:
        due = "today"
    elif said & _WEEK:
        due = "week"
    question = words[0] in ("what", "what's", "whats", "which", "how", "do", "does", "am", "any")
    urgent_first = bool(said & _MOST and said & _URGENT) or bool(said & {"most", "urgent"})
    priority: Priority | None = None
    if "priority" in said or (said & _HIGH and not urgent_first and words[0] == "which"):
        priority = "low" if said & _LOW else "high" if said & _HIGH else None
    if question and (due or said & _TOMORROW or urgent_first or priority or "many" in said):
        status = "completed" if status == "completed" else "pending"
    named = _NAMED_LIST.search(text)
    return ListTasks(
        status,
        due,
        tomorrow=bool(said & _TOMORROW) and due is None,
        priority=priority,
        urgent_first=urgent_first,
        count="many" in said and words[0] == "how",
        list=(named["name"] or named["name2"]) if named else None,
    )
