"""The stub responder: a small, deterministic command grammar over the model's own tools.

It answers when no OpenAI key is configured or the model is down. A message is parsed with
anchored regular expressions and word lists, then carried out through `call_tool`, exactly
as the model would, and the reply says what happened.

Safety, by construction:
- Only the user's message is parsed. Titles coming back from tools are shown, never read.
- One message changes at most one task; there is no "delete all".
- Whitespace is collapsed first, so every ` ` in a pattern is exactly one character, and no
  pattern nests quantifiers: each match is linear in the message length. Messages longer
  than any command are declined before parsing, so a turn parses in a few milliseconds at
  most and never stalls the event loop.
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from itertools import pairwise
from typing import Any, Literal, TypeVar

from backend.models.task import DueFilter, Priority, StatusFilter
from backend.services.tools import ToolCaller, ToolResult

T = TypeVar("T")


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE | re.DOTALL)


# --- Vocabulary ---------------------------------------------------------------------------

_LEVEL = r"(?P<level>high|higher|top|urgent|important|critical|medium|normal|low|lower)"
_LEVELS: dict[str, Priority] = {
    "high": "high",
    "higher": "high",
    "top": "high",
    "urgent": "high",
    "important": "high",
    "critical": "high",
    "medium": "medium",
    "normal": "medium",
    "low": "low",
    "lower": "low",
}
_DONE = r"(?:done|complete|completed|finished|closed|resolved|checked off|ticked off)"
_UNDONE = (
    r"(?:not (?:yet )?(?:done|complete|completed|finished)|incomplete|uncompleted|undone"
    r"|unfinished|pending|open|active|to-?do|not started)"
)
_MARK = r"(?:mark|set|flag|change|update|move|put|switch|turn)"
_LIST_NOUNS = r"(?:list|tasks|todos|to-dos|todo list|to-do list|task list)"

_WEEKDAYS = {
    "monday": 0,
    "mon": 0,
    "tuesday": 1,
    "tue": 1,
    "tues": 1,
    "wednesday": 2,
    "wed": 2,
    "thursday": 3,
    "thu": 3,
    "thur": 3,
    "thurs": 3,
    "friday": 4,
    "fri": 4,
    "saturday": 5,
    "sat": 5,
    "sunday": 6,
    "sun": 6,
}

# --- Patterns (all used with match/fullmatch on whitespace-collapsed text) ----------------

_GREETING = _rx(
    r"(?:(?:hi|hello|hey|hiya|howdy|yo|greetings|good (?:morning|afternoon|evening|day))"
    r"(?: there| again| all| everyone)?(?: [\w.'-]{1,40})?"
    r"|help(?: me| please| pls)?|i need help|what can you do|what do you do"
    r"|what can i (?:say|do|ask)|how does (?:this|it) work|how do i use (?:this|you|it)"
    r"|who are you|what are you|commands|menu|start|\?)"
)
_THANKS = _rx(
    r"(?:thanks|thank you|thx|ty|cheers|great|cool|ok|okay|nice|perfect|awesome|got it)"
    r"(?: (?:so much|a lot|very much|again))?(?: (?:thanks|thank you))?"
)
# Politeness and request framing in front of a command: "could you please", "I want to".
_REQUEST = _rx(
    r"(?:please|pls|plz|kindly|ok|okay|so|and|also|now|then|hey|hi|hello|yo|just|quickly"
    r"|(?:can|could|would|will) you(?: please| kindly)?|(?:can|could|may) i(?: please)?"
    r"|i(?: would|'d)? like to|i want to|i wanna|let's|lets|let me|go ahead and)[,:!]? "
)
_TRAILING_FILLERS = (("please",), ("pls",), ("plz",), ("thanks",), ("thx",), ("thank", "you"))

_REOPEN = (
    _rx(
        r"(?:re-?open|un-?complete|undo|unmark|uncheck|untick|unfinish|restore|revive)"
        rf" (?P<ref>.+?)(?: as {_DONE})?"
    ),
    _rx(rf"{_MARK} (?P<ref>.+?)(?: back)?(?: as| to)? {_UNDONE}"),
)
_COMPLETE = (
    _rx(rf"{_MARK} (?P<ref>.+?)(?: as| to)? {_DONE}"),
    _rx(r"(?:check|tick|cross|strike) off (?P<ref>.+)"),
    _rx(r"(?:check|tick|cross|strike) (?P<ref>.+?) off"),
    _rx(r"(?:complete|finish|close|resolve|accomplish) (?P<ref>.+)"),
    _rx(
        r"i(?:'m| am|'ve| have)?(?: just| already)?"
        r" (?:done with|finished with|through with|finished|completed|did|done) (?P<ref>.+)"
    ),
)
# Past tense without "I" ("finished task 2") also starts "completed tasks", a list request:
# these only count when they clearly name one task.
_COMPLETE_TERSE = _rx(r"(?:done with|finished with|finished|completed) (?P<ref>.+)")
_DELETE = _rx(
    r"(?:delete|remove|erase|trash|discard|drop|scratch|cancel|clear|get rid of|throw away"
    rf"|throw out|forget about) (?P<ref>.+?)(?: (?:from|off|on) (?:my|the) {_LIST_NOUNS})?"
)
_UPDATE = _rx(
    r"(?P<verb>change|rename|update|edit|modify|retitle|reword|rewrite|replace|set|move"
    r"|reschedule|postpone|push back|push|delay|defer|shift)"
    r" (?P<ref>.+?)(?: to| into| as| with| until| till| for|:| -| =| ->) (?P<new>.+)"
)
_UPDATE_INCOMPLETE = _rx(
    r"(?:change|rename|update|edit|modify|retitle|reword|move|reschedule|postpone|push back"
    r"|delay|defer) (?P<ref>.+)"
)
_PRIORITY = _rx(
    rf"(?:make|mark|set|flag) (?P<ref>.+?)(?: as| to)?(?: an?)? {_LEVEL}"
    r"(?:[- ]priority| prio| importance)?"
)
_PRIORITIZE = _rx(r"(?P<de>de-?)?prioriti[sz]e (?P<ref>.+)")
# "task 3 is done", "the meeting task isn't finished", "task 2 is due friday".
_IS_UNDONE = _rx(
    r"(?P<ref>.+?) (?:is not|isn't|is no longer|was not|wasn't)(?: yet)?"
    r" (?:done|complete|completed|finished)(?: yet)?"
)
_IS_DONE = _rx(rf"(?P<ref>.+?)(?: is| was| has been)?(?: now| all| already)? {_DONE}")
_IS_DUE = _rx(r"(?P<ref>.+?)(?: is| should be)? due (?P<new>.+)")

# The field a change names: "the due date of task 2", "task 2's title".
_FIELD_WORDS = (
    r"(?P<field>title|name|text|wording|description|details|notes?|due date|due|deadline"
    r"|date|priority)"
)
_FIELD_OF = _rx(rf"(?:the )?{_FIELD_WORDS} (?:of|for|on) (?P<ref>.+)")
_FIELD_AFTER = _rx(rf"(?P<ref>.+?)(?:'s|s')? {_FIELD_WORDS}")
_FIELDS: dict[str, "Field"] = {
    "title": "title",
    "name": "title",
    "text": "title",
    "wording": "title",
    "description": "description",
    "details": "description",
    "note": "description",
    "notes": "description",
    "due date": "due",
    "due": "due",
    "deadline": "due",
    "date": "due",
    "priority": "priority",
}
_RENAME_VERBS = frozenset({"rename", "retitle", "reword", "rewrite"})
_MOVE_VERBS = frozenset(
    {"move", "reschedule", "postpone", "push back", "push", "delay", "defer", "shift"}
)

_ARTICLE = r"(?: (?:a|an|another|one more|the|this|my|some))?(?: new)?"
_NOUN = r"(?: (?P<level>high|top|urgent|important|medium|normal|low)(?:[- ]priority)?)?"
_NOUN += r" (?:task|todo|to-do|to do|item|reminder|entry|note)"
_ONTO_LIST = rf"(?: (?:to|on|onto|in|into) (?:my|the) {_LIST_NOUNS})?"
_TITLE_SEP = r"(?: (?:to|that says|saying|called|named|titled|for|about|with title)|:| -)?(?: |$)"
_ADD = (
    # "add buy milk", "create a task: call the bank"
    _rx(
        r"(?:add|create|note down|jot down|write down)"
        rf"{_ARTICLE}(?:{_NOUN})?{_ONTO_LIST}{_TITLE_SEP}(?P<title>.*)"
    ),
    # Verbs that only mean "add" with a noun: "new task pay rent", "set a reminder to ...".
    _rx(
        r"(?:new|(?:make|save|set|set up|schedule|start|write|log|record|enter|put|insert|open)"
        rf" (?:a|an|another|one more)(?: new)?){_NOUN}{_ONTO_LIST}{_TITLE_SEP}(?P<title>.*)"
    ),
)
# "remind me to", "I need to remember to", "todo: ..." are always a new task.
_REMEMBER = _rx(
    r"(?:(?:i (?:need|have|want|must|should|ought|got)(?: to)? |i've got to |i gotta )?"
    r"remember(?: to)?|remind me(?: to| about| of| that i (?:need|have) to| that)?"
    r"|(?:don't|dont|do not) (?:let me )?forget(?: to| about)?|note to self"
    r"|(?:new )?(?:task|todo|to-do|reminder)(?= ?:)|todo|to-do)[:,]?(?: |$)"
)
# "I need to call mom" is a new task, unless it goes on with a command ("I need to finish task 2").
_NEED_TO = _rx(
    r"(?:i (?:need|have|must|should|ought|gotta)(?: to)?|i've got to|i got to|i gotta"
    r"|need to|have to|gotta|must) "
)

_DATE = _rx(
    r"(?P<prep>(?:due|by|on|for|before|until|till)(?: on| by| the)? )?"
    r"(?P<rel>(?:this|next|coming|this coming) )?"
    r"(?:(?P<day>today|tomorrow|tmrw|tmr|(?:the )?day after tomorrow)"
    r"|(?P<weekday>monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|mon|tues?|wed|thu(?:rs?)?|fri|sat|sun)"
    r"|in (?P<n>\d{1,3}) (?P<unit>days?|weeks?)"
    r"|(?P<week>next week)"
    r"|(?P<iso>\d{4}-\d{2}-\d{2}))"
)
_PRIORITY_TAIL = _rx(
    rf"(?:(?:with|at|as)(?: a)? )?{_LEVEL}[- ](?:priority|prio)"
    r"|(?:with )?priority:? (?P<level2>high|medium|low)"
)
_PRIORITY_VALUE = _rx(rf"(?:an? )?(?:(?:priority|prio):? )?{_LEVEL}(?:[- ]priority| prio)?")
_LIST_SUFFIX = _rx(rf"(?:to|on|onto|in|into|for) (?:my|the) {_LIST_NOUNS}")
_NUMBER = re.compile(r"#?(\d{1,9})")
_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.I)
_WORD = re.compile(r"[a-z0-9#'-]+")

# How a task is named: "the meeting task", "task number 3", "the one about taxes".
_DETERMINERS = frozenset({"the", "my", "a", "an", "that", "this", "our"})
_REF_NOUNS = frozenset(
    {"task", "todo", "to-do", "item", "number", "no", "num", "reminder", "one", "entry"}
)
_REF_LINKS = frozenset(
    {"about", "called", "named", "titled", "for", "re", "regarding", "saying", "with"}
)
_PRONOUNS = frozenset({"it", "that", "this", "one"})
_MANY_FIRST = frozenset({"all", "every", "everything", "each", "both", "them", "these", "those"})
_MANY_ANY = frozenset({"tasks", "todos", "to-dos", "items", "reminders"})

# What a list request sounds like.
_LIST_CUES = frozenset(
    {
        "show", "list", "display", "view", "see", "get", "give", "tell", "what", "what's",
        "whats", "which", "how", "do", "does", "any", "anything", "are", "is", "have", "print",
        "check", "review", "read", "fetch", "open",
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
_OVERDUE = frozenset({"overdue", "late"})
_TODAY = frozenset({"today", "tonight", "today's"})
_WEEK = frozenset({"week", "week's"})
_LIST_FILLERS = frozenset({"my", "all", "the", "of", "me", "i", "and", "this", "for", "ones"})
# A message of only these words is a list request: "pending", "my todo list", "all tasks".
_LIST_ONLY_WORDS = (
    _ITEMS | (_PENDING - {"due"}) | _COMPLETED | _OVERDUE | _TODAY | _WEEK | _LIST_FILLERS
)

# --- Replies ----------------------------------------------------------------------------

_EXAMPLES = '"Add a task to buy milk", "Show my tasks", "Mark task 2 as done" or "Delete task 3"'
DIDNT_UNDERSTAND = f"Sorry, I didn't understand that. Try {_EXAMPLES}."
_HELP = (
    "I can manage your todo list. Try:\n"
    '- "Add a task to buy milk tomorrow"\n'
    '- "Show my tasks", "What\'s pending?" or "What have I completed?"\n'
    '- "Mark task 2 as done" or "Reopen task 2"\n'
    '- "Rename task 1 to Call mom" or "Move task 1 to Friday"\n'
    '- "Delete task 3" or "Delete the dentist task"'
)
_ADD_EXAMPLE = '"Add a task to buy milk"'
_SHOW_HINT = 'Say "Show my tasks" to see them with their numbers.'
# No command is longer (the most a command carries is a 2,000-character description); the
# cap also bounds the parsing work per message to a few milliseconds.
MAX_COMMAND_CHARS = 2_500
_MAX_SHOWN = 50
_MAX_CHOICES = 10
_MAX_ECHO = 60


# --- Intents ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _When:
    """A due date relative to the user's local today."""

    days: int = 0
    weekday: int | None = None
    this_week: bool = False  # "this friday" may be today; "friday" is the next one
    fixed: date | None = None

    def on(self, today: date) -> date:
        if self.fixed is not None:
            return self.fixed
        if self.weekday is not None:
            ahead = (self.weekday - today.weekday()) % 7
            return today + timedelta(days=ahead or (0 if self.this_week else 7))
        return today + timedelta(days=self.days)


@dataclass(frozen=True, slots=True)
class _Verb:
    """How a task-changing command is spoken about in replies."""

    name: str  # "I can only {name} one task at a time."
    example: str  # with {n}: 'Delete task {n}'
    among: StatusFilter  # which tasks a description like "the meeting task" is matched in


_DELETE_VERB = _Verb("delete", "Delete task {n}", "all")
_COMPLETE_VERB = _Verb("complete", "Mark task {n} as done", "pending")
_REOPEN_VERB = _Verb("reopen", "Reopen task {n}", "completed")
_UPDATE_VERB = _Verb("change", "Rename task {n} to Call mom", "all")


@dataclass(frozen=True, slots=True)
class Say:
    """Answer with fixed text; no tool is called."""

    text: str


@dataclass(frozen=True, slots=True)
class Help:
    pass


@dataclass(frozen=True, slots=True)
class ListTasks:
    status: StatusFilter = "all"
    due: DueFilter | None = None


@dataclass(frozen=True, slots=True)
class AddTask:
    text: str  # the title as typed, possibly with a due date or priority at the end
    priority: Priority | None = None


@dataclass(frozen=True, slots=True)
class SetCompleted:
    ref: str
    completed: bool


@dataclass(frozen=True, slots=True)
class DeleteTask:
    ref: str


Field = Literal["title", "description", "due", "priority"]


@dataclass(frozen=True, slots=True)
class UpdateTask:
    ref: str
    field: Field
    value: str


Intent = Say | Help | ListTasks | AddTask | SetCompleted | DeleteTask | UpdateTask


class _Stop(Exception):
    """Ends the turn early with this reply (not found, ambiguous, ...)."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply


# --- Parsing ----------------------------------------------------------------------------


_STRAIGHT_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def _collapse(text: str) -> str:
    return " ".join(text.translate(_STRAIGHT_QUOTES).split())


def _strip_request(text: str) -> str:
    """Drop trailing "please"/"thanks" and leading "could you please", "I want to"..."""
    tokens = text.rstrip(" .!?,;:").split(" ")
    stripped = True
    while stripped:  # each round removes at least one word
        stripped = False
        for filler in _TRAILING_FILLERS:
            tail = tuple(t.lower().rstrip(".,!?") for t in tokens[-len(filler) :])
            if len(tokens) > len(filler) and tail == filler:
                del tokens[-len(filler) :]
                stripped = True
                break
    text = " ".join(tokens).rstrip(" .!?,;:")
    for _ in range(8):  # each round removes a word; a bound keeps this linear
        match = _REQUEST.match(text)
        if match is None or match.end() == len(text):
            break
        text = text[match.end() :]
    return text


def parse(message: str) -> Intent | None:
    """What the user asked for, or None when it is not understood."""
    text = _collapse(message).rstrip(" .!?,;:")
    if not text:
        return None
    if len(text) > MAX_COMMAND_CHARS:
        return Say(f"That is too long for me to follow. Try a short command, like {_EXAMPLES}.")
    if _THANKS.fullmatch(text):
        return Say("You're welcome! Anything else?")
    if _GREETING.fullmatch(text):
        return Help()
    text = _strip_request(text)
    if _GREETING.fullmatch(text):
        return Help()
    if (intent := _command(text)) is not None:
        return intent
    if match := _REMEMBER.match(text):
        return AddTask(text[match.end() :])
    if match := _NEED_TO.match(text):
        rest = text[match.end() :]
        intent = _command(rest)
        # "I need to finish task 2" is a command; "I need to finish the report" is a new task.
        if isinstance(intent, ListTasks | AddTask) or (
            isinstance(intent, SetCompleted | DeleteTask | UpdateTask)
            and _explicit_id(intent.ref) is not None
        ):
            return intent
        return AddTask(rest)
    return None


def _command(text: str) -> Intent | None:
    """A command that starts with its verb, a list request, or "task 3 is done"."""
    for pattern, build in _VERB_RULES:
        if (match := pattern.fullmatch(text)) and (intent := build(match)) is not None:
            return intent
    if (intent := _list_request(text)) is not None:
        return intent
    for pattern, build in _STATE_RULES:
        if (match := pattern.fullmatch(text)) and (intent := build(match)) is not None:
            return intent
    return None


Rule = Callable[[re.Match[str]], Intent | None]


def _ref(match: re.Match[str]) -> str | None:
    """The task a command names; "a reminder" or "a new task" never names an existing one."""
    ref = match["ref"]
    return None if ref.split(" ", 1)[0].lower() in ("a", "an", "another", "some", "up") else ref


def _one_ref(match: re.Match[str]) -> str | None:
    """The task, when the sentence has no verb up front and must name it plainly."""
    ref: str = match["ref"]
    return ref if _names_one(ref) else None


def _set_completed(completed: bool, ref: Callable[[re.Match[str]], str | None] = _ref) -> Rule:
    def build(match: re.Match[str]) -> Intent | None:
        found = ref(match)
        return None if found is None else SetCompleted(found, completed=completed)

    return build


def _add(match: re.Match[str]) -> Intent:
    return AddTask(match["title"], _LEVELS.get((match["level"] or "").lower()))


def _change(match: re.Match[str]) -> Intent | None:
    ref = _ref(match)
    return None if ref is None else _update(match["verb"].lower(), ref, match["new"])


def _priority(match: re.Match[str]) -> Intent | None:
    ref = _ref(match)
    return None if ref is None else UpdateTask(ref, "priority", match["level"])


def _prioritize(match: re.Match[str]) -> Intent | None:
    ref = _ref(match)
    return None if ref is None else UpdateTask(ref, "priority", "low" if match["de"] else "high")


def _delete(match: re.Match[str]) -> Intent | None:
    ref = _ref(match)
    return None if ref is None else DeleteTask(ref)


def _ask_what_to_change(match: re.Match[str]) -> Intent | None:
    if _ref(match) is None:
        return None
    return Say(
        f"What should I change {_shorten(match['ref'])} to? For example: "
        '"Rename task 1 to Call mom" or "Move task 1 to Friday".'
    )


def _is_due(match: re.Match[str]) -> Intent | None:
    ref = _one_ref(match)
    return None if ref is None else UpdateTask(ref, "due", match["new"])


# In order; a rule whose builder returns None lets the next one try.
_VERB_RULES: list[tuple[re.Pattern[str], Rule]] = [
    *((pattern, _set_completed(False)) for pattern in _REOPEN),
    *((pattern, _set_completed(True)) for pattern in _COMPLETE),
    (_COMPLETE_TERSE, _set_completed(True, _one_ref)),
    (_DELETE, _delete),
    *((pattern, _add) for pattern in _ADD),
    (_UPDATE, _change),
    (_PRIORITY, _priority),
    (_PRIORITIZE, _prioritize),
    (_UPDATE_INCOMPLETE, _ask_what_to_change),
]
_STATE_RULES: list[tuple[re.Pattern[str], Rule]] = [
    (_IS_UNDONE, _set_completed(False, _one_ref)),
    (_IS_DONE, _set_completed(True, _one_ref)),
    (_IS_DUE, _is_due),
]


def _update(verb: str, ref: str, new: str) -> Intent:
    """ "change X to Y": which field Y is for follows from the verb, a named field, or Y."""
    field: Field | None = None
    if match := _FIELD_OF.fullmatch(ref) or _FIELD_AFTER.fullmatch(ref):
        ref, field = match["ref"], _FIELDS[match["field"].lower()]
    if verb in _RENAME_VERBS:
        field = "title"
    elif verb in _MOVE_VERBS and field in (None, "due"):
        field = "due"
        if _date(new) is None:
            return Say(
                f'I can move a task to a date like "tomorrow", "Friday" or "2026-12-01", '
                f"but not {_shorten(new)}."
            )
    if field is None:
        if _date(new) is not None:
            field = "due"
        elif _PRIORITY_VALUE.fullmatch(new):
            field = "priority"
        else:
            field = "title"
    return UpdateTask(ref, field, new)


def _list_request(text: str) -> ListTasks | None:
    words = _WORD.findall(text.lower())
    if not words:
        return None
    pending_phrase = any(a == "to" and b == "do" for a, b in pairwise(words))
    asked = words[0] in _LIST_CUES and any(
        w in _ITEMS or w in _PENDING or w in _COMPLETED or w in _OVERDUE or w in _TODAY
        for w in words
    )
    if not (asked or pending_phrase or all(w in _LIST_ONLY_WORDS for w in words)):
        return None
    done = any(w in _COMPLETED for w in words)
    pending = pending_phrase or any(w in _PENDING for w in words)
    status: StatusFilter = "all"
    if done and any(w in _NEGATIONS for w in words):
        status = "pending"
    elif done != pending:
        status = "completed" if done else "pending"
    due: DueFilter | None = None
    if any(w in _OVERDUE for w in words):
        due = "overdue"
    elif any(w in _TODAY for w in words):
        due = "today"
    elif any(w in _WEEK for w in words):
        due = "week"
    return ListTasks(status, due)


def _names_one(ref: str) -> bool:
    """Does `ref` clearly name a task ("task 3", "#3", "the report task")?"""
    words = ref.lower().split(" ")
    return _explicit_id(ref) is not None or (
        words[0] in ("the", "my") and not (_MANY_FIRST | _MANY_ANY).intersection(words)
    )


def _explicit_id(ref: str) -> str | None:
    """The todo_id for a task named by number or UUID, else None."""
    words = _ref_words(ref)
    start = _skip(words, 0, _DETERMINERS)
    start = _skip(words, start, _REF_NOUNS)
    if len(words) - start != 1:
        return None
    word = words[start]
    if match := _NUMBER.fullmatch(word):
        return match.group(1)
    if _UUID.fullmatch(word):
        return word
    return None


def _ref_words(ref: str) -> list[str]:
    return [w for w in (t.strip("'\".,;:!?()") for t in ref.split(" ")) if w]


def _skip(words: Sequence[str], start: int, skippable: frozenset[str]) -> int:
    while start < len(words) and words[start].lower() in skippable:
        start += 1
    return start


def _date(text: str) -> _When | None:
    match = _DATE.fullmatch(text.strip(" ,;:-"))
    if match is None:
        return None
    if match["iso"]:
        try:
            return _When(fixed=date.fromisoformat(match["iso"]))
        except ValueError:
            return None
    if match["weekday"]:
        name = match["weekday"].lower()
        if len(name) < 6 and not (match["prep"] or match["rel"]):
            return None  # a bare "sun" or "wed" ends titles more often than it means a day
        this_week = (match["rel"] or "").strip().lower() == "this"
        return _When(weekday=_WEEKDAYS[name], this_week=this_week)
    if match["n"]:
        unit = 7 if match["unit"].lower().startswith("week") else 1
        return _When(days=int(match["n"]) * unit)
    if match["week"]:
        return _When(days=7)
    day = match["day"].lower()
    return _When(days=0 if day == "today" else 2 if day.endswith("after tomorrow") else 1)


def _strip_tail(
    tokens: list[str], accept: Callable[[str], T | None], *, max_words: int, keep: int
) -> tuple[list[str], T | None]:
    """Remove the longest ending of at most `max_words` words that `accept` turns into a
    value, leaving at least `keep` words."""
    for size in range(min(max_words, len(tokens) - keep), 0, -1):
        value = accept(" ".join(tokens[-size:]).strip(" ,;:-"))
        if value is not None:
            return tokens[:-size], value
    return tokens, None


def _tail_priority(text: str) -> Priority | None:
    match = _PRIORITY_TAIL.fullmatch(text)
    if match is None:
        return None
    return _LEVELS[(match["level"] or match["level2"]).lower()]


def _title_parts(text: str, *, keep: int) -> tuple[list[str], _When | None, Priority | None]:
    """Split trailing "tomorrow", "high priority" and "to my list" off a title."""
    tokens = text.split(" ") if text else []
    when: _When | None = None
    level: Priority | None = None
    for _ in range(3):
        before = len(tokens)
        tokens, _ = _strip_tail(tokens, _LIST_SUFFIX.fullmatch, max_words=5, keep=keep)
        if when is None:
            tokens, when = _strip_tail(tokens, _date, max_words=5, keep=keep)
        if level is None:
            tokens, level = _strip_tail(tokens, _tail_priority, max_words=4, keep=keep)
        if len(tokens) == before:
            break
    return tokens, when, level


def title_and_extras(text: str) -> tuple[str, _When | None, Priority | None]:
    """A clean title from what the user typed, and any due date or priority said with it.

    A quoted title is kept exactly; an unquoted one loses "to my list", a trailing date
    ("tomorrow", "on Friday") or priority, and gets a capital first letter.
    """
    text = text.strip(" ,;:-")
    if len(text) > 1 and text[0] in "'\"":
        end = text.rfind(text[0])
        inner = text[1:end].strip() if end > 0 else ""
        after, when, level = _title_parts(text[end + 1 :].strip(" ,;:-"), keep=0)
        if inner and not after:
            return inner, when, level
    tokens, when, level = _title_parts(text, keep=1)
    if when is None:  # "remind me tomorrow to call mom"
        for size in range(min(4, len(tokens) - 1), 0, -1):
            if (found := _date(" ".join(tokens[:size]))) is not None:
                when, tokens = found, tokens[size:]
                if tokens[0].lower() == "to" and len(tokens) > 1:
                    tokens = tokens[1:]
                break
    title = " ".join(tokens).strip(" ,;:-")
    if len(title) > 1 and title[0] in "'\"" and title[-1] == title[0]:
        title = title[1:-1].strip()
    first = title.split(" ", 1)[0]
    if first.islower():
        title = title[:1].upper() + title[1:]
    return title, when, level


# --- Carrying it out --------------------------------------------------------------------


class StubResponder:
    """Answers chat messages without a model: parse, call the tools, say what happened."""

    async def respond(self, message: str, *, call_tool: ToolCaller, name: str | None = None) -> str:
        """Understand `message`, carry it out with call_tool(tool_name, arguments), return the
        reply text."""
        intent = parse(message)
        turn = _Turn(call_tool)
        try:
            match intent:
                case None:
                    return DIDNT_UNDERSTAND
                case Say():
                    return intent.text
                case Help():
                    display = _clean(name or "", limit=40)
                    return f"Hi {display}! {_HELP}" if display else f"Hi! {_HELP}"
                case ListTasks():
                    return await turn.show(intent)
                case AddTask():
                    return await turn.add(intent)
                case SetCompleted():
                    return await turn.set_completed(intent)
                case DeleteTask():
                    return await turn.delete(intent)
                case UpdateTask():
                    return await turn.update(intent)
        except _Stop as stop:
            return stop.reply
        return DIDNT_UNDERSTAND


class _Turn:
    def __init__(self, call_tool: ToolCaller) -> None:
        self._call_tool = call_tool

    async def _call(self, tool: str, arguments: Mapping[str, Any], failed: str) -> ToolResult:
        """Run a tool; an error result ends the turn with a plain explanation."""
        result = await self._call_tool(tool, arguments)
        if result.get("status") == "error":
            error = str(result.get("error") or "unknown error")
            todo_id = arguments.get("todo_id")
            if todo_id is not None and "not found" in error.lower():
                raise _Stop(f"I couldn't find task {todo_id}. {_SHOW_HINT}")
            raise _Stop(f"I couldn't {failed}: {_clean(error, limit=300)}")
        return result

    async def _today(self) -> date:
        """The user's local date: the tools know their timezone, the stub does not."""
        context = await self._call("get_user_context", {}, "look up today's date")
        try:
            return datetime.fromisoformat(str(context.get("local_time"))).date()
        except ValueError:
            raise _Stop("I couldn't look up today's date; try again without one.") from None

    async def show(self, intent: ListTasks) -> str:
        arguments: dict[str, Any] = {"status": intent.status, "limit": _MAX_SHOWN}
        if intent.due:
            arguments["due"] = intent.due
        result = await self._call("list_todos", arguments, "load your tasks")
        todos = _todos(result)
        total = int(result.get("total") or len(todos))
        what = _describe(intent, total)
        if not todos:
            return _nothing(intent)
        lines = [_line(todo, show_done=intent.status == "all") for todo in todos]
        if total > len(todos):
            lines.append(f"...and {total - len(todos)} more.")
        head = (
            f"You have completed {what}:" if intent.status == "completed" else f"You have {what}:"
        )
        return "\n".join([head, *lines])

    async def add(self, intent: AddTask) -> str:
        title, when, level = title_and_extras(intent.text)
        if not title:
            return f"What should the task say? For example: {_ADD_EXAMPLE}."
        arguments: dict[str, Any] = {"title": title}
        if when is not None:
            arguments["due_at"] = when.on(await self._today()).isoformat()
        if level or intent.priority:
            arguments["priority"] = level or intent.priority
        result = await self._call("add_todo", arguments, "add that task")
        todo = _todo(result)
        return f"Added task {todo.get('number')}: {_title(todo)}{_extras(todo)}."

    async def set_completed(self, intent: SetCompleted) -> str:
        verb = _COMPLETE_VERB if intent.completed else _REOPEN_VERB
        todo_id = await self._find(intent.ref, verb)
        result = await self._call(
            "complete_todo",
            {"todo_id": todo_id, "completed": intent.completed},
            "update that task",
        )
        todo = _todo(result)
        if intent.completed:
            return f"Marked task {todo.get('number')} as complete: {_title(todo)}."
        return f"Reopened task {todo.get('number')}: {_title(todo)}."

    async def delete(self, intent: DeleteTask) -> str:
        todo_id = await self._find(intent.ref, _DELETE_VERB)
        result = await self._call("delete_todo", {"todo_id": todo_id}, "delete that task")
        return f"Deleted task {result.get('number')}: {_title(result)}."

    async def update(self, intent: UpdateTask) -> str:
        changes: dict[str, Any] = {}
        when: _When | None = None
        if intent.field == "priority":
            match = _PRIORITY_VALUE.fullmatch(intent.value)
            if match is None:
                return 'Priority can be high, medium or low, as in "Set task 2 to high priority".'
            changes["priority"] = _LEVELS[match["level"].lower()]
        elif intent.field == "due":
            when = _date(intent.value)
            if when is None:
                return 'When is it due? For example: "Move task 2 to Friday".'
        elif intent.field == "description":
            changes["description"] = intent.value.strip("'\" ")
        else:
            title, when, level = title_and_extras(intent.value)
            if not title:
                return 'What should the new title be? For example: "Rename task 1 to Call mom".'
            changes["title"] = title
            if level is not None:
                changes["priority"] = level
        todo_id = await self._find(intent.ref, _UPDATE_VERB)
        if when is not None:
            changes["due_at"] = when.on(await self._today()).isoformat()
        result = await self._call(
            "update_todo", {"todo_id": todo_id, **changes}, "change that task"
        )
        todo = _todo(result)
        return f"Updated task {todo.get('number')}: {_title(todo)}{_extras(todo)}."

    async def _find(self, ref: str, verb: _Verb) -> str:
        """The todo_id for how the user named a task; asks back unless exactly one matches."""
        if (todo_id := _explicit_id(ref)) is not None:
            return todo_id
        words = _ref_words(ref)
        lowered = [w.lower() for w in words]
        numbers = sum(1 for w in words if _NUMBER.fullmatch(w))
        start = _skip(lowered, 0, _DETERMINERS)
        if (
            (start < len(words) and lowered[start] in _MANY_FIRST)
            or _MANY_ANY.intersection(lowered)
            or (lowered and lowered[-1] == "list")
            or numbers > 1
        ):
            raise _Stop(
                f"I can only {verb.name} one task at a time. Which one? For example: "
                f'"{verb.example.format(n=1)}".'
            )
        start = _skip(lowered, start, _REF_NOUNS)
        if start < len(words) and lowered[start] in _REF_LINKS:
            start += 1
        end = len(words)
        while end > start and lowered[end - 1] in _REF_NOUNS | {"thing"}:
            end -= 1
        terms = words[start:end]
        if not terms or (len(terms) == 1 and terms[0].lower() in _PRONOUNS):
            raise _Stop(
                f'Which task? Tell me its number, for example: "{verb.example.format(n=1)}". '
                + _SHOW_HINT
            )
        todo = await self._match(terms, verb)
        return str(todo["number"])

    async def _match(self, terms: list[str], verb: _Verb) -> ToolResult:
        """The one task whose title or description holds all of `terms`."""
        phrase = " ".join(terms)
        found = await self._search(phrase, verb.among)
        if not found and len(terms) > 1:
            # Not as one phrase: look for the longest word, then keep tasks with every word.
            lowered = [t.lower() for t in terms]
            found = [
                todo
                for todo in await self._search(max(terms, key=len), verb.among)
                if all(t in _haystack(todo) for t in lowered)
            ]
        which = {"pending": "a pending task", "completed": "a completed task"}.get(
            verb.among, "a task"
        )
        if not found:
            raise _Stop(f'I couldn\'t find {which} matching "{_shorten(phrase)}". {_SHOW_HINT}')
        if len(found) > 1:
            lines = [_line(todo, show_done=verb.among == "all") for todo in found[:_MAX_CHOICES]]
            if len(found) > _MAX_CHOICES:
                lines.append(f"...and {len(found) - _MAX_CHOICES} more.")
            example = verb.example.format(n=found[0].get("number"))
            raise _Stop(
                "\n".join(
                    [
                        f'{len(found)} tasks match "{_shorten(phrase)}":',
                        *lines,
                        f'Which one? For example: "{example}".',
                    ]
                )
            )
        return found[0]

    async def _search(self, text: str, status: StatusFilter) -> list[ToolResult]:
        result = await self._call(
            "list_todos",
            {"status": status, "search": text, "limit": _MAX_SHOWN},
            "look up that task",
        )
        return _todos(result)


def _todos(result: ToolResult) -> list[ToolResult]:
    todos = result.get("todos")
    return [t for t in todos if isinstance(t, dict)] if isinstance(todos, list) else []


def _todo(result: ToolResult) -> ToolResult:
    todo = result.get("todo")
    return todo if isinstance(todo, dict) else {}


def _haystack(todo: Mapping[str, Any]) -> str:
    return f"{todo.get('title') or ''} {todo.get('description') or ''}".lower()


def _clean(text: str, *, limit: int = 200) -> str:
    """One line of at most `limit` characters: stored text never breaks a reply's layout."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _shorten(text: str) -> str:
    return _clean(text.strip(" '\""), limit=_MAX_ECHO)


def _title(todo: Mapping[str, Any]) -> str:
    """A task's title for a reply, without a doubled full stop."""
    return _clean(str(todo.get("title") or "")).rstrip(".")


def _due(todo: Mapping[str, Any]) -> str | None:
    due = todo.get("due_at")
    if not isinstance(due, str) or len(due) < 10:
        return None
    # A date-only due date is stored as the end of that day.
    return due[:10] if due[11:16] in ("", "23:59") else f"{due[:10]} {due[11:16]}"


def _extras(todo: Mapping[str, Any]) -> str:
    notes = []
    if todo.get("priority") in ("high", "low"):
        notes.append(f"{todo['priority']} priority")
    if due := _due(todo):
        notes.append(f"due {due}")
    return f" ({', '.join(notes)})" if notes else ""


def _line(todo: Mapping[str, Any], *, show_done: bool) -> str:
    done = " (done)" if show_done and todo.get("completed") else ""
    return f"- #{todo.get('number')} {_title(todo)}{done}{_extras(todo)}"


def _describe(intent: ListTasks, count: int) -> str:
    """ "2 pending tasks due today", "1 overdue task"."""
    adjective = {"pending": "pending ", "completed": ""}.get(intent.status, "")
    if intent.due == "overdue":
        adjective = "overdue "
    suffix = {"today": " due today", "week": " due this week"}.get(intent.due or "", "")
    return f"{count} {adjective}{'task' if count == 1 else 'tasks'}{suffix}"


def _nothing(intent: ListTasks) -> str:
    if intent.status == "completed":
        return 'You haven\'t completed any tasks yet. Mark one done with "Mark task 1 as done".'
    if intent.due == "overdue":
        return "You have no overdue tasks."
    kind = "pending tasks" if intent.status == "pending" else "tasks"
    when = {"today": " due today", "week": " due this week"}.get(intent.due or "", "")
    return f"You have no {kind}{when}. Add one with {_ADD_EXAMPLE}."
