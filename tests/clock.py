"""A frozen "today" for the stub's tests. The stub reads the user's local time from the
`get_user_context` tool; a test answers that call with a fixed weekday and time of day, so
a case naming "wednesday" means the same thing whatever day the suite runs.

The frozen day is the first such weekday after the real today (one to seven days ahead):
the service still checks reminders against the real clock, so the test's "now" is never
behind it.
"""

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from backend.services.tools import ToolResult

MONDAY, TUESDAY, WEDNESDAY, THURSDAY, FRIDAY, SATURDAY, SUNDAY = range(7)
MORNING = time(10, 30)

ToolCall = Callable[[str, Mapping[str, Any]], Awaitable[ToolResult]]


def frozen_now(tz: ZoneInfo, weekday: int, at: time = MORNING) -> datetime:
    """The next `weekday` (0 = Monday) after the real local today, at `at`, in `tz`."""
    today = datetime.now(tz).date()
    day = today + timedelta(days=(weekday - today.weekday() - 1) % 7 + 1)
    return datetime.combine(day, at, tzinfo=tz)


def before_clock_change(tz: ZoneInfo, days: int = 2, at: time = MORNING) -> datetime:
    """`days` before the day `tz` next changes its clocks (daylight saving starts or ends),
    at `at`: dates said then ("sunday", "monday at 9") fall across the change."""
    day = datetime.now(tz).date() + timedelta(days=days + 1)
    for _ in range(366):
        noon, eve = (datetime.combine(d, time(12), tzinfo=tz) for d in (day, day - timedelta(1)))
        if noon.utcoffset() != eve.utcoffset():
            return datetime.combine(day - timedelta(days=days), at, tzinfo=tz)
        day += timedelta(days=1)
    raise ValueError(f"{tz} does not change its clocks")


def frozen(call_tool: ToolCall, now: datetime) -> ToolCall:
    """`call_tool`, with `get_user_context` saying it is `now`."""

    async def call(tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        result = await call_tool(tool, arguments)
        if tool == "get_user_context" and result.get("status") != "error":
            local = now.isoformat(timespec="minutes")
            return {**result, "local_time": local, "weekday": now.strftime("%A")}
        return result

    return call
