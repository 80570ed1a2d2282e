"""Recognizers for the built-in entities of a message: dates and times of day, repeats,
reminders, numbers, priorities and tags.

Dates are read by `dateparser`; what it misreads or cannot read is first rewritten by a
small table into something it reads ("next weekend" -> "next saturday") or computed here
("the 20th", "the end of the month"). Each recognizer returns the value and the text
without the words that said it, so a title never keeps "by Thursday" or ", it's urgent".
"""

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from functools import cache
from typing import Any, TypeVar

from dateparser.search import search_dates  # type: ignore[import-untyped]
from rapidfuzz import fuzz, process

from backend.models.task import Priority
from backend.services.recurrence import Repeat, bare_hour, find_repeat


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


# --- Numbers ----------------------------------------------------------------------------

_CARDINALS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty",
]  # fmt: skip
_ORDINALS = [
    "zeroth", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
    "ninth", "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth",
    "sixteenth", "seventeenth", "eighteenth", "nineteenth", "twentieth",
]  # fmt: skip
NUMBER_WORDS = {word: n for n, word in enumerate(_CARDINALS)}
ORDINAL_WORDS = {word: n for n, word in enumerate(_ORDINALS) if n} | {"last": -1}
_ORDINAL_DIGITS = _rx(r"(\d{1,2})(?:st|nd|rd|th)")


def number(word: str) -> int | None:
    """ "4", "#4", "four" -> 4."""
    word = word.lower().lstrip("#")
    if word.isdigit() and len(word) <= 9:
        return int(word)
    return NUMBER_WORDS.get(word)


def ordinal(word: str) -> int | None:
    """ "third", "3rd" -> 3; "last" -> -1."""
    word = word.lower()
    if match := _ORDINAL_DIGITS.fullmatch(word):
        return int(match.group(1))
    return ORDINAL_WORDS.get(word)


# --- Priorities -------------------------------------------------------------------------

# A cue and the priority it means; longer cues first so "not urgent" wins over "urgent".
PRIORITY_CUES: tuple[tuple[str, Priority], ...] = (
    ("not urgent", "low"),
    ("not important", "low"),
    ("no rush", "low"),
    ("no hurry", "low"),
    ("low priority", "low"),
    ("low prio", "low"),
    ("whenever i can", "low"),
    ("whenever", "low"),
    ("someday", "low"),
    ("when i get a chance", "low"),
    ("high priority", "high"),
    ("high prio", "high"),
    ("top priority", "high"),
    ("as soon as possible", "high"),
    ("asap", "high"),
    ("urgent", "high"),
    ("urgently", "high"),
    ("important", "high"),
    ("critical", "high"),
    ("medium priority", "medium"),
    ("normal priority", "medium"),
    ("without a priority", "none"),
    ("without priority", "none"),
    ("no priority", "none"),
    # Todoist's quick-add marks: p1 (Todoist's red, "urgent") is high, p2 medium, p3 low,
    # and p4 is Todoist's own "no priority": none.
    ("p1", "high"),
    ("p2", "medium"),
    ("p3", "low"),
    ("p4", "none"),
)
_CUE = "|".join(re.escape(cue) for cue, _ in PRIORITY_CUES)
_LEAD = r"(?:(?:it'?s|it is|this is|that'?s|thats|very|really|super|quite|pretty|kinda|and)\s+)*"
_PRIORITY_END = _rx(
    rf"(?:^|[\s,;:!(-]+){_LEAD}(?:with\s+|at\s+|as\s+)?(?:an?\s+)?(?P<cue>{_CUE})[\s!.)]*$"
)
_PRIORITY_START = _rx(rf"^(?P<cue>{_CUE})\s*[:,!-]?\s+")
_PRIORITY_ANY = _rx(rf"(?:,\s*|\b){_LEAD}(?P<cue>{_CUE})\b[\s,!]*")
_PRIORITY_MARK = _rx(r"(?<!\S)(?P<cue>p[1-4])(?!\S)")  # a Todoist mark, anywhere
_CUES = dict(PRIORITY_CUES)


def take_priority(text: str) -> tuple[str, Priority | None]:
    """A priority said at the start or end of `text` ("urgent: ...", "..., it's urgent"), or
    marked anywhere ("book flights p1 by friday")."""
    for pattern in (_PRIORITY_END, _PRIORITY_START, _PRIORITY_MARK):
        if match := pattern.search(text):
            rest = " ".join((text[: match.start()] + " " + text[match.end() :]).split())
            rest = rest.strip(" ,;:-")
            return rest, _CUES[" ".join(match["cue"].lower().split())]
    return text, None


def marked(text: str) -> bool:
    """Is `text` typed as in a quick-add box, with a `p1`...`p4` or a `#tag`? There a short
    day name at the end is a day ("mow the lawn sun p2"), as Todoist reads it."""
    return bool(_PRIORITY_MARK.search(text) or _TAG.search(text))


def priority_in(text: str) -> Priority | None:
    """A priority cue anywhere in `text` ("make it urgent", "set it to low priority")."""
    match = _PRIORITY_ANY.search(text)
    return _CUES[" ".join(match["cue"].lower().split())] if match else None


# --- Tags -------------------------------------------------------------------------------

_TAG = _rx(r"(?<!\S)#(?P<tag>[a-z][\w-]{0,31})(?=[\s,;.!?]|$)")
MAX_TAGS = 10


def take_tags(text: str) -> tuple[str, list[str]]:
    """Todoist-style tags ("#errands"), each once, and the text without them."""
    tags = list(dict.fromkeys(match["tag"] for match in _TAG.finditer(text)))
    return " ".join(_TAG.sub(" ", text).split()).strip(" ,;:-"), tags[:MAX_TAGS]


# --- Reminders --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reminder:
    """When a task's reminder fires, said against its due time: `before` it ("30 minutes
    before"), or, with `at`, at that time of day so many days before its due day ("the
    evening before": a day, 18:00; "the morning of": no day, 09:00)."""

    before: timedelta = timedelta(0)
    at: time | None = None


# The parts of a day a reminder names ("the evening before") and their hour, as dateparser
# reads "tomorrow morning", "tomorrow afternoon", "tomorrow evening", and "tonight".
PARTS_OF_DAY = {"morning": time(9), "afternoon": time(15), "evening": time(18), "night": time(20)}
_PART = r"(?P<part>morning|afternoon|evening|night)"
_AMOUNT = r"(?:(?P<half>half\s+an?)|(?P<n>\d{1,3}|an?|[a-z]+))"
BEFORE_WORDS = r"(?:before(?:hand)?|earlier|early|ahead(?:\s+of\s+time)?|in\s+advance)"
_CLOCK = r"(?:\d{1,2}(?:[:.]\d\d)?\s*(?:[ap]\.?m\b\.?)?|noon|midday)"
_AT = rf"(?:\s+at\s+(?P<clock>{_CLOCK}))?"
_BEFORE = (
    rf"{_AMOUNT}\s+(?P<unit>minutes?|mins?|hours?|hrs?|days?|weeks?)\s+{BEFORE_WORDS}"
    r"(?:\s+(?:it'?s|it\s+is)\s+due)?"
)
# Each way of saying when, with the day it counts back from: "the day before at 6pm",
# "the night before", "the morning of", "on the day at 8".
_WHEN: tuple[str, ...] = (
    rf"{_BEFORE}{_AT}",
    rf"(?:on\s+)?the\s+(?:(?P<eve>day)|{_PART})\s+before{_AT}",
    r"(?:on\s+)?(?:the|that)\s+(?P<same>morning|afternoon|evening)(?:\s+of(?:\s+the\s+day)?)?",
    rf"on\s+the\s+(?P<day>day)(?:\s+itself|\s+of)?{_AT}",
    # the time first: "at 8am on the day of", "at 6pm the day before"
    rf"at\s+(?P<clock>{_CLOCK})\s+(?:on\s+the\s+(?P<day>day)(?:\s+itself|\s+of)?"
    r"|(?:on\s+)?the\s+(?P<eve>day)\s+before)",
)
_WHEN_READ = tuple(_rx(pattern) for pattern in _WHEN)
# The same phrases without their groups, to be part of a larger pattern.
REMINDER_WHEN = "(?:{})".format("|".join(re.sub(r"\(\?P<\w+>", "(?:", p) for p in _WHEN))
REMIND_ME = (
    r"(?:(?:remind|ping|alert|notify|warn|nudge|text|message)\s+me"
    r"|give\s+me\s+an?\s+(?:heads[\s-]?up|nudge|shout|ping|reminder)"
    r"|(?:set|add|put|create|get|have)\s+(?:me\s+)?an?\s+reminder"
    r"|i\s+(?:want|need|'d\s+like|would\s+like)\s+an?\s+reminder)"
)
# A time of day said after the task a reminder is for: "the day before the dentist at 5pm".
REMINDER_AT = rf"\s+at\s+{_CLOCK}"
_REMINDER = _rx(
    rf"(?:^|[\s,;:-]+)(?:and\s+)?(?:{REMIND_ME}|(?:with\s+|set\s+|add\s+)?an?\s+reminder)"
    rf"\s+(?P<when>{REMINDER_WHEN})(?=$|[\s,;:.!?])"
)
_REMINDER_BARE = _rx(rf"(?:^|[\s,;:-]+)(?P<when>{_BEFORE})$")
_REMINDER_ALONE = _rx(rf"(?:{REMIND_ME}\s+)?(?P<when>{REMINDER_WHEN})")


def take_reminder(text: str, *, bare: bool = False) -> tuple[str, Reminder | None]:
    """ "..., remind me 30 minutes before", "..., ping me the evening before": when the
    task's reminder fires, and the text without it. With `bare` (the message began "remind
    me"), a bare ", an hour before" at the end says it too."""
    for pattern in (_REMINDER, _REMINDER_BARE) if bare else (_REMINDER,):
        if (match := pattern.search(text)) and (when := read_reminder(match["when"])):
            return _cut(text, match.start(), match.end()), when
    return text, None


def read_reminder(text: str) -> Reminder | None:
    """ "30 minutes before", "remind me the evening before", "the morning of" said alone."""
    said = _REMINDER_ALONE.fullmatch(text.strip(" ,;:-"))
    if said is None:
        return None
    for pattern in _WHEN_READ:
        if (match := pattern.fullmatch(said["when"])) and (found := _reminder(match)):
            return found
    return None


def _reminder(match: re.Match[str]) -> Reminder | None:
    groups = match.groupdict()
    at = take_time(f"at {groups['clock']}")[1] if groups.get("clock") else None
    if groups.get("same"):
        return Reminder(at=PARTS_OF_DAY[groups["same"].lower()])
    if groups.get("part"):
        return Reminder(timedelta(days=1), at or PARTS_OF_DAY[groups["part"].lower()])
    if groups.get("eve"):
        return Reminder(timedelta(days=1), at)
    if groups.get("day"):  # "on the day": that morning, unless a time is said
        return Reminder(at=at or PARTS_OF_DAY["morning"])
    before = _duration(match)
    if before is None or (at is not None and before % timedelta(days=1)):
        return None  # "two hours before at 6pm" says two different things
    return Reminder(before, at)


# --- Misspelt time words ---------------------------------------------------------------

# The closed vocabulary a misspelt word may be read as: weekdays and the words of repeats.
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_TIME_WORDS = (
    *_WEEKDAYS, *(f"{day}s" for day in _WEEKDAYS), "every", "everyday", "daily", "weekly",
    "monthly", "yearly", "weekdays", "weekends", "tomorrow",
)  # fmt: skip
# Words spelt right though close to one of them ("buy dairy", "a sundae", "call daisy").
_NOT_MISSPELT = frozenset(
    ["ever", "evert", "everybody", "dairy", "dally", "daisy", "weakly", "sundae", "sundaes",
     "sundry", "frida", "week", "weeks", "weekday", "weekend", "weekender", "month",
     "months", "year", "years", "days"]
)  # fmt: skip
_SIMILAR = 80  # rapidfuzz's ratio: "evrey" -> "every" is 80, "thrusday" -> "thursday" 87.5
_WORD = re.compile(r"[a-z]{4,}", re.IGNORECASE)
Read = TypeVar("Read")


def respell(text: str) -> tuple[str, frozenset[str]]:
    """`text` with each misspelt time word ("evrey wensday", "dayly", "saterday") spelt
    right, and the words put right. A word is only read as one that starts with the same
    letter and is close enough; words spelt right are kept."""
    fixed: set[str] = set()

    def one(match: re.Match[str]) -> str:
        word = match.group().lower()
        if word in _TIME_WORDS or word in _NOT_MISSPELT:
            return match.group()
        found = process.extractOne(word, _TIME_WORDS, scorer=fuzz.ratio, score_cutoff=_SIMILAR)
        if found is None or found[0][0] != word[0]:
            return match.group()
        fixed.add(found[0])
        return str(found[0])

    return _WORD.sub(one, text), frozenset(fixed)


def _respelt(read: Callable[[str], tuple[str, Read | None]], text: str) -> tuple[str, Read | None]:
    """`read` of the text respelt, when every word put right is part of what it found
    ("dentist on wensday at 3pm"); else `read(text)` as typed."""
    fixed, words = respell(text)
    if words:
        rest, found = read(fixed)
        if found is not None and not words & set(rest.lower().split()):
            return rest, found
    return read(text)


# --- Times of day -----------------------------------------------------------------------


def _twelve_hour(match: re.Match[str]) -> time | None:
    hour, minute = int(match["h"]), int(match["m"] or 0)
    if not 1 <= hour <= 12 or minute > 59:
        return None
    return time(hour % 12 + (12 if match["half"].lower().startswith("p") else 0), minute)


def _bare_hour(match: re.Match[str]) -> time | None:
    """ "at 5" for a task means 17:00; "at 9" means 09:00 (`recurrence.bare_hour`, so a
    repeating task's "at 7" and a one-off's agree)."""
    hour = int(match["h"])
    return time(bare_hour(hour)) if hour <= 23 else None


def _clock_time(match: re.Match[str]) -> time | None:
    """ "15:30" as said; "4:30" or "at 8.45", with no am or pm, by `bare_hour` as "at 4"
    is (16:30, 08:45); "04:30" as said."""
    hour, minute = int(match["h"]), int(match["m"])
    if hour > 23 or minute > 59:
        return None
    return time(hour if match["h"].startswith("0") else bare_hour(hour), minute)


def _past_or_to(match: re.Match[str]) -> time | None:
    """ "half past 6" (18:30), "quarter to 9" (08:45), and the British "half 7" (half past
    seven, 07:30): the hour read as "at 6" is."""
    hour = number(match["h"])
    if hour is None or not 1 <= hour <= 12:
        return None
    minutes = 30 if match["part"].lower() == "half" else 15
    if (match["rel"] or "past").lower() == "to":
        if minutes == 30:
            return None  # "half to" is no time
        hour, minutes = hour - 1 or 12, 45
    return time(bare_hour(hour), minutes)


# A time of day and how to read it; the first that matches is taken. Times are read here,
# not by dateparser, which keeps a day and a time that are apart ("friday 5pm").
_TIMES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], time | None]], ...] = (
    (
        _rx(r"(?:\bat\s+|@\s*|\b)(?P<h>\d{1,2})(?:[:.](?P<m>\d\d))?\s*(?P<half>[ap])\.?m\b\.?"),
        _twelve_hour,
    ),
    (_rx(r"(?:\bat\s+|@\s*|\b)(?P<h>[01]?\d|2[0-3]):(?P<m>[0-5]\d)\b"), _clock_time),
    # "at 8.45", "for 7.15 tomorrow": a dot says a time only first or after "at" or "for"
    # ("pay 12.50 to Jo" has none)
    (
        _rx(r"(?:^|\b(?:at|for)\s+|@\s*)(?P<h>[01]?\d|2[0-3])\.(?P<m>[0-5]\d)\b(?!\.\d)"),
        _clock_time,
    ),
    (_rx(r"(?:\bat\s+)?\b(?:noon|midday)\b"), lambda _: time(12)),
    (
        _rx(r"(?:\bat\s+)?\b(?P<part>half|quarter)\s+(?P<rel>past|to)\s+(?P<h>\d{1,2}|[a-z]+)\b"),
        _past_or_to,
    ),
    # the British "half 7": half past seven (said with a digit: "half one" is too rare a
    # time beside "half one's ..." to read)
    (
        _rx(r"(?:\bat\s+)?(?<!\bin )\b(?P<part>half)(?P<rel>)\s+(?P<h>\d{1,2})\b(?![:.]?\d)"),
        _past_or_to,
    ),
    (_rx(r"(?:\bat|@)\s*(?P<h>\d{1,2})\b(?![:.]?\d)"), _bare_hour),
)
_IN_HOURS = _rx(rf"\bin\s+{_AMOUNT}\s+(?P<unit>hours?|hrs?|minutes?|mins?)\b")


_UNITS = {"m": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1)}
_UNITS["w"] = 7 * _UNITS["d"]


def _duration(match: re.Match[str]) -> timedelta | None:
    """ "2 hours", "half an hour", "45 minutes", "a day": groups `half`, `n` and `unit`."""
    unit = _UNITS[match["unit"][0].lower()]
    if match["half"]:
        return unit / 2
    n = 1 if match["n"].lower() in ("a", "an") else number(match["n"])
    return None if n is None else n * unit


def take_time(text: str) -> tuple[str, time | None]:
    """A time of day said in `text` ("at 3pm", "15:30", "noon", "at 5"), and the text
    without it."""
    for pattern, read in _TIMES:
        if (match := pattern.search(text)) and (at := read(match)) is not None:
            return _cut(text, match.start(), match.end()), at
    return text, None


_HOUR_FIRST = _rx(
    r"^(?P<h>\d{1,2})(?!\S)(?!\s+(?:days?|weeks?|months?|years?|hours?|hrs?|minutes?|mins?)\b)"
)


def hour_first(text: str) -> str:
    """A bare hour where a task is moved to ("3 tomorrow", "5") as "at 3 tomorrow"."""
    return _HOUR_FIRST.sub(r"at \g<h>", text)


def time_only(text: str) -> time | None:
    """The time of day when `text` says only that ("9am", "at 15:30")."""
    rest, at = take_time(text.strip(" ,;:-"))
    return at if not rest.strip(" ,;:-") else None


# --- Dates ------------------------------------------------------------------------------

Due = date | datetime


@dataclass(frozen=True, slots=True)
class Found:
    due: Due
    start: int
    end: int


_PREP = r"(?:(?:due|by|on|for|before|until|till|in|at)\s+)?"
_MONTH_END = _rx(rf"{_PREP}(?:the\s+)?end\s+of\s+(?:the\s+|this\s+)?month")
_NEXT_MONTH_END = _rx(rf"{_PREP}(?:the\s+)?end\s+of\s+next\s+month")
_DAY_OF_MONTH = _rx(rf"{_PREP}the\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\b(?!\s+of\b)")
_DAY_AFTER = _rx(rf"{_PREP}(?:the\s+)?day\s+after\s+tomorrow")


def _month_end(today: date, months: int = 0) -> date:
    year, month = divmod(today.month - 1 + months, 12)
    year, month = today.year + year, month + 1
    return date(year, month, calendar.monthrange(year, month)[1])


def _day_of_month(today: date, day: int) -> date | None:
    for months in range(3):
        year, month = divmod(today.month - 1 + months, 12)
        year, month = today.year + year, month + 1
        if day <= calendar.monthrange(year, month)[1]:
            found = date(year, month, day)
            if found >= today:
                return found
    return None


# Phrases computed here: dateparser reads them wrongly or not at all.
_COMPUTED: tuple[tuple[re.Pattern[str], Callable[[date, re.Match[str]], date | None]], ...] = (
    (_NEXT_MONTH_END, lambda today, _: _month_end(today, 1)),
    (_MONTH_END, lambda today, _: _month_end(today)),
    (_DAY_AFTER, lambda today, _: today + timedelta(days=2)),
    (_DAY_OF_MONTH, lambda today, m: _day_of_month(today, int(m["day"]))),
)


# Phrases rewritten into what dateparser reads (same meaning, its words).
_REWRITES: tuple[tuple[re.Pattern[str], str], ...] = (
    (_rx(r"\b(?:next|the following)\s+weekend\b"), "next saturday"),
    (_rx(r"\b(?:this|the)\s+weekend\b"), "saturday"),
    (_rx(r"\b(?:the\s+)?end\s+of\s+(?:the\s+|this\s+)?week\b"), "friday"),
    (_rx(r"\b(?:tmrw|tmr|tomorow|tommorow|tommorrow|tomorrrow)\b"), "tomorrow"),
    (_rx(r"\btonite\b"), "tonight"),
    # Short weekday names that are no other word; "mon", "wed", "sat", "sun" are read only
    # after "on", "by", "next"... or with a time ("standup wed at 9").
    (_rx(r"\btues?\b"), "tuesday"),
    (_rx(r"\bweds\b"), "wednesday"),
    (_rx(r"\bthu(?:rs?)?\b"), "thursday"),
    (_rx(r"\bfri\b"), "friday"),
    (_rx(r"\bin\s+a\s+couple\s+(?:of\s+)?(days|weeks)\b"), r"in 2 \1"),
    (_rx(r"\bin\s+a\s+fortnight\b"), "in 2 weeks"),
    (_rx(r"\b(in\s+\S+\s+(?:days?|weeks?|months?|years?))'?\s+time\b"), r"\1"),  # "in 5 days' time"
    # "mon", "wed", "sat", "sun" after a word that only goes before a day: "next sat"
    (_rx(r"\b(next|this|coming|on|by|until|till|before)\s+mon\b"), r"\1 monday"),
    (_rx(r"\b(next|this|coming|on|by|until|till|before)\s+wed\b"), r"\1 wednesday"),
    (_rx(r"\b(next|this|coming|on|by|until|till|before)\s+sat\b"), r"\1 saturday"),
    (_rx(r"\b(next|this|coming|on|by|until|till|before)\s+sun\b"), r"\1 sunday"),
)
# A phrase dateparser found only counts if it says a date plainly: "may", "march on" or
# "sun" in a title are words, not dates.
_PLAIN_DATE = _rx(
    r"\d|\b(?:today|tonight|tomorrow|yesterday|monday|tuesday|wednesday|thursday|friday"
    r"|saturday|sunday|mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun|week|weeks|weekend|month"
    r"|months|year|days?|morning|afternoon|evening|noon|midnight|fortnight|january|february"
    r"|april|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul"
    r"|aug|sep|sept|oct|nov|dec|midday|am|pm|hours?|hrs?|minutes?|mins?)\b"
)
_WEAK_ALONE = _rx(
    r"(?:on\s+|by\s+|for\s+)?(?:an?\s+|one\s+)?(?:may|march|second|now|day|week|month|year)"
)
_BARE_NUMBER = _rx(r"(?:on |by |at |in )?\d+")
_NEEDS_PREP = _rx(r"(?:the\s+)?(?:mon|wed|sat|sun)")
_TIME_SAID = _rx(
    r"\d\s*(?:am|pm|a\.m|p\.m)\b|\d:\d\d|\b(?:morning|afternoon|evening|tonight|noon|midnight)\b"
)
_SETTINGS_BASE: dict[str, Any] = {
    "PREFER_DATES_FROM": "future",
    "RETURN_AS_TIMEZONE_AWARE": False,
}
MAX_DATE_TEXT = 300  # longer text is no title: don't spend time reading dates in it


def _search(text: str, now: datetime) -> list[tuple[str, datetime]]:
    found = search_dates(text, languages=["en"], settings={**_SETTINGS_BASE, "RELATIVE_BASE": now})
    return list(found or [])


@cache
def warm_up() -> None:
    """dateparser builds its tables on first use (~100 ms): do it once, at startup."""
    _search("tomorrow at 9:00", datetime(2026, 1, 1))


def _clean_due(phrase: str, found: datetime, now: datetime) -> Due:
    """A date, or a date-time when a time of day was said; never in the past."""
    today = now.date()
    if not re.search(r"\b\d{4}\b", phrase):
        if found.date() < today and found.month < today.month:
            found = found.replace(year=found.year + 1)
        elif found.year == today.year + 1 and (found.month, found.day) == (today.month, today.day):
            found = found.replace(year=today.year)  # "on dec 3", said on December 3: today
    if _TIME_SAID.search(phrase):
        return found.replace(second=0, microsecond=0)
    return found.date()


def take_date(text: str, now: datetime, *, quick: bool = False) -> tuple[str, Due | None]:
    """The due date said in `text` (in the user's local time `now`), with its time of day
    when one was said, and the text without them. A time with no day is its next coming.
    A misspelt day ("thrusday") is read as the day it is close to. `quick`: the message
    was `marked`, so a short day name ending it is a day."""
    return _respelt(lambda spelt: _take_date(spelt, now, quick), text)


def _take_date(text: str, now: datetime, quick: bool = False) -> tuple[str, Due | None]:
    if not text or len(text) > MAX_DATE_TEXT:
        return text, None
    if (match := _IN_HOURS.search(text)) and (ahead := _duration(match)) is not None:
        due = (now.replace(tzinfo=None) + ahead).replace(second=0, microsecond=0)
        return _cut(text, match.start(), match.end()), due
    text, at = take_time(text)
    text, day = _take_day(text, now, timed=at is not None, quick=quick)
    if at is None:
        return text, day
    if day is None:
        today = now.date()
        day = today if at > now.time() else today + timedelta(days=1)
    if isinstance(day, datetime):  # "tonight at 9", "tomorrow afternoon at 3"
        at = at.replace(hour=at.hour + 12) if day.hour >= 12 > at.hour else at
        day = day.date()
    return text, datetime.combine(day, at)


# A part of the day before the date, when a clock time was said, belongs to the title:
# "parents evening thursday 6pm" (but "tomorrow evening at 7" is all date).
_PART_OF_DAY_FIRST = _rx(r"\s*(?:morning|afternoon|evening|night)\b\s*")


def _take_day(
    text: str, now: datetime, *, timed: bool = False, quick: bool = False
) -> tuple[str, Due | None]:
    for pattern, compute in _COMPUTED:
        if (match := pattern.search(text)) and (due := compute(now.date(), match)) is not None:
            return _cut(text, match.start(), match.end()), due
    for pattern, replacement in _REWRITES:
        text = pattern.sub(replacement, text)
    if not _PLAIN_DATE.search(text):
        return text, None
    lowered = text.lower()  # dateparser misses dates after capitals ("book the MOT ...")
    for phrase, found in _search(lowered, now.replace(tzinfo=None)):
        bare = phrase.strip()
        if _BARE_NUMBER.fullmatch(bare) or abs(found.year - now.year) > 5:
            continue  # "call 555 1234" has no date in it
        if _WEAK_ALONE.fullmatch(bare) or not _PLAIN_DATE.search(bare):
            continue
        start = lowered.find(phrase)
        last = not lowered[start + len(phrase) :].strip(" ,;:-")
        if _NEEDS_PREP.fullmatch(bare) and not timed and not (quick and last):
            continue  # "buy sun cream", "get wed", "fix the sat nav"; but "mow the lawn sun p2"
        if timed and (part := _PART_OF_DAY_FIRST.match(phrase)):
            start, phrase = start + part.end(), phrase[part.end() :]
            if not phrase:
                continue
        due = _clean_due(bare, found, now.replace(tzinfo=None))
        return _cut(text, start, start + len(phrase)), due
    return text, None


_DANGLING = _rx(
    r"(?:(?:^|\s+)(?:due|by|on|for|before|until|till|at|in|from|sometime|some\s+time))+$"
)


def _cut(text: str, start: int, end: int) -> str:
    before = _DANGLING.sub("", text[:start].rstrip(" ,;:-"))
    after = text[end:].strip(" ,;:-")
    return f"{before} {after}".strip(" ,;:-") if after else before.strip(" ,;:-")


ANY_DAY = datetime(2026, 1, 1, 12, 0)  # any fixed day will do: only whether a date is said


def is_date(text: str) -> bool:
    """Is `text` just a date ("tomorrow", "next Friday at 9")?"""
    rest, due = take_date(text.strip(" ,;:-"), ANY_DAY)
    return due is not None and not rest.strip(" ,;:-")


SHIFT_UNITS = r"(?:days?|weeks?|months?|hours?|hrs?|minutes?|mins?)"
_SHIFT = _rx(rf"(?:by |for )?(?:another )?(?P<n>\d{{1,3}}|[a-z]+|a|an) (?P<unit>{SHIFT_UNITS})")


def shift(text: str) -> timedelta | None:
    """ "by three days", "a week", "an hour" -> how far to push a due date (or time)."""
    match = _SHIFT.fullmatch(text.strip())
    if match is None:
        return None
    n = 1 if match["n"].lower() in ("a", "an") else number(match["n"])
    if n is None:
        return None
    unit = match["unit"].lower()
    if unit.startswith(("h", "mi")):
        return n * _UNITS[unit[0] if unit[0] == "h" else "m"]
    days = 7 if unit.startswith("week") else 30 if unit.startswith("month") else 1
    return timedelta(days=n * days)


def might_be_date(text: str) -> bool:
    """Cheap test before reading dates (which needs the user's local time)."""
    if _PLAIN_DATE.search(text) or any(p.search(text) for p, _ in _REWRITES):
        return True
    return len(text) <= MAX_DATE_TEXT and bool(respell(text)[1])


def says_date(text: str) -> bool:
    """Does `text` say a date somewhere in it?"""
    return take_date(text, ANY_DAY)[1] is not None


# --- Repeats ----------------------------------------------------------------------------

# How a repeat phrase starts: "make it every wednesday" changes how a task repeats.
REPEAT_START = _rx(r"(?:every|each|daily|weekly|fortnightly|monthly|yearly|annually)\b")


def starts_with_repeat(text: str) -> bool:
    """Does `text` open with a repeat ("last monday of every month review budget")?"""
    found = find_repeat(text) if len(text) <= MAX_DATE_TEXT else None
    return found is not None and found[1] == 0


def take_repeat(text: str) -> tuple[str, Repeat | None]:
    """A repeat phrase said in `text` ("every other thursday at 6pm"), read as the service
    reads it, and the text without it. "every time I open the fridge" says none."""
    return _respelt(_take_repeat, text)


def _take_repeat(text: str) -> tuple[str, Repeat | None]:
    found = find_repeat(text) if len(text) <= MAX_DATE_TEXT else None
    if found is None:
        return text, None
    repeat, start, end = found
    return _cut(text, start, end), repeat
