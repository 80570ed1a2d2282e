"""Repeating tasks: RFC 5545 RRULEs, validated and expanded by dateutil's `rrule`, and the
English phrases people use for them ("every other thursday at 6pm"), read into rules.

Occurrences are expanded from a timezone-aware local start, so dateutil keeps the wall-clock
time and `zoneinfo` gives each occurrence its own offset: 08:00 stays 08:00 across a
daylight-saving change. One parser serves the REST API, the tools, MCP and the stub.
"""

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from dateutil.rrule import rrule, rrulestr

FREQUENCIES = ("DAILY", "WEEKLY", "MONTHLY", "YEARLY")
_PARTS = ("FREQ", "INTERVAL", "BYDAY", "BYMONTHDAY", "BYMONTH", "COUNT", "UNTIL")
MAX_INTERVAL = 366
MAX_COUNT = 1000
_DAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
_DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August",
    "September", "October", "November", "December")  # fmt: skip
_BYDAY = re.compile(r"^([+-]?\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)$")
_UNTIL = re.compile(r"^(\d{8})(?:T(\d{6})(Z?))?$")
# A date given alone means "by the end of that day", as for due dates.
END_OF_DAY = time(23, 59, 59)


class RecurrenceError(ValueError):
    """A rule or phrase the service cannot use; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class Repeat:
    """A phrase read: the rule, and the time of day it named ("every morning at 8")."""

    rule: str
    at: time | None = None


# -- rules ------------------------------------------------------------------------------


def normalize_rule(value: str) -> str:
    """The rule in canonical form (no `RRULE:` prefix, parts in a fixed order), or
    RecurrenceError naming what is not allowed."""
    text = value.strip()
    if text.upper().startswith("RRULE:"):
        text = text[6:]
    parts: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.upper().split(";"))):
        key, sep, part = item.partition("=")
        if not sep or not part:
            raise RecurrenceError(f"recurrence: {item!r} is not KEY=VALUE.")
        if key not in _PARTS:
            raise RecurrenceError(f"recurrence: {key} is not supported; use {', '.join(_PARTS)}.")
        if key in parts:
            raise RecurrenceError(f"recurrence: {key} is given twice.")
        parts[key] = part
    freq = parts.get("FREQ")
    if freq not in FREQUENCIES:
        raise RecurrenceError(
            f"recurrence: FREQ must be one of {', '.join(FREQUENCIES)}"
            + (f", not {freq}." if freq else ".")
        )
    _check_parts(parts)
    rule = ";".join(f"{key}={parts[key]}" for key in _PARTS if key in parts)
    if not _ever_occurs(rule):
        raise RecurrenceError(f"recurrence: {rule} never occurs.")
    return rule


def _numbers(parts: dict[str, str], key: str, low: int, high: int) -> list[int]:
    try:
        numbers = [int(n) for n in parts[key].split(",")]
    except ValueError:
        raise RecurrenceError(f"recurrence: {key} must be whole numbers.") from None
    if not all(low <= abs(n) <= high for n in numbers) or (low > 0 and min(numbers) < 0):
        raise RecurrenceError(f"recurrence: {key} must be between {low} and {high}.")
    return numbers


def _check_parts(parts: dict[str, str]) -> None:
    freq = parts["FREQ"]
    if "INTERVAL" in parts:
        _numbers(parts, "INTERVAL", 1, MAX_INTERVAL)
    if "COUNT" in parts:
        _numbers(parts, "COUNT", 1, MAX_COUNT)
        if "UNTIL" in parts:
            raise RecurrenceError("recurrence: give COUNT or UNTIL, not both.")
    if "UNTIL" in parts and not _UNTIL.match(parts["UNTIL"]):
        raise RecurrenceError("recurrence: UNTIL must be a date (20261231) or 20261231T170000Z.")
    if "BYMONTH" in parts:
        _numbers(parts, "BYMONTH", 1, 12)
    if "BYMONTHDAY" in parts:
        if freq == "WEEKLY":
            raise RecurrenceError("recurrence: BYMONTHDAY does not go with FREQ=WEEKLY.")
        _numbers(parts, "BYMONTHDAY", -31, 31)
        if 0 in _numbers(parts, "BYMONTHDAY", -31, 31):
            raise RecurrenceError("recurrence: BYMONTHDAY cannot be 0.")
    if "BYDAY" in parts:
        for day in parts["BYDAY"].split(","):
            match = _BYDAY.match(day)
            if match is None:
                raise RecurrenceError(f"recurrence: BYDAY {day!r} is not a day like MO or -1FR.")
            ordinal = match.group(1)
            if ordinal is not None:
                if freq not in ("MONTHLY", "YEARLY"):
                    raise RecurrenceError(
                        f"recurrence: BYDAY {day} with a number needs FREQ=MONTHLY or YEARLY."
                    )
                if not 1 <= abs(int(ordinal)) <= (5 if freq == "MONTHLY" else 53):
                    raise RecurrenceError(f"recurrence: BYDAY {day} is out of range.")
    # A daily rule every n days filtered by day or month can step around every match
    # (every 7 days, Tuesdays only, from a Monday): say it as a weekly or monthly rule.
    if freq == "DAILY" and int(parts.get("INTERVAL", "1")) > 1 and _filters(parts):
        raise RecurrenceError(
            "recurrence: FREQ=DAILY with INTERVAL and BYDAY/BYMONTH/BYMONTHDAY is not "
            "supported; use FREQ=WEEKLY or MONTHLY."
        )


def _filters(parts: dict[str, str]) -> bool:
    return any(key in parts for key in ("BYDAY", "BYMONTHDAY", "BYMONTH"))


def _ever_occurs(rule: str) -> bool:
    """Whether the rule's days exist at all (not February 30th, not a first Monday on the
    8th). The calendar repeats every 400 years, so one cycle is searched, month by month,
    from a start near dateutil's last year: bounded, where a plain expansion of an
    impossible daily rule would step through every day up to year 9999."""
    parts = dict(item.split("=", 1) for item in rule.split(";"))
    if not _filters(parts):
        return True
    search: dict[str, str] = {
        key: parts[key] for key in ("BYDAY", "BYMONTHDAY", "BYMONTH") if key in parts
    }
    search["FREQ"] = parts["FREQ"] if parts["FREQ"] in ("MONTHLY", "YEARLY") else "MONTHLY"
    text = ";".join(f"{key}={value}" for key, value in search.items())
    start = datetime(9599, 1, 1)
    return rrulestr(text, dtstart=start).after(start, inc=True) is not None


def _utc_until(part: str, tz: Any) -> datetime:
    """An UNTIL value as UTC: a floating one is read in `tz` (a date: the end of that day)."""
    day, _, clock = part.partition("T")
    if clock.endswith("Z"):
        return datetime.strptime(day + clock[:-1], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    local = datetime.strptime(day + (clock or "235959"), "%Y%m%d%H%M%S")
    return local.replace(tzinfo=tz).astimezone(UTC)


def until_of(rule: str, *, tz: ZoneInfo) -> datetime:
    """The rule's UNTIL as UTC (the rule must have one)."""
    [part] = [p[6:] for p in rule.split(";") if p.startswith("UNTIL=")]
    return _utc_until(part, tz)


def count_until(rule: str, *, anchor: datetime, end: datetime, tz: ZoneInfo) -> int:
    """How many occurrences from `anchor` fall on or before `end`."""
    return len(_expansion(rule, anchor.astimezone(tz)).between(anchor, end, inc=True))


def _expansion(rule: str, start: datetime) -> rrule:
    """The rule expanded from `start` (aware, in the user's zone). A floating UNTIL is read
    in that zone too (a date means the end of that day)."""
    parts = rule.split(";")
    for index, part in enumerate(parts):
        if part.startswith("UNTIL=") and not part.endswith("Z"):
            parts[index] = f"UNTIL={_utc_until(part[6:], start.tzinfo):%Y%m%dT%H%M%SZ}"
    expanded = rrulestr(";".join(parts), dtstart=start)
    assert isinstance(expanded, rrule)  # one RRULE, no RDATE/EXDATE: never a set
    return expanded


def first_due(
    rule: str, *, tz: ZoneInfo, at: time | None = None, now: datetime | None = None
) -> datetime | None:
    """A new repeating task's due time when none was given: the rule's first day on or after
    today at `at` (if `at` has passed today, the next one), else the end of that day."""
    local_now = (now or datetime.now(UTC)).astimezone(tz)
    start = datetime.combine(local_now.date(), at or END_OF_DAY, tzinfo=tz)
    found = _expansion(rule, start).after(max(start, local_now), inc=True)
    return found.astimezone(UTC) if found else None


def occurs_from(rule: str, *, anchor: datetime, tz: ZoneInfo) -> bool:
    """Whether the rule, starting at `anchor`, has an occurrence at all (COUNT, UNTIL)."""
    start = anchor.astimezone(tz)
    return _expansion(rule, start).after(start, inc=True) is not None


def next_due(rule: str, *, anchor: datetime, after: datetime, tz: ZoneInfo) -> datetime | None:
    """The first occurrence strictly after `after`, of the rule started at `anchor` (the
    series' first due time, so COUNT counts from there), in the user's zone, as UTC."""
    found = _expansion(rule, anchor.astimezone(tz)).after(after.astimezone(tz))
    return found.astimezone(UTC) if found else None


def occurrences(rule: str, *, anchor: datetime, tz: ZoneInfo, count: int) -> list[datetime]:
    """The first `count` occurrences from `anchor` (for showing and testing a rule)."""
    expansion = _expansion(rule, anchor.astimezone(tz))
    return [when.astimezone(UTC) for _, when in zip(range(count), expansion, strict=False)]


# -- English ----------------------------------------------------------------------------


def _ordinal(n: int) -> str:
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


_FROM_END = {-1: "the last day", -2: "the second-to-last day"}
_NTH = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", -1: "last"}


def _day_words(byday: str) -> list[str]:
    words = []
    for day in byday.split(","):
        match = _BYDAY.match(day)
        assert match is not None  # validated
        name = _DAY_NAMES[_DAYS.index(match.group(2))]
        n = int(match.group(1)) if match.group(1) else 0
        if n == -2:
            words.append(f"second-to-last {name}")
        else:
            words.append(f"{_NTH.get(n, _ordinal(n)) if n > 0 else _NTH.get(n, '')} {name}".strip())
    return words


def describe(rule: str) -> str:
    """The rule in English: "every Monday", "every other week on Friday", "every last
    Friday of the month", "every year on March 3, 5 times"."""
    parts = dict(item.split("=", 1) for item in rule.split(";"))
    freq, n = parts["FREQ"], int(parts.get("INTERVAL", "1"))
    unit = {"DAILY": "day", "WEEKLY": "week", "MONTHLY": "month", "YEARLY": "year"}[freq]
    every = f"every {unit}" if n == 1 else f"every other {unit}" if n == 2 else f"every {n} {unit}s"
    days = _day_words(parts["BYDAY"]) if "BYDAY" in parts else []
    if freq in ("DAILY", "WEEKLY") and days:
        if set(days) == set(_DAY_NAMES[:5]) and len(days) == 5:
            text = "every weekday" if n == 1 else f"{every} on weekdays"
        elif set(days) == set(_DAY_NAMES[5:]) and len(days) == 2:
            text = "every weekend" if n == 1 else f"{every} on the weekend"
        elif n == 1:
            text = f"every {_and(days)}"
        elif n == 2 and len(days) == 1:
            text = f"every other {days[0]}"
        else:
            text = f"{every} on {_and(days)}"
    else:
        text = every
        months = [_MONTH_NAMES[int(m) - 1] for m in parts.get("BYMONTH", "").split(",") if m]
        monthdays = [int(d) for d in parts.get("BYMONTHDAY", "").split(",") if d]
        if freq == "YEARLY" and len(months) == 1 and len(monthdays) == 1 and monthdays[0] > 0:
            text, months = f"{every} on {months[0]} {monthdays[0]}", []
        elif monthdays:
            names = [
                f"the {_ordinal(d)}" if d > 0 else _FROM_END.get(d, f"day {d}") for d in monthdays
            ]
            text = f"{every} on {_and(names)}"
        elif days:
            text = f"every {_and(days)} of the month" if n == 1 else f"{every} on the {_and(days)}"
        if months:
            text += f" in {_and(months)}"
    if "COUNT" in parts:
        count = int(parts["COUNT"])
        text += ", once" if count == 1 else f", {count} times"
    if "UNTIL" in parts:
        until = datetime.strptime(parts["UNTIL"][:8], "%Y%m%d").date()
        text += f", until {until:%b} {until.day}, {until.year}"
    return text


# -- phrases ----------------------------------------------------------------------------

_WEEKDAY_WORDS = {
    **{name.lower(): code for name, code in zip(_DAY_NAMES, _DAYS, strict=True)},
    **{name.lower()[:3]: code for name, code in zip(_DAY_NAMES, _DAYS, strict=True)},
    "tues": "TU",
    "tue": "TU",
    "weds": "WE",
    "thur": "TH",
    "thurs": "TH",
    "thu": "TH",
}
_MONTH_WORDS = {
    **{name.lower(): i for i, name in enumerate(_MONTH_NAMES, 1)},
    **{name.lower()[:3]: i for i, name in enumerate(_MONTH_NAMES, 1)},
    "sept": 9,
}
_COUNT_WORDS = {
    "other": 2, "second": 2, "two": 2, "three": 3, "third": 3, "four": 4, "fourth": 4,
    "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "twelve": 12,
}  # fmt: skip
_ORDINAL_WORDS = {
    "first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3,
    "fourth": 4, "4th": 4, "fifth": 5, "5th": 5, "last": -1,
}  # fmt: skip
_PARTS_OF_DAY = {"morning": time(9), "afternoon": time(15), "evening": time(18), "night": time(21)}
_UNITS = {"day": "DAILY", "week": "WEEKLY", "month": "MONTHLY", "year": "YEARLY"}
_ADVERBS = {
    "daily": "FREQ=DAILY",
    "weekly": "FREQ=WEEKLY",
    "biweekly": "FREQ=WEEKLY;INTERVAL=2",
    "fortnightly": "FREQ=WEEKLY;INTERVAL=2",
    "monthly": "FREQ=MONTHLY",
    "yearly": "FREQ=YEARLY",
    "annually": "FREQ=YEARLY",
}

_DAY = r"(?:{})s?".format("|".join(sorted(_WEEKDAY_WORDS, key=len, reverse=True)))
_DAY_LIST = rf"{_DAY}(?:\s*(?:,|and|&|\+)\s*{_DAY})*"
_MONTH = r"(?:{})".format("|".join(sorted(_MONTH_WORDS, key=len, reverse=True)))
_MONTHDAY = r"(?:the\s+)?(\d{1,2})(?:st|nd|rd|th)?"
_N = r"(\d{{1,3}}|{})".format("|".join(_COUNT_WORDS))
_PLACE = r"({})".format("|".join(_ORDINAL_WORDS))  # a weekday's place in its month
_OF_EVERY_MONTH = r"\s+(?:of\s+|in\s+)?(?:every|each)\s+month"
_CLOCK = re.compile(
    r"^(?:(?P<h>\d{1,2})(?::(?P<m>\d{2}))?\s*(?P<ampm>am|pm|a\.m\.|p\.m\.)?|(?P<word>noon|midnight))$"
)

# Each schedule form: a pattern over the normalized phrase and how its groups make a rule
# (one form a line reads best, long as some are).
# ruff: noqa: E501
_FORMS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^(?:every|each)\s*day$|^everyday$|^daily$"), "daily"),
    (re.compile(r"^(?:every|each|on)\s+(?:week\s*days?|work\s*days?|weekdays)$|^weekdays$"), "weekdays"),
    (re.compile(r"^(?:every|each|on)\s+weekends?$|^weekends$"), "weekend"),
    (re.compile(rf"^(?:every|each)\s+(?:{_N}\s+)?(day|week|month|year)s?$"), "every_n"),
    (re.compile(rf"^(?:every|each|on)\s+({_DAY_LIST})$|^({_DAY}s)$"), "weekly_on"),
    # a weekday and a part of it: "every thursday night" (21:00, as "every night" is)
    (re.compile(rf"^(?:(?:every|each|on)\s+({_DAY_LIST})|({_DAY}s))\s+(morning|afternoon|evening|night)s?$"), "weekly_part"),
    # "every monday to friday", "mon-fri", "tuesday through thursday": each day of the span
    (re.compile(rf"^(?:(?:every|each|on)\s+)?({_DAY})\s*(?:-|\u2013|to|through|thru|till|until)\s*({_DAY})$"), "day_range"),
    # "every third thursday", "the second tuesday of each month": a weekday's place in the month
    (re.compile(rf"^(?:(?:every|each)\s+(?:month\s+on\s+)?|monthly\s+on\s+)(?:the\s+)?{_PLACE}\s+({_DAY})(?:\s+of\s+(?:the|every|each)\s+month)?$"), "nth_weekday"),
    (re.compile(rf"^(?:on\s+)?(?:the\s+)?{_PLACE}\s+({_DAY}){_OF_EVERY_MONTH}$"), "nth_weekday"),
    (re.compile(rf"^(?:every|each)\s+{_N}\s+({_DAY})$"), "nth_week_on"),
    (re.compile(rf"^(?:(?:every|each)\s+(?:{_N}\s+)?weeks?|(weekly|biweekly|fortnightly))\s+on\s+({_DAY_LIST})$"), "weeks_on"),
    (re.compile(rf"^(?:(?:every|each)\s+(?:{_N}\s+)?months?|monthly)\s+on\s+{_MONTHDAY}$"), "monthday"),
    (re.compile(rf"^(?:(?:every|each)\s+(?:{_N}\s+)?months?|monthly)\s+on\s+the\s+last\s+day$|^(?:on\s+)?the\s+last\s+day\s+of\s+(?:every|each|the)\s+month$|^(?:on\s+|at\s+)?the\s+end\s+of\s+(?:every|each)\s+month$"), "lastday"),
    (re.compile(rf"^(?:on\s+)?{_MONTHDAY}\s+of\s+(?:every|each|the)\s+month$|^(?:every|each)\s+{_MONTHDAY}(?:\s+of\s+the\s+month)?$"), "monthday_plain"),
    (re.compile(rf"^on\s+the\s+{_PLACE}\s+({_DAY})(?:\s+of\s+the\s+month)?$"), "nth_weekday"),
    (re.compile(rf"^(?:(?:every|each)\s+year|yearly|annually)\s+on\s+({_MONTH})\.?\s+{_MONTHDAY}$|^(?:every|each)\s+({_MONTH})\.?\s+{_MONTHDAY}$"), "yearly_md"),
    (re.compile(rf"^(?:(?:every|each)\s+year|yearly|annually)\s+on\s+{_MONTHDAY}(?:\s+of)?\s+({_MONTH})$"), "yearly_dm"),
    (re.compile(r"^(weekly|biweekly|fortnightly|monthly|yearly|annually)$"), "adverb"),
    (re.compile(r"^(?:every|each)\s+(morning|afternoon|evening|night)$|^nightly$"), "part_of_day"),
]  # fmt: skip

_COUPLE = re.compile(r"\b(?:a\s+)?couple\s+(?:of\s+)?(?=(?:day|week|month|year)s?\b)")
_TIME_TAIL = re.compile(r"^(?P<head>.*?)\s*(?:,\s*)?\bat\s+(?P<clock>[\d:.apmnoidgh ]+)$")

FORMS_HELP = (
    "every day, every weekday, every monday, every tuesday and thursday, mon-fri, every other week, "
    "every 2 weeks on friday, monthly on the 1st, every last friday, the second tuesday of "
    "each month, every year on march 3, "
    "every morning at 8 (or an RRULE such as FREQ=WEEKLY;BYDAY=MO)"
)


def _count(word: str | None) -> int:
    if not word:
        return 1
    return int(word) if word.isdigit() else _COUNT_WORDS[word]


def _days(text: str) -> str:
    """BYDAY codes of the day names in `text` ("tuesdays and thu" -> TU,TH)."""
    words = (
        word.removesuffix("s") if word not in _WEEKDAY_WORDS else word
        for word in re.findall(r"[a-z]+", text)
    )
    return ",".join(dict.fromkeys(_WEEKDAY_WORDS[w] for w in words if w in _WEEKDAY_WORDS))


def bare_hour(hour: int) -> int:
    """The hour a bare "at N" means, with no am, pm or part of the day: 1 to 6 in the
    afternoon (people plan "at 5" for 17:00), 7 to 12 in the morning ("at 7" is 07:00), and
    from 13 as said. The stub reads a one-off task's time with the same rule."""
    return hour + 12 if 1 <= hour <= 6 else hour


def _clock(text: str, part_of_day: str | None = None) -> time | None:
    """A time of day: "8", "8am", "6 pm", "18:30", "noon". A bare hour is read by
    `bare_hour`, except that any bare hour of an afternoon, evening or night is after noon."""
    match = _CLOCK.match(text.strip().replace(".", "") if "." in text else text.strip())
    if match is None:
        return None
    if match.group("word"):
        return time(12) if match.group("word") == "noon" else time(0)
    hour, minute = int(match.group("h")), int(match.group("m") or 0)
    ampm = (match.group("ampm") or "").replace(".", "")
    if hour > 23 or minute > 59 or (ampm and not 1 <= hour <= 12):
        return None
    if ampm == "pm" and hour < 12:
        hour += 12
    elif ampm == "am" and hour == 12:
        hour = 0
    elif not ampm and hour < 12:
        if part_of_day in ("afternoon", "evening", "night"):
            hour += 12
        elif part_of_day is None:
            hour = bare_hour(hour)
    return time(hour, minute)


def _rule(form: str, groups: tuple[str | None, ...]) -> tuple[str, str | None]:
    """The rule of a matched form, and the part of day it named."""
    g = list(groups)
    match form:
        case "daily":
            return "FREQ=DAILY", None
        case "weekdays":
            return "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", None
        case "weekend":
            return "FREQ=WEEKLY;BYDAY=SA,SU", None
        case "every_n":
            n, unit = _count(g[0]), _UNITS[g[1] or "day"]
            return f"FREQ={unit}" + (f";INTERVAL={n}" if n > 1 else ""), None
        case "weekly_on":
            return f"FREQ=WEEKLY;BYDAY={_days(g[0] or g[1] or '')}", None
        case "weekly_part":
            return f"FREQ=WEEKLY;BYDAY={_days(g[0] or g[1] or '')}", g[2]
        case "day_range":
            first, last = (_DAYS.index(_days(day or "")) for day in g[:2])
            span = (last - first) % 7 + 1
            return (
                f"FREQ=WEEKLY;BYDAY={','.join(_DAYS[(first + i) % 7] for i in range(span))}",
                None,
            )
        case "nth_week_on":
            return f"FREQ=WEEKLY;INTERVAL={_count(g[0])};BYDAY={_days(g[1] or '')}", None
        case "weeks_on":
            n = 2 if g[1] in ("biweekly", "fortnightly") else _count(g[0])
            return "FREQ=WEEKLY" + (
                f";INTERVAL={n}" if n > 1 else ""
            ) + f";BYDAY={_days(g[2] or '')}", None
        case "monthday" | "lastday":
            n = _count(g[0])
            day = "-1" if form == "lastday" else str(int(g[1] or 0))
            return "FREQ=MONTHLY" + (f";INTERVAL={n}" if n > 1 else "") + f";BYMONTHDAY={day}", None
        case "monthday_plain":
            return f"FREQ=MONTHLY;BYMONTHDAY={int(g[0] or g[1] or 0)}", None
        case "nth_weekday":
            return f"FREQ=MONTHLY;BYDAY={_ORDINAL_WORDS[g[0] or '']}{_days(g[1] or '')}", None
        case "yearly_md":
            month = _MONTH_WORDS[(g[0] or g[2] or "").rstrip(".")]
            return f"FREQ=YEARLY;BYMONTH={month};BYMONTHDAY={int(g[1] or g[3] or 0)}", None
        case "yearly_dm":
            return (
                f"FREQ=YEARLY;BYMONTH={_MONTH_WORDS[g[1] or '']};BYMONTHDAY={int(g[0] or 0)}",
                None,
            )
        case "adverb":
            return _ADVERBS[g[0] or ""], None
        case "part_of_day":
            return "FREQ=DAILY", g[0] or "night"
    raise AssertionError(form)  # pragma: no cover


def parse_repeat(phrase: str) -> Repeat:
    """An English phrase ("every other thursday at 6pm") or an RRULE, read into a Repeat.
    RecurrenceError says which forms are read."""
    text = " ".join(phrase.lower().replace("\u2019", "'").split()).strip(" .!")
    text = _COUPLE.sub("2 ", text)  # "every couple of days"
    if "=" in text:
        return Repeat(normalize_rule(phrase))
    at: time | None = None
    clock_text = None
    if tail := _TIME_TAIL.match(text):
        text, clock_text = tail.group("head"), tail.group("clock")
    for pattern, form in _FORMS:
        if match := pattern.match(text):
            rule, part_of_day = _rule(form, match.groups())
            break
    else:
        if re.search(r"\b(hour|hourly|minute|second)s?\b", text):
            raise RecurrenceError("Tasks repeat at most daily: " + FORMS_HELP + ".")
        raise RecurrenceError(f"Cannot read {phrase!r} as a repeat. Forms read: {FORMS_HELP}.")
    if clock_text is not None:
        at = _clock(clock_text, part_of_day)
        if at is None:
            raise RecurrenceError(f"Cannot read the time {clock_text!r}; say 8am, 18:30 or noon.")
    elif part_of_day is not None:
        at = _PARTS_OF_DAY[part_of_day]
    return Repeat(normalize_rule(rule), at)


_START = re.compile(
    r"\b(every|everyday|each|daily|weekly|biweekly|fortnightly|monthly|yearly|annually|nightly|weekdays|on\s+(?:week\s*days|weekdays|weekends|(?:mon|tues|wednes|thurs|fri|satur|sun)days))\b"
    # the working week with a dash is a repeat by itself ("standup mon-fri at 9:30"); other
    # spans need "every" ("trip thu-sun" is one stretch of days)
    r"|\bmon(?:day)?\s*[-\u2013]\s*fri(?:day)?\b"
)
# Phrases that name the day first and say "every" after it: "the second tuesday of each
# month", "on the 1st of every month", "the end of every month".
_LEAD = re.compile(
    r"\b(?:(?:on|at)\s+)?(?:the\s+)?(?:first|second|third|fourth|fifth|last|end|\d{1,2}(?:st|nd|rd|th))\b"
)


def find_repeat(text: str) -> tuple[Repeat, int, int] | None:
    """The longest repeat phrase in a sentence, with its span: "water the plants every
    other thursday at 6pm" has one at 17..44. "every time I open the fridge" has none, and
    neither has "by the second tuesday" (one day: a repeat says "every" or the like)."""
    lowered = text.lower()
    starts = {m.start() for m in _START.finditer(lowered)}
    starts |= {m.start() for m in _LEAD.finditer(lowered)}
    for begin in sorted(starts):
        ends = [m.start() for m in re.finditer(r"(?=[\s,.!?;]|$)", lowered[begin:])]
        for end in sorted({begin + e for e in ends}, reverse=True):
            candidate = lowered[begin:end]
            if not candidate.strip() or not _START.search(candidate):
                continue
            try:
                return parse_repeat(candidate), begin, end
            except RecurrenceError:
                continue
    return None


def combine(day: date | datetime, at: time, tz: ZoneInfo) -> datetime:
    """A due date with a repeat's time of day, in the user's zone, as UTC."""
    local_day = day.astimezone(tz).date() if isinstance(day, datetime) else day
    return datetime.combine(local_day, at, tzinfo=tz).astimezone(UTC)


def offset_of(due_at: datetime | None, remind_at: datetime | None) -> timedelta | None:
    """How long before its due time a task's reminder is (kept for the next occurrence)."""
    if due_at is None or remind_at is None:
        return None
    return due_at - remind_at
