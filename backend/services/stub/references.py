"""How a message names one of the user's tasks: the words of a reference, and the task
numbers said outright ("task 3", "#3", "task four", a UUID). Shared by `understanding`
(does this clearly name a task?) and `resolver` (which task is it?)."""

import re
from collections.abc import Sequence

from backend.services.stub import entities

# "the meeting task", "task number 3", "the one about taxes".
DETERMINERS = frozenset({"the", "my", "a", "an", "that", "this", "our"})
NOUNS = frozenset(
    {"task", "todo", "to-do", "item", "number", "no", "num", "reminder", "one", "entry"}
)
LINKS = frozenset(
    {"about", "called", "named", "titled", "for", "re", "regarding", "saying", "with"}
)
PRONOUNS = frozenset({"it", "that", "this", "one", "them"})
# Words that name several tasks: "all", "every task", "these".
MANY_FIRST = frozenset(
    {"all", "every", "everything", "each", "both", "them", "these", "those", "completed", "done"}
)
MANY_ANY = frozenset({"tasks", "todos", "to-dos", "items", "reminders"})
NUMBER = re.compile(r"#?(\d{1,9})")
_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.I)
# Nouns after which a number word is a task number: "task four", "number two".
_NUMBER_NOUNS = frozenset({"task", "todo", "item", "number", "no", "num"})


def words_of(ref: str) -> list[str]:
    return [w for w in (t.strip("'\".,;:!?()") for t in ref.split(" ")) if w]


def skip(words: Sequence[str], start: int, skippable: frozenset[str]) -> int:
    while start < len(words) and words[start].lower() in skippable:
        start += 1
    return start


def explicit_id(ref: str) -> str | None:
    """The todo_id for a task named by number or UUID, else None."""
    words = words_of(ref)
    if not words:
        return None
    start = skip(words, 0, DETERMINERS)
    start = min(skip(words, start, NOUNS), len(words) - 1)  # "task one": one is a number
    if len(words) - start != 1:
        return None
    word = words[start]
    if match := NUMBER.fullmatch(word):
        return match.group(1)
    if start and words[start - 1].lower() in _NUMBER_NOUNS and (n := entities.number(word)):
        return str(n)
    if _UUID.fullmatch(word):
        return word
    return None


def names_one(ref: str) -> bool:
    """Does `ref` clearly name a task ("task 3", "#3", "the report task")?"""
    words = ref.lower().split(" ")
    return explicit_id(ref) is not None or (
        words[0] in ("the", "my") and not (MANY_FIRST | MANY_ANY).intersection(words)
    )


def points_at_one(ref: str) -> bool:
    """Does `ref` point at one task by the conversation alone ("it", "that one", "the
    second one", "task 3"), not by what it is about?"""
    if explicit_id(ref) is not None:
        return True
    words = [w.lower() for w in words_of(ref)]
    rest = [w for w in words[skip(words, 0, DETERMINERS) :] if w not in NOUNS]
    return (bool(words) and not rest) or (
        len(rest) == 1 and (rest[0] in PRONOUNS or entities.ordinal(rest[0]) is not None)
    )
