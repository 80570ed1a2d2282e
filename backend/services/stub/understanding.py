"""Understanding: a message becomes typed commands (intent and slots); nothing runs here.

The grammar is tables: each row of `_VERB_RULES` and `_STATE_RULES` is a pattern and the
command it builds, and the word lists say what a list question, a reference or a filler
sounds like. Adding a phrasing is adding a row. Entities (dates, times, repeats, reminders,
numbers, priorities, tags) are left in the slots as typed and read by `entities`; references
are resolved by `resolver`.

Whitespace is collapsed first, so every ` ` in a pattern is exactly one character, and no
pattern nests quantifiers: each match is linear in the message length. Messages longer than
any command are declined before parsing.
"""

import re
from collections.abc import Callable
from dataclasses import replace

from backend.models.task import Priority
from backend.services.stub import entities
from backend.services.stub.commands import (
    AddTask,
    Assign,
    Command,
    CreateList,
    DeleteMatching,
    DeleteTask,
    EmptyTrash,
    Field,
    Help,
    ListTasks,
    Plan,
    RefCommand,
    RestoreTask,
    Say,
    SetCompleted,
    ShowSteps,
    ShowTrash,
    Undo,
    UpdateTask,
)
from backend.services.stub.context import Context
from backend.services.stub.memories import memory_request
from backend.services.stub.questions import list_request
from backend.services.stub.reading import document_request
from backend.services.stub.references import explicit_id, names_one, points_at_one
from backend.services.stub.replies import LEFT_AS_IS, TOO_LONG, WELCOME, shorten


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
_DONE = (
    r"(?:done|complete|completed|finished|closed|resolved|checked off|ticked off|sorted(?: out)?"
    r"|taken care of|dealt with|handled)"
)
_UNDONE = (
    r"(?:not (?:yet )?(?:done|complete|completed|finished)|incomplete|uncompleted|undone"
    r"|unfinished|pending|open|active|to-?do|not started)"
)
_MARK = r"(?:mark|set|flag|change|update|move|put|switch|turn)"
_LIST_NOUNS = r"(?:list|tasks|todos|to-dos|todo list|to-do list|task list)"

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
    r"|actually|oh|oops|sorry|wait|um|umm|hmm|well|btw|no(?! more| need)|nah|right|alright"
    r"|hey there|ugh|argh|haha|lol|omg|sigh|anyway|anyways|(?:can|could|shall) we"
    r"|(?:can|could|would|will) (?:you|u)(?: please| pls| kindly)?|(?:can|could|may) i(?: please)?"
    r"|i(?: would|'d)? like to|i want to|i wanna|let's|lets|let me|go ahead and)[,:!]? "
)
_TRAILING_FILLERS = (
    ("please",), ("pls",), ("plz",), ("thanks",), ("thx",), ("thank", "you"), ("instead",),
    ("haha",), ("lol",),
)  # fmt: skip

_REOPEN = (
    _rx(
        r"(?:re-?open|un-?complete|undo|unmark|uncheck|untick|unfinish|revive)"
        rf" (?P<ref>.+?)(?: as {_DONE})?"
    ),
    _rx(rf"{_MARK} (?P<ref>.+?)(?: back)?(?: as| to)? {_UNDONE}"),
    # "I haven't done the laundry yet", "I didn't pay the rent after all"
    _rx(
        r"i (?:haven't|havent|have not|didn't|didnt|did not)(?: actually| really| even)?"
        r"(?: (?:done|finished|completed|do|finish|complete))? (?P<ref>.+?)"
        r"(?: yet| after all| actually| at all)?"
    ),
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
_COMPLETE_TERSE = _rx(r"(?:finished|completed) (?P<ref>.+)")
_DONE_WITH = _rx(r"(?:done with|finished with|through with) (?P<ref>.+)")
_DELETE = _rx(
    r"(?:delete|remove|erase|trash|discard|drop|scratch|scrap|bin|ditch|cancel|clear|get rid of"
    r"|throw away"
    rf"|throw out|forget about) (?P<ref>.+?)(?: (?:from|off|on) (?:my|the) {_LIST_NOUNS})?"
)
# "delete everything about the party", "remove all the party tasks", "clear all completed
# tasks": several tasks at once, by what they are about or by being done.
_DELETE_ALL = _rx(
    r"(?:delete|remove|erase|trash|discard|scrap|bin|ditch|clear|get rid of|throw away"
    r"|throw out) (?:all|everything|every (?:single )?(?:task|todo|to-do|item|thing|one))"
    r"(?: of)?(?: (?:the|my|our))?(?P<what> .+?)?"
    rf"(?: (?:from|off|on) (?:my|the) {_LIST_NOUNS})?"
)
_DELETE_DONE = _rx(
    r"(?:delete|remove|erase|clear|get rid of) (?:the |my )?(?:completed|done|finished)"
    r" (?:tasks|todos|to-dos|items|ones)"
)
_MANY_NOUN = r"(?:tasks?|todos?|to-dos?|items?|things?|stuff|ones?)"
_ABOUT = re.compile(
    rf"^(?:{_MANY_NOUN} )?(?:(?:that (?:are|is) )?(?:about|for|to do with|related to|regarding"
    r"|concerning|matching|mentioning|containing|with|on|from|called|named|that mention"
    r"|that have|which mention) )?(?:(?:the|my|our|a) )?",
    re.I,
)
_MANY_NOUN_END = re.compile(rf"(?:^| )(?:{_MANY_NOUN} ?)+$", re.I)
_DONE_WORDS = frozenset({"completed", "done", "finished", "ticked off", "checked off"})
_UPDATE = _rx(
    r"(?P<verb>change|rename|update|edit|modify|retitle|reword|rewrite|replace|set|move"
    r"|reschedule|postpone|push back|push|delay|defer|shift|bump)"
    r" (?P<ref>.+?)(?: to| into| as| with| until| till| for|:| -| =| ->) (?P<new>.+)"
)
# "postpone the haircut by three days", "push task 2 back a week".
_BY = rf"(?P<by>(?:by |for )?(?:another )?(?:a|an|\d{{1,3}}|[a-z]+) {entities.SHIFT_UNITS})"
_SHIFT_BY = (
    _rx(
        r"(?:postpone|push back|push|delay|defer|move|shift|bump|put off) (?P<ref>.+?)(?: back)?"
        rf" {_BY}"
    ),
    _rx(rf"put (?P<ref>.+?) back {_BY}"),  # "put that back an hour"; "put" alone moves nothing
)
_MOVE_TO = _rx(
    r"(?:move|reschedule|postpone|push back|push|delay|defer|shift|bump|put off) (?P<ref>.+?)"
    r"(?: back)? (?:to|until|till|for) (?P<new>.+)"
)
# "can we do the haircut on thursday instead": "instead" says a task there is moves.
_INSTEAD = _rx(r"(?:make|have|put|schedule|do|hold|move) (?P<ref>.+?) (?:at|for|on|to) (?P<new>.+)")
_UPDATE_INCOMPLETE = _rx(
    r"(?:change|rename|update|edit|modify|retitle|reword|move|reschedule|postpone|push back"
    r"|delay|defer) (?P<ref>.+)"
)
_PRIORITY = _rx(
    rf"(?:make|mark|set|flag) (?P<ref>.+?)(?: as| to)?(?: an?)? {_LEVEL}"
    r"(?:[- ]priority| prio| importance)?"
)
_PRIORITIZE = _rx(r"(?P<de>de-?)?prioriti[sz]e (?P<ref>.+)")
# "remove the priority of task 2", "clear task 2's priority", "give it no priority".
_PRIO = r"(?:priority|prio)"
_CLEAR = r"(?:remove|clear|drop|delete|unset|reset|take off|take away)"
_NO_PRIORITY = (
    _rx(rf"{_CLEAR} (?:the |its |a )?{_PRIO}(?: (?:of|from|on|for) (?P<ref>.+))?"),
    _rx(rf"{_CLEAR} (?P<ref>.+?)(?:'s|s')? {_PRIO}"),
    _rx(
        r"(?:make|mark|set|give|put|leave) (?P<ref>.+?)(?: as| to| at| with)?"
        rf" (?:no|zero) {_PRIO}"
    ),
)
# "task 3 is done", "the meeting task isn't finished", "task 2 is due friday".
_IS_UNDONE = _rx(
    r"(?P<ref>.+?) (?:is not|isn't|is no longer|was not|wasn't)(?: yet)?"
    r" (?:done|complete|completed|finished)(?: yet)?"
)
_IS_DONE = _rx(
    r"(?P<ref>.+?)(?:'s| is| was| are| were| has been| have been)?(?: now| all| already)?"
    rf" {_DONE}(?: now| already| too)?"
)
# "the dry cleaning's been collected", "the rent has been paid": a deed done, said of the
# task; "the meeting has been moved" or "... cancelled" is no deed done.
_BEEN_DONE = _rx(
    r"(?P<ref>.+?)(?:'s| has| have)? been (?P<verb>[a-z]{2,}ed|paid|sent|bought|done|taken|written"
    r"|given|made|sold|fed|brought|swept|found|put|cut|hung|thrown|got|gotten|seen|sorted)"
    r"(?: (?:out|off|up|in|back|down|away))?(?: (?:now|already|today|yesterday|this morning))?"
)
_NOT_A_DEED = frozenset(
    {"moved", "postponed", "rescheduled", "delayed", "changed", "pushed", "shifted", "bumped",
     "cancelled", "canceled", "renamed", "added", "updated", "reopened", "deleted", "removed"}
)  # fmt: skip
# "the team meeting got moved to 4:30", "the vet was postponed till friday": the task's new
# time, said as news.
_WAS_MOVED = _rx(
    r"(?P<ref>.+?)(?:'s| has| have)?(?: got| been| has been| have been| was| were| is| are)"
    r" (?:moved|rescheduled|pushed(?: back)?|postponed|changed|shifted|bumped|put off|delayed)"
    r" (?:to|till|until|for) (?P<new>.+)"
)
# "just got back from the dentist", "I've been to the vet": the task's event done.
_BACK_FROM = _rx(
    r"(?:i(?:'ve| have|'m| am)? |we(?:'ve| have|'re| are)? )?(?:just |finally )?"
    r"(?:(?:got|get|came|come|am|'m|are|'re) back from|returned from|been to|went to) (?P<ref>.+)"
)
_IS_DUE = _rx(r"(?P<ref>.+?)(?: is| should be)? due (?P<new>.+)")
# "the laundry can wait, make it low priority"
_CAN_WAIT = _rx(
    r"(?P<ref>.+?) (?:can|could|will have to|has to) wait(?: (?:a bit|a while|till later))?"
    r"(?:,? (?:so |just )?(?:make|set|mark|put|keep) (?:it|that) (?:as |to |at |on )?(?:a )?"
    r"(?:low|lower)(?:[- ]priority| prio)?)?"
)

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
    {"move", "reschedule", "postpone", "push back", "push", "delay", "defer", "shift", "bump"}
)

_ARTICLE = r"(?: (?:a|an|another|one more|the|this|my|some))?(?: new)?"
_NOUN = r"(?: (?P<level>high|top|urgent|important|medium|normal|low)(?:[- ]priority)?)?"
_NOUN += r" (?P<noun>task|todo|to-do|to do|item|reminder|entry|note)"
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
# "pick up the kids at 3pm — add it": the task first, the command after it.
_ADD_AFTER = _rx(
    r"(?P<title>.+?)(?: ?[\u2014\u2013-]+|[,:;])? (?:please )?(?:add|note|save|put|jot)"
    r" (?:it|that|this)(?: down)?(?: (?:to|on|in|onto) (?:my|the) (?:list|tasks|todo list))?"
    r"(?P<level>)"
)
# "put milk on the shopping list": a new task, said the other way round.
_PUT_ON_LIST = _rx(
    r"(?:put|stick|pop|throw) (?P<title>.+?) (?:on|onto|in|to) (?:my|the)"
    r" (?:shopping |todo |to-do |task )?list(?P<level>)"
)
# "remind me to", "I need to remember to", "todo: ..." are always a new task.
_REMEMBER = _rx(
    r"(?:(?:i (?:need|have|want|must|should|ought|got)(?: to)? |i've got to |i gotta )?"
    r"remember(?: to| that (?:i|we) (?:need|have|must) to)?"
    r"|(?P<remind>remind me)(?: to| (?P<about>about|of)| that i (?:need|have) to| that)?"
    r"|(?:don't|dont|do not) (?:let me )?forget(?: to| about)?|note to self"
    r"|(?:new )?(?:task|todo|to-do|reminder)(?= ?:)|todo|to-do)[:,]?(?: |$)"
)
# "I need to call mom" is a new task, unless it goes on with a command ("I need to finish task 2").
_NEED_TO = _rx(
    r"(?:i(?: also| really| just| still)? (?:need|have|must|should|ought|gotta)(?: to)?"
    r"|i've got to|i got to|i gotta"
    r"|need to|have to|gotta|must)(?: really| just| also| definitely| probably)? "
)

_PRIORITY_VALUE = _rx(
    rf"(?:an? )?(?:(?:priority|prio):? )?{_LEVEL}(?:[- ]priority| prio)?|(?:no|zero) {_PRIO}|none"
)

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


MAX_COMMAND_CHARS = 2_500  # no command is longer; the cap also bounds the work per message
MAX_ITEMS = 20  # tasks one message may add

_UNDO = _rx(
    r"(?:undo|revert|reverse|take back|roll back)(?: (?:that|this|it|the last (?:change|one|thing)"
    r"|what you (?:just )?did|my last (?:change|message)|the last thing you did))?(?: please)?"
)
# The trash: "restore task 3", "bring back the milk task", "what did I delete?".
_TRASH_WORDS = r"(?:the )?(?:trash|bin|recycle bin|deleted (?:tasks|items|ones|things))"
_RESTORE = (
    _rx(
        r"(?:restore|undelete|recover|retrieve|bring back|get back|put back)"
        rf" (?P<ref>.+?)(?: (?:from|out of) {_TRASH_WORDS})?"
    ),
    _rx(rf"(?:bring|get|put) (?P<ref>.+?) back(?: (?:from|out of) {_TRASH_WORDS})?"),
)
_SHOW_TRASH = _rx(
    r"what(?:'s| is| did i| have i| was)? (?:in (?:the |my )?(?:trash|bin)|(?:just )?deleted?)"
    r"(?: (?:so far|recently|today|lately))?"
    rf"|(?:show|list|view|open|see)(?: me)?(?: my)? {_TRASH_WORDS}"
    r"|(?:my )?(?:trash|bin|deleted tasks)"
)
_EMPTY_TRASH = _rx(
    r"(?:empty|clear|purge|clean out|wipe|delete|erase)(?: out)?"
    rf"(?: (?:everything|all) in)? {_TRASH_WORDS}(?: for good| permanently| forever)?"
)
# Lists: "make a list called Work", "assign the milk to Sam", "what's in groceries?".
_CREATE_LIST = _rx(
    r"(?:make|create|add|start|set up|open)(?: me)?(?: a| another)?(?: new)?(?: shared)? list"
    r"(?: called| named| titled| for|:)? (?P<name>.+)"
    r"|new list(?: called| named|:)? (?P<name2>.+)"
)
_ASSIGN = _rx(r"(?:assign|hand|give) (?P<ref>.+?) to (?P<who>.+)")
_UNASSIGN = _rx(r"unassign (?P<ref>.+?)(?: from .+)?")
_SHOW_LIST = (
    _rx(r"(?:show|list|open|view|see|read)(?: me)?(?: the| my| our)? (?P<name>.+?) list"),
    _rx(
        r"what(?:'s| is| do i have| do we have| have i got)? (?:on|in) (?:the |my |our )?"
        r"(?P<name>.+?)(?: list)?"
    ),
)
_PLAN_STEPS = (
    _rx(
        r"(?:plan|plan out|break down|break up|split up|split) (?P<title>.+?)"
        r"(?: into(?: steps)?)?: (?P<steps>.+)"
    ),
    _rx(r"(?:break|split) (?P<title>.+?)(?: down| up)? into(?: steps)?:? (?P<steps>.+)"),
    _rx(r"(?:plan|plan out) (?P<title>.+?) (?:with steps|in steps|steps):? (?P<steps>.+)"),
)
_PLAN_ASK = _rx(
    r"(?:help me |can you help me |could you help me |let's |lets )?(?:plan|plan out|break down"
    r"|break up|split up)(?: for)? (?P<title>.+?)(?: into steps| in steps| step by step)?"
    r"|(?:break|split) (?P<title2>.+?) (?:down|up|into steps)(?: into steps)?"
)
_ADD_STEPS = (
    _rx(
        r"add (?:a |another |one more |the |some )?steps? (?:to|for|under) (?P<ref>.+?):"
        r" (?P<steps>.+)"
    ),
    _rx(r"add (?P<steps>.+?) as (?:a |another )?steps? (?:to|for|of|under) (?P<ref>.+)"),
)
_SHOW_STEPS = _rx(
    r"(?:what are |what're |show(?: me)? |list |tell me |whats |what's )?(?:the |my )?steps"
    r" (?:for|of|in|to) (?P<ref>.+)"
    r"|how far am i (?:with|on|in) (?P<ref2>.+)"
)
# "make it almond milk", "actually call it pay the rent": a pronoun and its new title.
_MAKE_IT = _rx(
    r"(?:make|call|change|turn) (?P<ref>it|that|this|that one|this one) (?:to |into )?(?P<new>.+)"
)
# "make task 2 at 9:30", "put it on friday", "can it be at 4pm": a task named plainly, and
# when it is due now.
_MAKE_AT = _rx(
    r"(?:make|have|put|schedule|do) (?P<ref>.+?) (?P<new>(?:at|for|on|by) .+)"
    r"|(?:can|could|should) (?P<ref2>it|that|this)(?: one)? be (?P<new2>.+)"
)
# "remind me about the dentist an hour before", "remind me 30 minutes before", "ping me the
# evening before the vet", "nudge me the morning of the haircut": a reminder for a task that
# has a due time, said after the task or before it.
_REMIND_BEFORE = (
    _rx(
        rf"{entities.REMIND_ME}(?: (?:about|of|for) (?P<ref>.+?))?"
        rf" (?P<before>{entities.REMINDER_WHEN})"
    ),
    _rx(
        rf"{entities.REMIND_ME} (?P<before>{entities.REMINDER_WHEN})"
        rf" (?P<ref>(?:the|my|task|#|it|that).*?)"
        r"(?: (?:comes|arrives|starts|begins|is due|is on|is here|gets here|visits))?"
        rf"(?P<at>{entities.REMINDER_AT})?"
    ),
)
# "make it repeat every week", "repeat task 2 every monday", "the bins repeat weekly".
_REPEAT = (
    _rx(
        r"(?:make|have|set|let|get|change) (?P<ref>.+?) (?:to )?(?:repeat|recur)(?:s|ring)?"
        r"(?: on)? (?P<new>.+)"
    ),
    _rx(r"(?:repeat|recur) (?P<ref>.+?) (?P<new>(?:every|each|daily|weekly|monthly|yearly)\b.*)"),
)
_REPEAT_AS = _rx(
    r"(?:make|have|set) (?P<ref>.+?) (?:to )?(?:be )?(?:an? )?"
    r"(?P<new>daily|weekly|fortnightly|monthly|yearly)(?: thing| task| event| one| job)?"
)
_REPEATS = _rx(
    r"(?P<ref>.+?) (?:should |will |needs to |has to |must )?(?:repeat|recur)s?"
    r"(?: on)? (?P<new>.+)"
)
# "stop repeating it", "don't repeat the bins any more", "make it a one-off", "no more
# repeats for the yoga", "the yoga doesn't need to repeat any more".
_ANY_MORE = (
    r"(?: any ?more| again| now| from now on| after all"
    r"| after (?:this|that|today|this one|this week|this month|this time))?"
)
_REPEATING = r"(?:repeating|recurring)"
_ONE_OFF = (
    r"(?:a one[- ]?off|one[- ]?off|a one[- ]?time thing|one[- ]?time|not repeat(?:ing)?"
    r"|non-?recurring"
    r"|just (?:the )?once)"
)
_STOP_REPEAT = (
    _rx(rf"(?:stop|quit) {_REPEATING} (?P<ref>.+?){_ANY_MORE}"),
    _rx(rf"(?:stop|quit) (?P<ref>.+?) (?:from )?{_REPEATING}{_ANY_MORE}"),
    _rx(rf"(?:stop|quit) (?:making|having|letting) (?P<ref>.+?) (?:repeat|recur){_ANY_MORE}"),
    _rx(
        r"(?:don't|dont|do not|no longer|no need to)(?: keep)? (?:repeat|repeating|recurring)"
        rf" (?P<ref>.+?){_ANY_MORE}"
    ),
    _rx(
        r"(?:turn|switch) off (?:the )?(?:repeats?|repeating|recurrence|recurring)"
        r"(?: (?:for|on|of) (?P<ref>.+))?"
    ),
    # "just do the book club once, not every month"
    _rx(r"do (?P<ref>.+?) (?:just )?once(?:,? not every (?:day|week|month|year|time))?"),
    _rx(rf"make (?P<ref>.+?) {_ONE_OFF}{_ANY_MORE}"),
    _rx(
        r"(?:stop|remove|cancel|delete|clear|drop|end) the (?:repeats?|repeating|recurrence"
        r"|repetition|series)(?: (?:from|on|of|for) (?P<ref>.+))?"
    ),
    _rx(rf"no more (?:repeats?|{_REPEATING}|recurrences?)(?: (?:for|of|on|with) (?P<ref>.+))?"),
    _rx(
        r"i (?:don't|dont|do not|no longer) (?:want|need) (?P<ref>.+?) to (?:repeat|recur)"
        rf"{_ANY_MORE}"
    ),
)
_STOPS_REPEATING = (
    _rx(
        r"(?P<ref>.+?) (?:doesn't|does not|don't|do not|shouldn't|should not|won't|needn't"
        rf"|need not|no longer)(?: (?:need|have) to| need)? (?:repeat|recur)(?:ing)?{_ANY_MORE}"
    ),
    _rx(rf"(?P<ref>.+?) (?:is|are|should be|can be|will be) {_ONE_OFF}{_ANY_MORE}"),
    _rx(rf"(?P<ref>.+?) (?:can|should|may) stop {_REPEATING}{_ANY_MORE}"),
    _rx(
        r"(?P<ref>.+?) (?:isn't|is not|aren't|are not|is no longer|are no longer)(?: an?)?"
        rf" (?:daily|weekly|fortnightly|monthly|yearly|{_REPEATING})(?: thing)?{_ANY_MORE}"
    ),
    _rx(rf"(?:can|could) (?P<ref>.+?) (?:stop|quit) {_REPEATING}{_ANY_MORE}"),
)
# "I emailed Jo", "got the apples": past tense means done.
_PAST = _rx(
    r"(?P<who>(?:(?:i|we)(?:'ve|'d)? )?(?:(?:just|already|finally|have|had) )*)"
    r"(?P<verb>[a-z]{2,}ed|got|bought|paid|sent|wrote|took|made|did|rang|met|sold|fed|brought"
    r"|went|swept|sorted|ate|drank|found|gave|ran|saw|spoke|told|hung|threw|put|cut|shut|dealt"
    r"|taken|written|given|done|eaten|seen|spoken|sent off|dropped off|picked up) (?P<rest>.+)"
)
# Past tenses spelt as the present: done only with "I", "we", "just"...
_SAME_FORM = frozenset({"put", "cut", "shut"})
# Verbs that say only that a thing was done: "finished that one" is "that one" done.
_DID_VERBS = frozenset(
    {"did", "done", "finished", "completed", "sorted", "handled", "tackled", "ticked", "closed"}
)
_DID_PHRASE = _rx(
    r"(?:knocked (?:out|off)|wrapped up|crossed off|ticked off|checked off|got through"
    r"|sorted out|took care of|dealt with) (?P<rest>.+)"
    r"|(?:knocked|crossed|ticked|checked) (?P<rest2>.+) off"
)
_DID_SPLIT = re.compile(r",\s*(?:and\s+)?|\s+and\s+", re.I)
_NOT_PAST = frozenset(
    {"need", "feed", "seed", "speed", "bleed", "breed", "weed", "proceed", "exceed", "succeed",
     "bed", "red", "shed", "wed", "embed", "shred", "sled", "bred"}
)  # fmt: skip
# "the plumber one", "number 2", "the second": a reference alone, answering "Which one?".
_BARE_REF = _rx(
    r"(?:the|that|number|#|task|todo)\b.*|no\.? ?\d{1,9}|\d{1,9}"
    r"|(?:first|second|third|fourth|fifth|last)(?: one)?|.+ one"
)
# "no", "never mind": the answer to "Which one?" that wants none of them.
_NONE_OF_THEM = _rx(
    r"(?:no|nope|nah|none|neither|none of them|never ?mind|forget it|cancel|stop|leave it"
    r"|nothing|no thanks|no,? (?:thanks|thank you))"
)
_MORE = _rx(r"(?:and|also|plus|oh and|and also|oh also|as well as)(?: add)? (?P<text>.+)")
_ITEM_SPLIT = re.compile(r"\s*(?:\n|;|,\s*(?:and|&)\s+|,\s*|\s+(?:and|&)\s+)\s*", re.I)
_STEP_SPLIT = re.compile(r"\s*(?:\n|;|,\s*(?:and|then|&)\s+|,\s*|\s+(?:and|then|&)\s+)\s*", re.I)
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d{1,2}[.)])\s+", re.M)
# Verbs that start a task of their own: "email Jo and book a table" is two tasks, "buy salt
# and pepper" one.
TASK_VERBS = frozenset(
    [
        "call", "email", "e-mail", "text", "phone", "ring", "buy", "get", "book", "pay", "send",
        "pick", "write", "clean", "fix", "finish", "submit", "renew", "schedule", "order",
        "return", "water", "walk", "feed", "wash", "cancel", "check", "make", "prepare", "read",
        "print", "post", "mail", "visit", "meet", "take", "bring", "tidy", "cook", "file",
        "update", "review", "reply", "answer", "sign", "collect", "drop", "grab", "pack",
        "move", "sell", "install", "repair", "paint", "plan", "organize", "organise",
        "register", "apply", "vacuum", "iron", "mow", "shop", "study", "practice", "practise",
        "learn", "watch", "charge", "back", "ask", "tell", "remind", "invite", "thank", "cut",
        "fill", "empty", "change", "replace", "refill", "print", "scan", "download", "upload",
        "do",
    ]
)  # fmt: skip
_ARTICLE_START = re.compile(r"^(?:a|an|some)\s+", re.I)


def parse(message: str, context: Context | None = None) -> list[Command]:
    """What the user asked for, as commands in order; empty when it is not understood."""
    context = context or Context()
    raw = _collapse_lines(message)
    text = _collapse(raw).rstrip(" .!?,;:")
    if not text:
        return []
    if len(text) > MAX_COMMAND_CHARS:
        return [Say(TOO_LONG)]
    if _BULLET.search(raw) and (lines := _bullets(raw)):
        return lines
    if _THANKS.fullmatch(text):
        return [Say(WELCOME)]
    if _GREETING.fullmatch(text):
        return [Help()]
    if context.last_added and (more := _MORE.fullmatch(text)) and _command(more["text"]) is None:
        return _adds(_ARTICLE_START.sub("", more["text"]))
    if len(parts := _REQUESTS.split(text)) > 1 and (several := _several(parts)):
        return several
    instead = text.lower().endswith(" instead")
    text = _strip_request(text)
    move = _INSTEAD.fullmatch(text) if instead else None
    if move and names_one(move["ref"]) and (moved := _moved(move["ref"], move["new"])):
        return [moved]  # "can we do the haircut on thursday instead"
    if _GREETING.fullmatch(text):
        return [Help()]
    if _NONE_OF_THEM.fullmatch(text):  # to a question of ours, or to nothing: change nothing
        return [Say(LEFT_AS_IS)]
    if context.question_from and _command(text) is None and _BARE_REF.fullmatch(text):
        earlier = parse(context.question_from)
        if len(earlier) == 1 and isinstance(earlier[0], RefCommand):
            return [replace(earlier[0], ref=text)]
    return _understood(text)


# Where one message holds several requests: "Add X. Also add Y.", "add X and also Y".
_REQUESTS = re.compile(
    r"((?:[.!?;]\s+|,?\s+and\s+|,\s+)also\s+|[.!?;]\s+"
    r"|\s*[\u2600-\u27bf\U0001f300-\U0001faff][\u2600-\u27bf\U0001f300-\U0001faff\ufe0f]*\s+)",
    re.I,
)


def _several(parts: list[str]) -> list[Command]:
    """The commands of several requests in one message, when each is understood alone (a
    bare "Y" after "and also" is one more task; chatter before the first is passed over)
    and together they add, list, and change at most one existing task besides those said
    done; else nothing."""
    commands: list[Command] = []
    for i in range(0, len(parts), 2):
        part = _strip_request(parts[i])
        also = i > 0 and "also" in parts[i - 1].lower()
        found = _understood(part) if part else []
        if not found and also and commands and isinstance(commands[-1], AddTask):
            found = _adds(_ARTICLE_START.sub("", part))
        if not found and (commands or not _chatter(part)):
            return []  # only chatter before the first request is passed over
        commands += found
    changes = [c for c in commands if isinstance(c, UpdateTask | DeleteTask)]
    allowed = AddTask | SetCompleted | UpdateTask | DeleteTask | ListTasks
    return commands if len(changes) <= 1 and all(isinstance(c, allowed) for c in commands) else []


# Words that start a request: a sentence starting so that is not understood is a request
# misread, never chatter to pass over.
_REQUEST_VERBS = frozenset(
    [
        "add", "delete", "remove", "mark", "rename", "postpone", "push", "complete", "remind",
        "set", "show", "list", "undo", "restore", "reopen", "stop", "repeat", "bump", "delay",
        "reschedule", "assign", "put", "create", "tick", "cross", "clear", "drop", "edit",
        "ping", "nudge", "alert", "notify", "make",
    ]
)  # fmt: skip


def _chatter(sentence: str) -> bool:
    """ "ugh I keep forgetting the charger haha", "so tired": a sentence of conversation
    beside a request ("... add buy a charger"), passed over; a sentence that starts like a
    request ("move the dentist to the afternoon") is not."""
    first = sentence.split(" ", 1)[0].lower().strip(",:;!?")
    return first not in TASK_VERBS and first not in _REQUEST_VERBS


def _understood(text: str, *, date_first: bool = True) -> list[Command]:
    if (command := _command(text)) is not None:
        if isinstance(command, AddTask) and command.parent is None:
            return _adds(command.text, command.priority, remind=command.remind)
        return [command]
    if match := _REMEMBER.match(text):
        about = bool(match["about"])
        return _adds(text[match.end() :], remind=bool(match["remind"]), about=about)
    if match := _NEED_TO.match(text):
        rest = text[match.end() :]
        command = _command(rest)
        # "I need to finish task 2" is a command; "I need to finish the report" is a new task.
        if isinstance(command, ListTasks) or (
            isinstance(command, SetCompleted | DeleteTask | UpdateTask)
            and explicit_id(command.ref) is not None
        ):
            return [command]
        if isinstance(command, AddTask):
            return _adds(command.text, command.priority)
        return _adds(rest)
    if done := _did(text):
        return done
    if date_first and (dated := _date_first(text)):
        return dated
    if _reads_as_task(text):
        return _adds(text)
    return []


def _did(text: str) -> list[Command]:
    """ "I emailed Jo", "bought milk and paid rent": past tense means done; when every
    part of the sentence says a thing was done, each is a task done."""
    pieces = [_done(piece) for piece in _DID_SPLIT.split(text)]
    done = [piece for piece in pieces if piece is not None]
    if len(done) > 1 and len(done) == len(pieces):
        return list(done)
    whole = _done(text)
    return [whole] if whole else []


def _done(text: str) -> SetCompleted | None:
    match = _PAST.fullmatch(text)
    verb = match["verb"].lower() if match else ""
    if match is None or verb in _NOT_PAST or (verb in _SAME_FORM and not match["who"]):
        return None  # "put the bins out" asks; "I put the bins out" says it is done
    if match["verb"].lower() in _DID_VERBS and points_at_one(match["rest"]):
        return SetCompleted(match["rest"], completed=True)  # "finished that one" after a list
    if phrase := _DID_PHRASE.fullmatch(f"{match['verb']} {match['rest']}"):
        rest = phrase["rest"] or phrase["rest2"]
        return SetCompleted(rest, completed=True)  # "knocked out the first one", "... that off"
    return SetCompleted(f"{match['verb']} {match['rest']}", completed=True)


# A sentence starting so is a question or a remark, not a task: "what's on tomorrow?"
_NOT_A_TASK = frozenset(
    [
        "what", "what's", "whats", "when", "where", "why", "who", "how", "which", "is", "are",
        "am", "was", "were", "do", "does", "did", "can", "could", "would", "will", "should",
        "i", "i'm", "im", "i'll", "we", "we're", "it", "it's", "its", "that", "this", "there",
        "you", "he", "she", "they",
    ]
)  # fmt: skip


# Words of conversation: a sentence without a task's verb that has one is no task.
_CHAT_WORDS = frozenset(
    [
        "you", "me", "i", "we", "us", "then", "thanks", "thank", "thx", "not", "nothing",
        "no", "ok", "okay", "see", "talk", "same", "busy", "free", "maybe", "bye", "lol",
        "yes", "yeah", "sure", "nope", "later", "again", "hi", "hello", "much", "lot",
    ]
)  # fmt: skip


def _reads_as_task(text: str) -> bool:
    """ "call the vet tomorrow morning", "urgent: call the bank", "dentist next tuesday at
    3pm", "submit timesheet #work p1", "take vitamins daily": words with a date, a time, a
    repeat, a priority or a tag read as a new task, as a quick-add box reads them; a bare
    "buy milk" is not understood."""
    rest, tags = entities.take_tags(text)
    rest = entities.take_reminder(rest)[0]
    rest, level = entities.take_priority(rest)
    first = rest.split(" ", 1)[0].lower()
    if not rest or first in _NOT_A_TASK or text.endswith("?"):
        return False
    if tags or (level is not None and first in TASK_VERBS):
        return True
    words = {w.strip(",.!;:") for w in rest.lower().split(" ")}
    if first not in TASK_VERBS and words & _CHAT_WORDS:
        return False  # "busy day tomorrow", "see you monday", "not today": talk, not tasks
    rest, repeat = entities.take_repeat(rest)
    if repeat is not None:
        return bool(rest)  # "water the plants every other thursday"
    if not entities.might_be_date(rest):
        return False
    rest, due = entities.take_date(rest, entities.ANY_DAY, quick=entities.marked(text))
    return due is not None and bool(rest.strip(" ,;:-"))


def _date_first(text: str) -> list[Command]:
    """ "tomorrow I need to call the bank", "Friday: email Jo, book a table": a date before
    the tasks it is for."""
    words = text.split(" ")
    if len(words) < 2 or not entities.might_be_date(" ".join(words[:2])):
        return []
    if entities.starts_with_repeat(text):  # "last monday of every month ...": no one day
        return []
    for size in range(min(4, len(words) - 1), 0, -1):  # the longest date wins
        when = " ".join(words[:size]).rstrip(":,-")
        if not entities.is_date(when):
            continue
        rest = " ".join(words[size:]).lstrip(":,- ")
        found = _understood(rest, date_first=False) or (
            _adds(rest) if rest.split(" ", 1)[0].lower() in TASK_VERBS else []
        )
        if found and all(isinstance(c, AddTask) and c.parent is None for c in found):
            return [replace(c, text=f"{c.text} {when}") for c in found if isinstance(c, AddTask)]
        return []
    return []


def _adds(
    text: str, priority: Priority | None = None, *, remind: bool = False, about: bool = False
) -> list[Command]:
    """One AddTask per task the text names: "apples, pears and flour" is three."""
    items = split_items(text) or [""]
    return [AddTask(item, priority, remind=remind, about=about) for item in items]


def split_items(text: str, *, steps: bool = False) -> list[str]:
    """The tasks in `text`, split where a human reads several. A quoted title is one."""
    text = text.strip(" ,;:-")
    if not text or text[0] in "'\"" or len(text) > entities.MAX_DATE_TEXT:
        return [text] if text else []
    rest, level = entities.take_priority(text)
    pieces = [p for p in (_STEP_SPLIT if steps else _ITEM_SPLIT).split(rest) if p]
    if steps or len(pieces) < 2:
        return pieces[:MAX_ITEMS] if steps else [text]
    has_comma = "," in rest or ";" in rest
    first_verb = pieces[0].split(" ", 1)[0].lower()
    if not has_comma and not all(p.split(" ", 1)[0].lower() in TASK_VERBS for p in pieces[1:]):
        return [text]  # "buy salt and pepper", "call mom and dad": one task
    if any(_starts_clause(p) for p in pieces[1:]) or entities.is_date(pieces[-1]):
        return [text]  # ", it's for the party", ", which is due friday": one task
    if entities.take_reminder(pieces[-1])[1] is not None:
        return [text]  # "..., remind me an hour before": one task
    if first_verb in TASK_VERBS and " " in pieces[0]:
        verb = pieces[0].split(" ", 1)[0]
        pieces = [pieces[0]] + [
            p if p.split(" ", 1)[0].lower() in TASK_VERBS else f"{verb} {p}" for p in pieces[1:]
        ]
    suffix = f", {level} priority" if level and level != "none" else ""
    return [p + suffix for p in pieces[:MAX_ITEMS]]


_CLAUSE_STARTS = frozenset(
    [
        "it", "it's", "its", "which", "that", "who", "because", "so", "but", "then", "or", "if",
        "when", "this", "is", "was",
    ]
)  # fmt: skip


def _starts_clause(piece: str) -> bool:
    return piece.split(" ", 1)[0].lower() in _CLAUSE_STARTS


def _collapse_lines(text: str) -> str:
    return text.translate(_STRAIGHT_QUOTES).replace("\r", "")


def _bullets(raw: str) -> list[Command]:
    """A bullet list under an optional heading ("add these:") is one task per bullet."""
    lines = [line.strip() for line in raw.split("\n") if line.strip()]
    items = [_BULLET.sub("", line) for line in lines if _BULLET.match(line)]
    heading = [line for line in lines if not _BULLET.match(line)]
    if len(heading) > 1 or not items:
        return []
    if heading and not _HEADING.fullmatch(_collapse(heading[0]).rstrip(" .!?:")):
        return []
    return [AddTask(_collapse(item).rstrip(" .;")) for item in items[:MAX_ITEMS]]


_HEADING = _rx(
    r"(?:(?:please |pls |can you |could you )?(?:add|remind me(?: to)?|i need to|todo|to-?dos?"
    r"|tasks?|new tasks?|shopping list|groceries|my list)(?: these| the following| this)?"
    r"(?: (?:tasks?|items?|things?|to my list))?"
    r"|(?:things|stuff) (?:to do|i need to do)(?: today| this week)?)"
)


def _command(text: str) -> Command | None:
    """A request about memories or documents, a command that starts with its verb, a list
    request, or "task 3 is done"."""
    if (intent := memory_request(text)) is not None:
        return intent
    if (intent := document_request(text)) is not None:
        return intent
    for pattern, build in _VERB_RULES:
        if (match := pattern.fullmatch(text)) and (intent := build(match)) is not None:
            return intent
    if (intent := list_request(text)) is not None:
        return intent
    for pattern, build in _STATE_RULES:
        if (match := pattern.fullmatch(text)) and (intent := build(match)) is not None:
            return intent
    return None


Rule = Callable[[re.Match[str]], Command | None]


def _ref(match: re.Match[str]) -> str | None:
    """The task a command names; "a reminder" or "a new task" never names an existing one."""
    ref = match["ref"]
    return None if ref.split(" ", 1)[0].lower() in ("a", "an", "another", "some", "up") else ref


def _one_ref(match: re.Match[str]) -> str | None:
    """The task, when the sentence has no verb up front and must name it plainly: "task 3",
    "the report", "that one", or the task's own words ("call the vet is done")."""
    ref: str = match["ref"]
    own_words = " " in ref and ref.split(" ", 1)[0].lower() in TASK_VERBS
    return ref if names_one(ref) or own_words or points_at_one(ref) else None


def _set_completed(completed: bool, ref: Callable[[re.Match[str]], str | None] = _ref) -> Rule:
    def build(match: re.Match[str]) -> Command | None:
        found = ref(match)
        return None if found is None else SetCompleted(found, completed=completed)

    return build


def _plan(match: re.Match[str]) -> Command | None:
    steps = split_items(match["steps"], steps=True)
    return Plan(match["title"], tuple(steps)) if steps else None


def _add_steps(match: re.Match[str]) -> Command | None:
    steps = split_items(match["steps"], steps=True)
    if len(steps) != 1:
        return Say(
            "I add one step at a time to an existing task, for example: "
            '"Add a step to task 2: book the van".'
        )
    return AddTask(steps[0], parent=match["ref"])


def _make_it(match: re.Match[str]) -> Command | None:
    if entities.REPEAT_START.match(match["new"]):
        return UpdateTask(match["ref"], "repeat", match["new"])  # "make it every wednesday"
    if entities.priority_in(match["new"]):
        return None  # "make it urgent": the priority rule
    if entities.is_date(match["new"]):  # "make it friday", "can you make it 6pm instead"
        return UpdateTask(match["ref"], "due", match["new"])
    return UpdateTask(match["ref"], "title", match["new"])


def _add(match: re.Match[str]) -> Command:
    reminder = (match.groupdict().get("noun") or "").lower() == "reminder"
    return AddTask(match["title"], _LEVELS.get((match["level"] or "").lower()), remind=reminder)


def _shift_by(match: re.Match[str]) -> Command | None:
    ref = _ref(match)
    if ref is None or entities.shift(match["by"]) is None:
        return None
    return UpdateTask(ref, "due", match["by"])


def _change(match: re.Match[str]) -> Command | None:
    ref = _ref(match)
    return None if ref is None else _update(match["verb"].lower(), ref, match["new"])


def _priority(match: re.Match[str]) -> Command | None:
    ref = _ref(match)
    return None if ref is None else UpdateTask(ref, "priority", match["level"])


def _no_priority(match: re.Match[str]) -> Command | None:
    """A priority taken away; said of no task ("remove the priority"), of the one in view."""
    ref = _ref(match) if match["ref"] else "it"
    return None if ref is None else UpdateTask(ref, "priority", "none")


def _prioritize(match: re.Match[str]) -> Command | None:
    ref = _ref(match)
    return None if ref is None else UpdateTask(ref, "priority", "low" if match["de"] else "high")


def _restore(match: re.Match[str]) -> Command | None:
    ref = _ref(match)
    return None if ref is None else RestoreTask(ref)


def _delete_matching(match: re.Match[str]) -> Command:
    what = _ABOUT.sub("", (match["what"] or "").strip())
    what = _MANY_NOUN_END.sub("", what).strip(" '\"")
    if what.lower() in _DONE_WORDS or what.lower().startswith(("that are done", "i did")):
        return DeleteMatching(None, "completed")
    if not what:  # "delete everything": not at once, whatever is asked after
        return DeleteTask("everything")
    return DeleteMatching(what)


def _delete(match: re.Match[str]) -> Command | None:
    ref = _ref(match)
    return None if ref is None else DeleteTask(ref)


def _ask_what_to_change(match: re.Match[str]) -> Command | None:
    if _ref(match) is None:
        return None
    return Say(
        f"What should I change {shorten(match['ref'])} to? For example: "
        '"Rename task 1 to Call mom" or "Move task 1 to Friday".'
    )


def _can_wait(match: re.Match[str]) -> Command | None:
    ref = _ref(match)
    return None if ref is None else UpdateTask(ref, "priority", "low")


def _make_at(match: re.Match[str]) -> Command | None:
    ref, new = match["ref"] or match["ref2"], match["new"] or match["new2"]
    if explicit_id(ref) is None and ref.lower() not in ("it", "that", "this"):
        return None  # "make dinner at 7", "put milk on the list": no task named
    return UpdateTask(ref, "due", new) if entities.is_date(new) else None


def _remind_before(match: re.Match[str]) -> Command | None:
    ref = match["ref"] or "it"
    before = match["before"] + (match.groupdict().get("at") or "")
    if entities.read_reminder(before) is None:
        return None
    if entities.might_be_date(ref) and entities.says_date(ref):
        return None  # "remind me about the dentist at 3pm, an hour before": a new task
    return UpdateTask(ref, "remind", before)


def _repeat(match: re.Match[str]) -> Command | None:
    ref = _ref(match)
    if ref is None or not entities.REPEAT_START.match(match["new"]):
        return None
    return UpdateTask(ref, "repeat", match["new"])


def _repeat_as(match: re.Match[str]) -> Command | None:
    """ "make the gym a weekly thing": only for a task named plainly ("make bread weekly"
    is a new task)."""
    ref = _one_ref(match)
    return None if ref is None else UpdateTask(ref, "repeat", match["new"])


def _moved(ref: str | None, new: str) -> Command | None:
    """A task moved to the day or time `new` says, when it says one."""
    new = entities.hour_first(new)
    if ref is None or not (entities.is_date(new) or entities.shift(new) is not None):
        return None
    return UpdateTask(ref, "due", new)


def _been_done(match: re.Match[str]) -> Command | None:
    if match["verb"].lower() in _NOT_A_DEED:
        return None
    return _set_completed(True, _one_ref)(match)


def _stop_repeat(match: re.Match[str]) -> Command:
    return UpdateTask(match["ref"] or "it", "repeat", "never")


def _is_due(match: re.Match[str]) -> Command | None:
    ref = _one_ref(match)
    return None if ref is None else UpdateTask(ref, "due", match["new"])


# In order; a rule whose builder returns None lets the next one try.
_VERB_RULES: list[tuple[re.Pattern[str], Rule]] = [
    (_UNDO, lambda _: Undo()),
    *((pattern, _no_priority) for pattern in _NO_PRIORITY),
    (_SHOW_TRASH, lambda _: ShowTrash()),
    (_CREATE_LIST, lambda m: CreateList((m["name"] or m["name2"]).strip(" '\""))),
    (_UNASSIGN, lambda m: Assign(m["ref"], None)),
    (_ASSIGN, lambda m: Assign(m["ref"], m["who"].strip(" '\""))),
    (_EMPTY_TRASH, lambda _: EmptyTrash()),
    *((pattern, _restore) for pattern in _RESTORE),
    *((pattern, _plan) for pattern in _PLAN_STEPS),
    *((pattern, _add_steps) for pattern in _ADD_STEPS),
    (_SHOW_STEPS, lambda m: ShowSteps(m["ref"] or m["ref2"])),
    (_PLAN_ASK, lambda m: Plan(m["title"] or m["title2"], ())),
    *((pattern, _stop_repeat) for pattern in _STOP_REPEAT),
    (_REPEAT_AS, _repeat_as),
    *((pattern, _repeat) for pattern in _REPEAT),
    *((pattern, _remind_before) for pattern in _REMIND_BEFORE),
    (_MAKE_IT, _make_it),
    (_MAKE_AT, _make_at),
    *((pattern, _set_completed(False)) for pattern in _REOPEN),
    *((pattern, _set_completed(True)) for pattern in _COMPLETE),
    (_DONE_WITH, _set_completed(True)),
    (_BACK_FROM, _set_completed(True, _one_ref)),
    (_COMPLETE_TERSE, _set_completed(True, _one_ref)),
    (_DELETE_DONE, lambda _: DeleteMatching(None, "completed")),
    (_DELETE_ALL, _delete_matching),
    (_DELETE, _delete),
    *((pattern, _add) for pattern in _ADD),
    (_PUT_ON_LIST, _add),
    (_ADD_AFTER, _add),
    *((pattern, _shift_by) for pattern in _SHIFT_BY),
    (_MOVE_TO, lambda m: _moved(_ref(m), m["new"])),
    (_UPDATE, _change),
    (_PRIORITY, _priority),
    (_PRIORITIZE, _prioritize),
    (_UPDATE_INCOMPLETE, _ask_what_to_change),
]
_STATE_RULES: list[tuple[re.Pattern[str], Rule]] = [
    *((pattern, lambda m: ListTasks(list=m["name"])) for pattern in _SHOW_LIST),
    (_CAN_WAIT, _can_wait),
    *((pattern, _stop_repeat) for pattern in _STOPS_REPEATING),
    (_REPEATS, _repeat),
    (_IS_UNDONE, _set_completed(False, _one_ref)),
    (_IS_DONE, _set_completed(True, _one_ref)),
    (_BEEN_DONE, _been_done),
    (_WAS_MOVED, lambda m: _moved(_one_ref(m), m["new"])),
    (_IS_DUE, _is_due),
]


def _update(verb: str, ref: str, new: str) -> Command:
    """ "change X to Y": which field Y is for follows from the verb, a named field, or Y."""
    field: Field | None = None
    if match := _FIELD_OF.fullmatch(ref) or _FIELD_AFTER.fullmatch(ref):
        ref, field = match["ref"], _FIELDS[match["field"].lower()]
    if verb in _RENAME_VERBS:
        field = "title"
    elif verb in _MOVE_VERBS and field in (None, "due"):
        # "move task 3 to friday" is a date; "move task 3 to work", a list (if there is one);
        # "push the dentist to 3 tomorrow", an hour.
        new = entities.hour_first(new)
        field = "due" if entities.is_date(new) or entities.shift(new) is not None else "list"
    if field is None:
        if entities.is_date(new):
            field = "due"
        elif _PRIORITY_VALUE.fullmatch(new):
            field = "priority"
        else:
            field = "title"
    return UpdateTask(ref, field, new)
