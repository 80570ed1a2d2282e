"""The calendar feed: a user's dated pending tasks as iCalendar, at a secret URL.

Calendar apps cannot send a bearer token, so the feed is reached by a secret in its URL.
Only the secret's SHA-256 is stored; a request's secret is hashed, found by that hash and
compared in constant time. Issuing a new secret replaces the old one (its URL is gone).
"""

import hashlib
import hmac
import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from icalendar import Alarm, Calendar, Event, vRecur
from sqlalchemy import text, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.db import Database
from backend.errors import CalendarNotFound, FeedRateLimited
from backend.models.task import Task
from backend.models.user import User
from backend.services import access, recurrence

PRODID = "-//todo-agent//tasks//EN"
# RFC 5545's PRIORITY for each priority; "none" has none (the property is left out, which
# RFC 5545 reads as 0, undefined), so no app shows a task without one as medium.
PRIORITY = {"high": 1, "medium": 5, "low": 9}
_OWNER = text("SELECT todo_calendar_owner(:hashed)")
# A timed task shows as a short event at its due time.
TIMED_LENGTH = timedelta(minutes=30)


def digest(secret: str) -> str:
    """What is stored of a feed secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


async def issue(*, db: AsyncSession, owner: str) -> str:
    """A new feed secret for the user (replacing any earlier one)."""
    secret = secrets.token_urlsafe(32)
    statement = (
        update(User).where(col(User.id) == owner).values(calendar_secret_hash=digest(secret))
    )
    await db.exec(statement)
    return secret


async def revoke(*, db: AsyncSession, owner: str) -> None:
    statement = update(User).where(col(User.id) == owner).values(calendar_secret_hash=None)
    await db.exec(statement)


async def feed(*, database: Database, secret: str) -> bytes:
    """The feed of the user whose secret this is (their own and shared lists' dated pending
    tasks), read as that user; an unknown secret is CalendarNotFound."""
    hashed = digest(secret)
    async with database.system() as connection:  # the secret is the credential: find whose
        owner = (await connection.execute(_OWNER, {"hashed": hashed})).scalar_one_or_none()
    if owner is None:
        raise CalendarNotFound()
    async with database.transaction(as_user=owner) as db:
        user = (await db.exec(select(User).where(col(User.id) == owner))).one_or_none()
        if user is None or not hmac.compare_digest(user.calendar_secret_hash or "", hashed):
            raise CalendarNotFound()
        tasks = await db.exec(
            select(Task)
            .where(access.reachable(owner, col(Task.list_id)))
            .where(col(Task.completed).is_(False), col(Task.deleted_at).is_(None))
            .where(col(Task.due_at).is_not(None))
            .order_by(col(Task.due_at))
        )
        return calendar(list(tasks.all()), ZoneInfo(user.timezone or "UTC"))


def calendar(tasks: list[Task], tz: ZoneInfo) -> bytes:
    """The tasks as an iCalendar document: a VEVENT each (all-day for a date, timed in the
    user's zone otherwise), with its RRULE when it repeats and a VALARM for its reminder."""
    cal = Calendar()
    cal.add("prodid", PRODID)
    cal.add("version", "2.0")
    cal.add("calscale", "GREGORIAN")
    cal.add("x-wr-calname", "Tasks")
    cal.add("x-wr-timezone", tz.key)
    for task in tasks:
        cal.add_component(_event(task, tz))
    cal.add_missing_timezones()
    document: bytes = cal.to_ical()
    return document


def _event(task: Task, tz: ZoneInfo) -> Event:
    assert task.due_at is not None
    due = task.due_at.astimezone(tz)
    all_day = due.time() == recurrence.END_OF_DAY
    event = Event()
    event.add("uid", str(task.id))
    event.add("dtstamp", task.updated_at.astimezone(UTC))
    event.add("summary", task.title)
    if task.description:
        event.add("description", task.description)
    if all_day:
        event.add("dtstart", due.date())
        event.add("dtend", due.date() + timedelta(days=1))
    else:
        event.add("dtstart", due)
        event.add("dtend", due + TIMED_LENGTH)
    if task.tags:
        event.add("categories", task.tags)
    if task.priority in PRIORITY:
        event.add("priority", PRIORITY[task.priority])
    if task.recurrence:
        event.add("rrule", vRecur.from_ical(rule_from(task, due, all_day, tz)))
    if task.remind_at is not None:
        alarm = Alarm()
        alarm.add("action", "DISPLAY")
        alarm.add("description", task.title)
        start = datetime.combine(due.date(), datetime.min.time(), tzinfo=tz) if all_day else due
        alarm.add("trigger", task.remind_at - start)
        event.add_component(alarm)
    return event


def rule_from(task: Task, due: datetime, all_day: bool, tz: ZoneInfo) -> str:
    """The task's rule as its VEVENT needs it: counted from this occurrence (COUNT less the
    occurrences already done), UNTIL of the same kind as DTSTART."""
    assert task.recurrence is not None
    parts: dict[str, Any] = dict(item.split("=", 1) for item in task.recurrence.split(";"))
    if "COUNT" in parts:
        anchor = task.series_start or task.due_at
        assert anchor is not None
        done = recurrence.count_until(task.recurrence, anchor=anchor, end=due, tz=tz)
        parts["COUNT"] = str(max(int(parts["COUNT"]) - max(done - 1, 0), 1))
    if "UNTIL" in parts:
        until = recurrence.until_of(task.recurrence, tz=tz)
        parts["UNTIL"] = (
            f"{until.astimezone(due.tzinfo).date():%Y%m%d}"
            if all_day
            else f"{until:%Y%m%dT%H%M%SZ}"
        )
    return ";".join(f"{key}={value}" for key, value in parts.items())


class FeedLimiter:
    """At most `per_minute` reads a minute of one feed (or of unknown secrets from one
    client), per process: a calendar app polls every few minutes; anything faster is not."""

    def __init__(self, per_minute: int = 60) -> None:
        self._interval = 60.0 / per_minute
        self._burst = 60.0 - self._interval
        self._tat: dict[str, float] = {}

    def check(self, key: str) -> None:
        now = time.monotonic()
        tat = max(self._tat.get(key, now), now)
        if tat - now > self._burst:
            raise FeedRateLimited(retry_after_s=tat - now - self._burst)
        self._tat[key] = tat + self._interval
        if len(self._tat) > 10_000:  # forget the idle ones
            self._tat = {k: v for k, v in self._tat.items() if v > now}
