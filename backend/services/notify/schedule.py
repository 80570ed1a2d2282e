"""Local times of day in a person's timezone, as instants: the daily plan's next time, and
the end of quiet hours. Pure functions of `now`, so they are tested at any date (across a
daylight-saving change, at a day's edge) without waiting for one."""

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo


def at_local(day: date, at: time, tz: ZoneInfo) -> datetime:
    """`at` on `day` in `tz`, as a UTC instant. A time the clocks skip (02:30 the night
    they go forward) reads with the offset from before the change, so it lands after the
    gap by as much as it was into it (03:30); one they pass twice is the first (fold 0)."""
    return datetime.combine(day, at, tzinfo=tz).astimezone(UTC)


def next_digest_at(at: time, tz: ZoneInfo, now: datetime) -> datetime:
    """When the daily plan is next due: today's `at` if it is still ahead, else tomorrow's."""
    today = now.astimezone(tz).date()
    instant = at_local(today, at, tz)
    if instant <= now:
        instant = at_local(today + timedelta(days=1), at, tz)
    return instant


def digest_day(at: time, tz: ZoneInfo, now: datetime) -> date | None:
    """The local date whose daily plan is due at `now`: today once its `at` has passed
    (sent late the same day after an outage, never on the next day), None before it."""
    today = now.astimezone(tz).date()
    return today if at_local(today, at, tz) <= now else None


def quiet_until(start: time, end: time, tz: ZoneInfo, now: datetime) -> datetime | None:
    """The end of the quiet hours `now` falls in (an instant), or None outside them. Quiet
    hours may span midnight (22:00 to 07:00)."""
    if start == end:
        return None
    local = now.astimezone(tz)
    clock = local.time().replace(tzinfo=None)
    today = local.date()
    if start < end:
        inside = start <= clock < end
        ends_on = today
    else:
        inside = clock >= start or clock < end
        ends_on = today + timedelta(days=1) if clock >= start else today
    if not inside:
        return None
    return at_local(ends_on, end, tz)


def parse_hhmm(value: str) -> time:
    hours, minutes = value.split(":")
    return time(int(hours), int(minutes))


def hhmm(value: time | None) -> str | None:
    return value.strftime("%H:%M") if value is not None else None
