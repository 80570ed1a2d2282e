"""Resolving references: which of the user's tasks "task four", "the third one", "it",
"the flour" or "emailed Jo" means, using the session's context and fuzzy matching.

One clear match acts, several candidates are named and asked about, none says so.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rapidfuzz import fuzz

from backend.services.stub import entities, replies
from backend.services.stub import references as refs
from backend.services.stub.calls import Calls, Stop
from backend.services.stub.context import Context
from backend.services.tools import ListStatus, ToolResult


@dataclass(frozen=True, slots=True)
class Verb:
    """How a task-changing command is spoken about in replies."""

    name: str  # "I can only {name} one task at a time."
    example: str  # with {n}: 'Delete task {n}'
    among: ListStatus  # which tasks a description like "the meeting task" is matched in


DELETE = Verb("delete", "Delete task {n}", "all")
COMPLETE = Verb("complete", "Mark task {n} as done", "pending")
REOPEN = Verb("reopen", "Reopen task {n}", "completed")
UPDATE = Verb("change", "Rename task {n} to Call mom", "all")
STEPS = Verb("show the steps of", "What are the steps for task {n}?", "all")
PARENT = Verb("add a step to", "Add a step to task {n}: book the van", "all")
RESTORE = Verb("restore", "Restore task {n}", "deleted")

# Words that say nothing about which task: dropped before matching.
_NOISE = frozenset(
    [
        "the", "a", "an", "my", "our", "to", "for", "of", "with", "on", "at", "in", "and",
        "task", "todo", "one", "thing", "stuff", "about", "got", "get", "did", "do", "done",
        "is", "was", "are", "were", "been", "has", "have", "now", "it", "i", "me", "up", "off",
        "out", "that", "this", "some", "all",
    ]
)  # fmt: skip
# Irregular past tenses, so "paid the rent" finds "Pay rent".
_IRREGULAR = {
    "paid": "pay", "bought": "buy", "sent": "send", "wrote": "write", "took": "take",
    "made": "make", "rang": "ring", "met": "meet", "sold": "sell", "fed": "feed",
    "brought": "bring", "went": "go", "swept": "sweep", "ate": "eat", "drank": "drink",
    "found": "find", "gave": "give", "left": "leave", "ran": "run", "saw": "see",
    "spoke": "speak", "told": "tell", "hung": "hang", "threw": "throw", "read": "read",
    "taken": "take", "written": "write", "given": "give", "eaten": "eat", "seen": "see",
    "spoken": "speak",
}  # fmt: skip
# Deeds said in other words than the task's: "rang the plumber" is "Call the plumber" done
# (only the deed said widens: the task "Pay the phone bill" is no call).
_ALSO = {
    "rang": ("call", "phone"),
    "rung": ("call", "phone"),
    "phoned": ("call", "ring"),
    "called": ("phone", "ring"),
}
_WORD = re.compile(r"[a-z0-9]+")
_VAGUE_VERBS = frozenset(
    {"sort", "handle", "deal", "finish", "complete", "tackle", "manage", "take", "go", "make"}
)


def stem(word: str) -> str:
    word = _IRREGULAR.get(word, word)
    for suffix, keep in (("ing", 5), ("ied", 4), ("ed", 4), ("es", 4), ("s", 3)):
        if word.endswith(suffix) and len(word) - len(suffix) >= keep - 1:
            return word[: -len(suffix)] + ("y" if suffix == "ied" else "")
    return word


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    if min(len(a), len(b)) < 4:
        return False
    return a.startswith(b) or b.startswith(a) or fuzz.ratio(a, b) >= 80


def _terms(text: str) -> list[str]:
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in _NOISE]


def _asked(text: str) -> list[tuple[str, ...]]:
    """The words a reference matches by, each with the other words it may mean."""
    return [(stem(w), *_ALSO.get(w, ())) for w in _WORD.findall(text.lower()) if w not in _NOISE]


def _matched(terms: list[tuple[str, ...]], todo: Mapping[str, Any]) -> int:
    words = _terms(f"{todo.get('title') or ''} {todo.get('description') or ''}")
    return sum(1 for term in terms if any(_same(t, word) for t in term for word in words))


def best_matches(phrase: str, todos: list[ToolResult]) -> list[ToolResult]:
    """The tasks `phrase` fits best, when it fits well enough: every word of one or two
    words, two thirds of longer ones. A vague leading verb ("sorted the car") may be left
    out; a plain one may not ("called Jo" is not "Email Jo")."""
    terms = _asked(phrase)
    attempts = [terms]
    if len(terms) > 1 and terms[0][0] in _VAGUE_VERBS:
        attempts.append(terms[1:])
    for wanted in attempts:
        if not wanted:
            continue
        scored = [(_matched(wanted, todo), todo) for todo in todos]
        good = [(n, todo) for n, todo in scored if 3 * n >= 2 * len(wanted) and n]
        if good:
            best = max(n for n, _ in good)
            return [todo for n, todo in good if n == best]
    return []


# How close a name must be to a document's title or a heading (rapidfuzz's WRatio, which
# reads "moving checklist" in "Moving checklist v2" and "runbook" in "Release runbook").
NAME_SIMILARITY = 80


def best_named(wanted: str, names: Sequence[str]) -> list[int]:
    """The places in `names` of those `wanted` names best, when it names them well enough:
    one, or several equally well (then the person is asked which)."""
    scored = [
        (fuzz.WRatio(wanted.casefold(), one.casefold(), score_cutoff=NAME_SIMILARITY), at)
        for at, one in enumerate(names)
    ]
    best = max((score for score, _ in scored), default=0)
    return [at for score, at in scored if best and score == best]


@dataclass(frozen=True, slots=True)
class Target:
    todo_id: str
    todo: ToolResult | None = None  # the task as it was, when it had to be looked up


class Resolver:
    def __init__(self, calls: Calls, context: Context) -> None:
        self._calls = calls
        self._context = context

    async def find(self, ref: str, verb: Verb, *, look_up: bool = False) -> Target:
        """The task `ref` names; asks back (Stop) unless exactly one does. With `look_up`,
        the task's fields are fetched too (to undo a change, or to shift its due date)."""
        words = refs.words_of(ref)
        lowered = [w.lower() for w in words]
        if (todo_id := refs.explicit_id(ref)) is not None:
            if not look_up or not todo_id.isdigit():
                return Target(todo_id)
            found = [t for t in await self._calls.todos() if str(t.get("number")) == todo_id]
            return Target(todo_id, found[0] if found else None)
        start = refs.skip(lowered, 0, refs.DETERMINERS)
        numbers = sum(1 for w in words if refs.NUMBER.fullmatch(w))
        if (
            (
                start < len(words)
                and lowered[start] in refs.MANY_FIRST
                and lowered != ["that", "one"]
            )
            or refs.MANY_ANY.intersection(lowered)
            or (lowered and lowered[-1] == "list")
            or numbers > 1
        ):
            raise Stop(
                f"I can only {verb.name} one task at a time. Which one? For example: "
                f'"{verb.example.format(n=1)}".'
            )
        if start < len(words) and (position := entities.ordinal(lowered[start])) is not None:
            rest = set(lowered[start + 1 :]) - refs.NOUNS
            if not rest:
                return await self._by_position(position, verb)
        after_noun = refs.skip(lowered, start, refs.NOUNS)
        # "the task called X", "the one about Y"; but "called Jo" is what was done
        if start < after_noun < len(words) and lowered[after_noun] in refs.LINKS:
            after_noun += 1
        start = after_noun
        end = len(words)
        while end > start and lowered[end - 1] in refs.NOUNS | {"thing"}:
            end -= 1
        terms = words[start:end]
        if not terms or (len(terms) == 1 and terms[0].lower() in refs.PRONOUNS):
            if self._context.last_task is not None:
                return await self.find(str(self._context.last_task), verb, look_up=look_up)
            raise Stop(
                f'Which task? Tell me its number, for example: "{verb.example.format(n=1)}". '
                + replies.SHOW_HINT
            )
        todo = await self._match(" ".join(terms), verb)
        return Target(str(todo["number"]), todo)

    async def _by_position(self, position: int, verb: Verb) -> Target:
        """ "the second one": the second task of the last list shown, else of the list."""
        numbers = self._context.listing
        if not numbers:
            numbers = [int(t["number"]) for t in await self._calls.todos(status=verb.among)]
        index = position - 1 if position > 0 else len(numbers) + position
        if not 0 <= index < len(numbers):
            raise Stop(f"There is no task at that place in the list. {replies.SHOW_HINT}")
        return await self.find(str(numbers[index]), verb, look_up=True)

    async def _match(self, phrase: str, verb: Verb) -> ToolResult:
        todos = await self._calls.todos("look up that task", status=verb.among)
        found = best_matches(phrase, todos)
        which = {
            "pending": "a pending task",
            "completed": "a completed task",
            "deleted": "a task in the trash",
        }.get(verb.among, "a task")
        if not found:
            raise Stop(
                f'I couldn\'t find {which} matching "{replies.shorten(phrase)}". '
                + replies.SHOW_HINT
            )
        if len(found) > 1:
            shown = found[: replies.MAX_CHOICES]
            lines = [replies.line(todo, show_done=verb.among == "all") for todo in shown]
            if len(found) > len(shown):
                lines.append(f"...and {len(found) - len(shown)} more.")
            example = verb.example.format(n=found[0].get("number"))
            raise Stop(
                "\n".join(
                    [
                        f'{len(found)} tasks match "{replies.shorten(phrase)}":',
                        *lines,
                        f'Which one? For example: "{example}".',
                    ]
                )
            )
        return found[0]
