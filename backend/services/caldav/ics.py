"""A task as a VTODO and back, with `icalendar`.

Out: SUMMARY, DESCRIPTION, DUE (a DATE for a date, a DATE-TIME in the person's zone
otherwise), DTSTART + RRULE for a repeating task, a VALARM at its reminder, STATUS /
COMPLETED / PERCENT-COMPLETE, PRIORITY (1 high, 5 medium, 9 low; none: no PRIORITY),
CATEGORIES, RELATED-TO its task for a step, CREATED / LAST-MODIFIED / DTSTAMP, and
whatever the client sent that the service does not model, as it sent it.

In: the same, read into the fields of a task (`Incoming`); what the service does not model
is kept (`extra`). Anything that is not one VTODO in one VCALENDAR is refused
(`BadCalendar`), before anything is stored.
"""

import functools
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from icalendar import Alarm, Calendar, Component, Timezone, Todo, vRecur

from backend.errors import DomainError
from backend.models.task import Priority, Task
from backend.services import recurrence
from backend.services.calendar import PRIORITY, PRODID, rule_from

# What the service reads from a VTODO (and writes back itself); every other property is
# kept as the client sent it. DTSTART only when it carries a rule (else it is kept too).
_MODELLED = {
    "UID",
    "SUMMARY",
    "DESCRIPTION",
    "DUE",
    "RRULE",
    "STATUS",
    "COMPLETED",
    "PERCENT-COMPLETE",
    "PRIORITY",
    "CATEGORIES",
    "CREATED",
    "LAST-MODIFIED",
    "DTSTAMP",
    "SEQUENCE",
}
_ALARM_ACTIONS = {"DISPLAY", "AUDIO"}


class BadCalendar(DomainError):
    """An ICS body that is not one VTODO the service can hold. `precondition` is the
    CalDAV precondition element it breaks (RFC 4791, 5.3.2.1)."""

    status_code = 400
    detail = "The calendar data cannot be read."

    def __init__(self, detail: str, *, precondition: str, status_code: int = 403) -> None:
        super().__init__(detail)
        self.precondition = precondition
        self.status_code = status_code


@dataclass(frozen=True, slots=True)
class ItemMeta:
    """What an item has besides its task: its UID, what the service does not model, and its
    parent's UID, for a step."""

    uid: str
    extra: str | None = None
    parent_uid: str | None = None


@dataclass(slots=True)
class Incoming:
    """A VTODO read into a task's fields."""

    uid: str
    title: str
    description: str | None = None
    due: date | datetime | None = None
    recurrence: str | None = None
    remind_at: datetime | None = None
    completed: bool = False
    priority: Priority = "none"
    tags: list[str] = field(default_factory=list)
    parent_uid: str | None = None
    extra: str | None = None
    # What the service does not model, and the alarms (which `settle` sorts).
    kept: Component = field(default_factory=Todo)
    alarms: list[Component] = field(default_factory=list)
    due_start: tuple[date | datetime | None, date | datetime | None] = (None, None)
    relation: Any = None  # the RELATED-TO naming the parent, as sent

    def keep_relation(self) -> None:
        """Keep the parent's RELATED-TO as sent (the parent is not here to link to)."""
        self.kept["RELATED-TO"] = self.relation
        self.parent_uid = None
        self.settle(current=None)

    def settle(self, *, current: datetime | None, now: datetime | None = None) -> None:
        """Which alarm is the task's reminder (the first display or audio alarm whose time
        is ahead, or is the reminder the task has: the service's own, sent back), and the
        rest kept as they came."""
        now = now or datetime.now(UTC)
        kept = Todo()
        for name, value in self.kept.items():
            kept[name] = value
        due, start = self.due_start
        self.remind_at = None
        for alarm in self.alarms:
            at = _reminder(alarm, due=due, start=start) if self.remind_at is None else None
            if at is not None and (at > now or at == current):
                self.remind_at = at
            else:
                kept.add_component(alarm)
        self.extra = kept.to_ical().decode() if kept.items() or kept.subcomponents else None


# -- out -----------------------------------------------------------------------------------


def render(task: Task, meta: ItemMeta, tz: ZoneInfo) -> bytes:
    cal = Calendar()
    cal.add("prodid", PRODID)
    cal.add("version", "2.0")
    cal.add_component(_todo(task, meta, tz))
    if meta.extra and "TZID=" in meta.extra:
        cal.add_missing_timezones()  # for the client's own zoned properties, kept
    document: bytes = cal.to_ical()
    if task.due_at is not None and tz.key != "UTC" and b"VTIMEZONE" not in document:
        head, end, tail = document.rpartition(b"END:VCALENDAR")
        document = head + _vtimezone(tz.key, task.due_at.year) + end + tail
    return document


@functools.lru_cache(maxsize=256)
def _vtimezone(key: str, year: int) -> bytes:
    """The zone's VTIMEZONE around a due year, as iCalendar: made once (icalendar reads
    every transition of the zone's history, some 30 ms), shared by every item due then."""
    zone = Timezone.from_tzinfo(
        ZoneInfo(key), tzid=key, first_date=date(year - 1, 1, 1), last_date=date(year + 5, 1, 1)
    )
    made: bytes = zone.to_ical()
    return made


def _todo(task: Task, meta: ItemMeta, tz: ZoneInfo) -> Todo:
    todo = Todo()
    todo.add("uid", meta.uid)
    todo.add("dtstamp", task.updated_at.astimezone(UTC))
    todo.add("created", task.created_at.astimezone(UTC))
    todo.add("last-modified", task.updated_at.astimezone(UTC))
    todo.add("summary", task.title)
    if task.description:
        todo.add("description", task.description)
    if task.due_at is not None:
        due_local = task.due_at.astimezone(tz)
        all_day = due_local.time() == recurrence.END_OF_DAY
        due: date | datetime = due_local.date() if all_day else _in_zone(due_local, tz)
        todo.add("due", due)
        if task.recurrence:
            todo.add("dtstart", due)
            todo.add("rrule", vRecur.from_ical(rule_from(task, due_local, all_day, tz)))
    if task.completed:
        todo.add("status", "COMPLETED")
        todo.add("percent-complete", 100)
        todo.add("completed", (task.completed_at or task.updated_at).astimezone(UTC))
    else:
        todo.add("status", "NEEDS-ACTION")
    if task.priority in PRIORITY:
        todo.add("priority", PRIORITY[task.priority])
    if task.tags:
        todo.add("categories", task.tags)
    if meta.parent_uid is not None:
        todo.add("related-to", meta.parent_uid, parameters={"RELTYPE": "PARENT"})
    if task.remind_at is not None:
        alarm = Alarm()
        alarm.add("action", "DISPLAY")
        alarm.add("description", task.title)
        # VALUE=DATE-TIME is required of an absolute trigger (RFC 5545 3.8.6.3).
        alarm.add("trigger", task.remind_at.astimezone(UTC), parameters={"VALUE": "DATE-TIME"})
        todo.add_component(alarm)
    if meta.extra:
        kept = Component.from_ical(meta.extra)
        for name, value in kept.items():
            todo[name] = value
        for sub in kept.subcomponents:
            todo.add_component(sub)
    return todo


def _in_zone(value: datetime, tz: ZoneInfo) -> datetime:
    """UTC as Z, any other zone with its TZID."""
    return value.astimezone(UTC) if tz.key == "UTC" else value


# -- in ------------------------------------------------------------------------------------


def parse(body: bytes, *, now: datetime | None = None) -> Incoming:
    """The one VTODO of an ICS body, read; what is not one is BadCalendar."""
    try:
        text = body.decode("utf-8")
        calendars = Calendar.from_ical(text, multiple=True)
    except Exception as error:  # icalendar raises ValueError, KeyError, IndexError, ...
        raise BadCalendar(
            f"The calendar data does not parse: {error}".strip()[:300],
            precondition="valid-calendar-data",
            status_code=400,
        ) from None
    if len(calendars) != 1 or calendars[0].name != "VCALENDAR":
        raise BadCalendar(
            "Send one VCALENDAR holding one VTODO.",
            precondition="valid-calendar-data",
            status_code=400,
        )
    components = [c for c in calendars[0].subcomponents if c.name != "VTIMEZONE"]
    if any(c.name != "VTODO" for c in components):
        kinds = ", ".join(sorted({str(c.name) for c in components if c.name != "VTODO"}))
        raise BadCalendar(
            f"Only VTODO is stored here, not {kinds}.", precondition="supported-calendar-component"
        )
    if len(components) != 1:
        raise BadCalendar(
            "A resource holds exactly one VTODO.", precondition="valid-calendar-object-resource"
        )
    try:
        return _read(components[0], now or datetime.now(UTC))
    except BadCalendar:
        raise
    except Exception as error:
        raise BadCalendar(
            f"A property of the VTODO cannot be read: {error}"[:300],
            precondition="valid-calendar-data",
            status_code=400,
        ) from None


def _read(todo: Component, now: datetime) -> Incoming:
    uid = str(todo.get("UID", "")).strip()
    if not uid or len(uid) > 255:
        raise BadCalendar(
            "A VTODO needs a UID (at most 255 characters).",
            precondition="valid-calendar-object-resource",
        )
    rules = todo.get("RRULE")
    if isinstance(rules, list):
        raise BadCalendar("One RRULE at most.", precondition="valid-calendar-object-resource")
    due = _value(todo, "DUE")
    start = _value(todo, "DTSTART")
    rule = rules.to_ical().decode() if rules is not None else None
    if rule is not None and due is None:
        due = start  # a repeating task without DUE repeats from its start
    status = str(todo.get("STATUS", "")).upper()
    percent = todo.get("PERCENT-COMPLETE")
    if status:
        completed = status == "COMPLETED"
    else:
        done = percent is not None and int(percent) >= 100
        completed = todo.get("COMPLETED") is not None or done
    priority_value = int(todo.get("PRIORITY", 0) or 0)
    incoming = Incoming(
        uid=uid,
        title=str(todo.get("SUMMARY", "")).strip() or "Untitled",
        description=str(todo["DESCRIPTION"]) if "DESCRIPTION" in todo else None,
        due=due,
        recurrence=rule,
        completed=completed,
        priority=_priority(priority_value),
        tags=_categories(todo.get("CATEGORIES")),
    )
    kept = incoming.kept
    incoming.due_start = (due, start)
    for name, value in todo.items():
        if name in _MODELLED or (name == "DTSTART" and rule is not None):
            continue
        if name == "RELATED-TO" and incoming.parent_uid is None:
            parent = _parent(value)
            if parent is not None:
                incoming.parent_uid, incoming.relation = parent, value
                continue
        kept[name] = value
    incoming.alarms = list(todo.subcomponents)
    incoming.settle(current=None, now=now)
    return incoming


def _value(todo: Component, name: str) -> date | datetime | None:
    prop = todo.get(name)
    if prop is None:
        return None
    value = prop.dt
    if not isinstance(value, date):
        raise BadCalendar(
            f"{name} must be a date or a date-time.",
            precondition="valid-calendar-data",
            status_code=400,
        )
    return value


def _priority(value: int) -> Priority:
    """RFC 5545's 1 (highest) to 9 (lowest) in the contract's three bands; 0 is none."""
    if 1 <= value <= 4:
        return "high"
    if value == 5:
        return "medium"
    if 6 <= value <= 9:
        return "low"
    return "none"


def _categories(value: Any) -> list[str]:
    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    return [str(cat) for item in values for cat in getattr(item, "cats", [item])]


def _parent(value: Any) -> str | None:
    """The parent's UID of a RELATED-TO (RELTYPE=PARENT, the default)."""
    if isinstance(value, list):
        return None
    reltype = str(value.params.get("RELTYPE", "PARENT")).upper()
    return str(value) if reltype == "PARENT" else None


def _reminder(
    alarm: Component, *, due: date | datetime | None, start: date | datetime | None
) -> datetime | None:
    """When a display or audio alarm fires, if that can be told: an absolute TRIGGER, or
    one relative to DUE (RELATED=END) or to DTSTART (else DUE)."""
    if alarm.name != "VALARM" or str(alarm.get("ACTION", "")).upper() not in _ALARM_ACTIONS:
        return None
    trigger = alarm.get("TRIGGER")
    if trigger is None:
        return None
    value = trigger.dt
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else None
    if not isinstance(value, timedelta):
        return None
    related = str(trigger.params.get("RELATED", "START")).upper()
    base = due if related == "END" else (start or due)
    if base is None:
        return None
    if not isinstance(base, datetime):
        return None  # relative to a date: the zone is the person's, applied by the caller
    if base.tzinfo is None:
        return None
    return base + value


def differences(incoming: Incoming, task: Task, tz: ZoneInfo) -> dict[str, Any]:
    """The fields of `task` that `incoming` changes, as a TaskUpdate takes them; what the
    client sent back unchanged is left alone (an old reminder, a rule counted from this
    occurrence, ...)."""
    changes: dict[str, Any] = {}
    if incoming.title != task.title:
        changes["title"] = incoming.title
    if (incoming.description or None) != (task.description or None):
        changes["description"] = incoming.description
    due = _instant(incoming.due, tz)
    if due != task.due_at:
        changes["due_at"] = incoming.due
    if incoming.recurrence is None:
        if task.recurrence is not None:
            changes["recurrence"] = None
    elif (
        task.recurrence is None
        or "due_at" in changes
        or (_rule_key(incoming.recurrence) != _rule_key(_current_rule(task, tz)))
    ):
        changes["recurrence"] = incoming.recurrence
    if incoming.remind_at is not None and incoming.remind_at != task.remind_at:
        changes["remind_at"] = incoming.remind_at
    elif (
        incoming.remind_at is None
        and task.remind_at is not None
        and (task.remind_at > datetime.now(UTC))
    ):
        changes["remind_at"] = None  # the client removed an alarm still ahead
    if incoming.completed != task.completed:
        changes["completed"] = incoming.completed
    if incoming.priority != task.priority:
        changes["priority"] = incoming.priority
    if list(dict.fromkeys(t.strip().lstrip("#").strip().lower() for t in incoming.tags)) != (
        task.tags
    ):
        changes["tags"] = incoming.tags
    return changes


def ticked_by_advancing(incoming: Incoming, task: Task, tz: ZoneInfo) -> bool:
    """Whether a client ticked off an occurrence of a repeating task the way Tasks.org and
    others do: the same rule, still open, its DUE moved to exactly the rule's next
    occurrence. The service does what completing it anywhere does (this occurrence done,
    the next its own task), so every client sees the same thing."""
    if task.recurrence is None or task.due_at is None or task.completed or incoming.completed:
        return False
    if incoming.recurrence is None:
        return False
    same_rule = {k: v for k, v in _rule_key(incoming.recurrence).items() if k != "COUNT"} == {
        k: v for k, v in _rule_key(task.recurrence).items() if k != "COUNT"
    }
    moved_to = _instant(incoming.due, tz)
    if not same_rule or moved_to is None or moved_to <= task.due_at:
        return False
    anchor = task.series_start or task.due_at
    return moved_to == recurrence.next_due(task.recurrence, anchor=anchor, after=task.due_at, tz=tz)


def _instant(value: date | datetime | None, tz: ZoneInfo) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        value = datetime.combine(value, recurrence.END_OF_DAY)
    if value.tzinfo is None:
        value = value.replace(tzinfo=tz)
    return value.astimezone(UTC)


def _current_rule(task: Task, tz: ZoneInfo) -> str:
    assert task.recurrence is not None
    assert task.due_at is not None
    due_local = task.due_at.astimezone(tz)
    return rule_from(task, due_local, due_local.time() == recurrence.END_OF_DAY, tz)


def _rule_key(rule: str) -> dict[str, str]:
    parts = rule.upper().removeprefix("RRULE:").split(";")
    return dict(part.split("=", 1) for part in parts if "=" in part)
