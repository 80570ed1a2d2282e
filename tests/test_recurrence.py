"""Repeating tasks and reminders: the rules (compared by their occurrences, never by their
strings), the next occurrence in the user's timezone across daylight-saving changes, one
successor per occurrence under concurrent completion, and the same through the tools and MCP."""

import asyncio
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from fastapi import FastAPI

from backend.services import recurrence
from backend.services.recurrence import RecurrenceError, parse_repeat
from tests.chat_helpers import chat
from tests.conftest import auth
from tests.factories import make_task
from tests.fake_openai import FakeOpenAI, call, reply, tool_calls
from tests.test_mcp import as_alice, structured, tool_error

NEW_YORK = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")


def local(when: str, tz: ZoneInfo) -> datetime:
    return datetime.fromisoformat(when).replace(tzinfo=tz)


def utc(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def days(rule: str, start: str, tz: ZoneInfo = NEW_YORK, count: int = 4) -> list[str]:
    anchor = local(start, tz)
    return [
        d.astimezone(tz).strftime("%Y-%m-%d %H:%M")
        for d in recurrence.occurrences(rule, anchor=anchor, tz=tz, count=count)
    ]


# Each phrase, read, and expanded from Monday 2027-03-01 09:00 (New York): what people say,
# and the days it means. DST starts on 2027-03-14 in New York; the hour stays.
PHRASES = [
    ("every day", ["2027-03-01 09:00", "2027-03-02 09:00", "2027-03-03 09:00"]),
    ("daily", ["2027-03-01 09:00", "2027-03-02 09:00", "2027-03-03 09:00"]),
    ("every weekday", ["2027-03-01 09:00", "2027-03-02 09:00", "2027-03-03 09:00"]),
    ("every monday", ["2027-03-01 09:00", "2027-03-08 09:00", "2027-03-15 09:00"]),
    ("every tuesday and thursday", ["2027-03-02 09:00", "2027-03-04 09:00", "2027-03-09 09:00"]),
    ("mon-fri", ["2027-03-01 09:00", "2027-03-02 09:00", "2027-03-03 09:00"]),
    (
        "every tuesday to thursday",
        ["2027-03-02 09:00", "2027-03-03 09:00", "2027-03-04 09:00", "2027-03-09 09:00"],
    ),
    (
        "every friday through monday",
        [
            "2027-03-01 09:00",
            "2027-03-05 09:00",
            "2027-03-06 09:00",
            "2027-03-07 09:00",
            "2027-03-08 09:00",
        ],
    ),
    ("every other week", ["2027-03-01 09:00", "2027-03-15 09:00", "2027-03-29 09:00"]),
    ("every 2 weeks on friday", ["2027-03-05 09:00", "2027-03-19 09:00", "2027-04-02 09:00"]),
    ("every other thursday", ["2027-03-04 09:00", "2027-03-18 09:00", "2027-04-01 09:00"]),
    ("monthly on the 1st", ["2027-03-01 09:00", "2027-04-01 09:00", "2027-05-01 09:00"]),
    ("every last friday", ["2027-03-26 09:00", "2027-04-30 09:00", "2027-05-28 09:00"]),
    ("every first monday", ["2027-03-01 09:00", "2027-04-05 09:00", "2027-05-03 09:00"]),
    ("every 1st friday of the month", ["2027-03-05 09:00", "2027-04-02 09:00", "2027-05-07 09:00"]),
    ("the 2nd tuesday of each month", ["2027-03-09 09:00", "2027-04-13 09:00", "2027-05-11 09:00"]),
    ("every third thursday", ["2027-03-18 09:00", "2027-04-15 09:00", "2027-05-20 09:00"]),
    ("last monday of every month", ["2027-03-29 09:00", "2027-04-26 09:00", "2027-05-31 09:00"]),
    ("monthly on the last friday", ["2027-03-26 09:00", "2027-04-30 09:00", "2027-05-28 09:00"]),
    ("on the 1st of every month", ["2027-03-01 09:00", "2027-04-01 09:00", "2027-05-01 09:00"]),
    # The 31st of a month that has none is skipped (RFC 5545); "the last day" is BYMONTHDAY=-1.
    ("monthly on the 31st", ["2027-03-31 09:00", "2027-05-31 09:00", "2027-07-31 09:00"]),
    ("the end of every month", ["2027-03-31 09:00", "2027-04-30 09:00", "2027-05-31 09:00"]),
    ("everyday", ["2027-03-01 09:00", "2027-03-02 09:00", "2027-03-03 09:00"]),
    ("every year on march 3", ["2027-03-03 09:00", "2028-03-03 09:00", "2029-03-03 09:00"]),
    ("every 31st", ["2027-03-31 09:00", "2027-05-31 09:00", "2027-07-31 09:00"]),
    ("the last day of every month", ["2027-03-31 09:00", "2027-04-30 09:00", "2027-05-31 09:00"]),
    ("every weekend", ["2027-03-06 09:00", "2027-03-07 09:00", "2027-03-13 09:00"]),
    ("every 3 days", ["2027-03-01 09:00", "2027-03-04 09:00", "2027-03-07 09:00"]),
    ("RRULE:FREQ=MONTHLY;BYDAY=-1FR", ["2027-03-26 09:00", "2027-04-30 09:00", "2027-05-28 09:00"]),
    ("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29", ["2028-02-29 09:00", "2032-02-29 09:00"]),
]


@pytest.mark.parametrize(("phrase", "expected"), PHRASES)
def test_a_phrase_means_its_days(phrase: str, expected: list[str]) -> None:
    rule = parse_repeat(phrase).rule
    assert days(rule, "2027-03-01T09:00", count=len(expected)) == expected


@pytest.mark.parametrize(
    ("phrase", "at"),
    [("every morning at 8", "08:00"), ("every other thursday at 6pm", "18:00"),
     ("every evening at 7", "19:00"), ("daily at 7:30am", "07:30"), ("every night", "21:00")],
)  # fmt: skip
def test_a_phrase_can_carry_its_time_of_day(phrase: str, at: str) -> None:
    read = parse_repeat(phrase)
    assert read.at is not None
    assert read.at.strftime("%H:%M") == at


@pytest.mark.parametrize(
    "phrase", ["every hour", "every time I open the fridge", "sometimes", "every blue moon"]
)
def test_a_phrase_it_cannot_read_says_which_forms_it_reads(phrase: str) -> None:
    with pytest.raises(RecurrenceError, match="every weekday"):
        parse_repeat(phrase)


@pytest.mark.parametrize(
    ("sentence", "phrase", "rule"),
    [
        ("pay rent the second tuesday of each month", "the second tuesday of each month",
         "FREQ=MONTHLY;BYDAY=2TU"),
        ("last monday of every month review budget", "last monday of every month",
         "FREQ=MONTHLY;BYDAY=-1MO"),
        ("team lunch on the 2nd wednesday of every month at noon",
         "on the 2nd wednesday of every month at noon", "FREQ=MONTHLY;BYDAY=2WE"),
        ("pay rent on the 1st of every month", "on the 1st of every month",
         "FREQ=MONTHLY;BYMONTHDAY=1"),
        ("budget at the end of every month", "at the end of every month",
         "FREQ=MONTHLY;BYMONTHDAY=-1"),
        ("meds everyday at 8", "everyday at 8", "FREQ=DAILY"),
    ],
)  # fmt: skip
def test_a_schedule_that_names_its_day_first_is_found_in_a_sentence(
    sentence: str, phrase: str, rule: str
) -> None:
    found = recurrence.find_repeat(sentence)
    assert found is not None
    read, start, end = found
    assert (sentence[start:end], read.rule) == (phrase, rule)


@pytest.mark.parametrize(
    "sentence", ["pay by the second tuesday", "send it by the 15th of the month", "on the 3rd"]
)
def test_one_day_named_by_its_place_in_the_month_is_no_schedule(sentence: str) -> None:
    assert recurrence.find_repeat(sentence) is None


def test_a_monthly_weekday_rule_keeps_its_local_time_across_the_end_of_dst() -> None:
    # New York leaves daylight-saving time on 2026-11-01: 09:00 is 13:00 UTC, then 14:00.
    read = parse_repeat("the second tuesday of each month at 9am")
    start = local("2026-10-01T09:00", NEW_YORK)
    found = recurrence.occurrences(read.rule, anchor=start, tz=NEW_YORK, count=2)
    assert [d.astimezone(NEW_YORK).isoformat() for d in found] == [
        "2026-10-13T09:00:00-04:00",
        "2026-11-10T09:00:00-05:00",
    ]


def test_a_schedule_inside_a_sentence_is_found_and_a_figure_of_speech_is_not() -> None:
    sentence = "water the plants every other thursday at 6pm"
    found = recurrence.find_repeat(sentence)
    assert found is not None
    read, start, end = found
    assert sentence[start:end] == "every other thursday at 6pm"
    assert read.at is not None
    assert recurrence.find_repeat("every time I open the fridge the milk is gone") is None


@pytest.mark.parametrize(
    ("sentence", "rule"),
    [
        ("standup mon-fri at 9:30", "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR"),
        ("standup Monday\u2013Friday", "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR"),
        ("water the plants every tue-thu", "FREQ=WEEKLY;BYDAY=TU,WE,TH"),
        ("trip thu-sun", None),
        ("camping sat-sun", None),
        ("off monday to friday", None),
    ],
)
def test_a_span_of_days_repeats_with_every_or_as_the_working_week(
    sentence: str, rule: str | None
) -> None:
    found = recurrence.find_repeat(sentence)
    assert (found and found[0].rule) == rule


@pytest.mark.parametrize(
    ("rule", "text"),
    [
        ("FREQ=WEEKLY;BYDAY=MO", "every Monday"),
        ("FREQ=WEEKLY;INTERVAL=2;BYDAY=TH", "every other Thursday"),
        ("FREQ=MONTHLY;BYDAY=-1FR", "every last Friday of the month"),
        ("FREQ=YEARLY;BYMONTH=3;BYMONTHDAY=3", "every year on March 3"),
        ("FREQ=DAILY;COUNT=3", "every day, 3 times"),
        ("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", "every weekday"),
    ],
)
def test_a_rule_is_said_in_english(rule: str, text: str) -> None:
    assert recurrence.describe(recurrence.normalize_rule(rule)) == text


# ---------------------------------------------------------------------------- the REST API


async def set_zone(client: httpx.AsyncClient, tz: ZoneInfo, user: str = "alice") -> None:
    response = await client.patch(
        f"/api/{user}/settings", json={"timezone": tz.key}, headers=auth(user)
    )
    assert response.status_code == 200, response.text


async def complete(client: httpx.AsyncClient, ref: Any, user: str = "alice") -> dict[str, Any]:
    response = await client.patch(
        f"/api/{user}/tasks/{ref}/complete", json={"completed": True}, headers=auth(user)
    )
    assert response.status_code == 200, response.text
    done: dict[str, Any] = response.json()
    return done


async def test_the_next_weekly_occurrence_keeps_its_wall_clock_time_across_dst_in_new_york(
    client: httpx.AsyncClient,
) -> None:
    await set_zone(client, NEW_YORK)
    first = await make_task(
        client,
        user="alice",
        title="Team sync",
        description="room 4",
        priority="high",
        tags=["work"],
        due_at="2027-03-08T08:00:00",
        remind_at="2027-03-08T07:45:00",
        recurrence="RRULE:FREQ=WEEKLY;BYDAY=MO",
        steps=["agenda", "notes"],
    )
    assert first["recurrence"] == "FREQ=WEEKLY;BYDAY=MO"
    assert first["recurrence_text"] == "every Monday"
    assert utc(first["due_at"]) == local("2027-03-08T08:00", NEW_YORK)  # 13:00 UTC (EST)
    done = await complete(client, first["number"])
    assert done["completed"] is True
    following = done["next"]
    # After the change to EDT: still 08:00 local, so 12:00 UTC.
    assert utc(following["due_at"]) == local("2027-03-15T08:00", NEW_YORK)
    assert utc(following["due_at"]).hour == 12
    assert utc(following["remind_at"]) == local("2027-03-15T07:45", NEW_YORK)
    assert following["number"] == first["number"] + 3  # after the first one's two steps
    for field in ("title", "description", "priority", "tags", "recurrence", "series_id"):
        assert following[field] == first[field], field
    assert following["reminded_at"] is None
    got = (await client.get(f"/api/alice/tasks/{following['id']}", headers=auth("alice"))).json()
    assert [(s["title"], s["completed"]) for s in got["steps"]] == [
        ("agenda", False),
        ("notes", False),
    ]


async def test_a_daily_task_keeps_its_hour_across_the_autumn_change_in_berlin(
    client: httpx.AsyncClient,
) -> None:
    await set_zone(client, BERLIN)
    task = await make_task(
        client, user="alice", title="Walk", due_at="2027-10-30T07:00:00", recurrence="FREQ=DAILY"
    )
    following = (await complete(client, task["id"]))["next"]
    assert utc(following["due_at"]) == local("2027-10-31T07:00", BERLIN)  # CET from today
    assert utc(following["due_at"]) - utc(task["due_at"]) == timedelta(hours=25)


@pytest.mark.parametrize(
    ("rule", "due", "next_due"),
    [
        ("FREQ=MONTHLY;BYDAY=-1FR", "2027-01-29T18:00:00", "2027-02-26T18:00"),
        ("FREQ=MONTHLY;BYMONTHDAY=31", "2027-01-31T09:00:00", "2027-03-31T09:00"),
        ("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29", "2028-02-29T09:00:00", "2032-02-29T09:00"),
        ("FREQ=WEEKLY;INTERVAL=2;BYDAY=TH", "2027-01-07T18:00:00", "2027-01-21T18:00"),
    ],
)
async def test_the_next_occurrence_is_the_rules_next_day(
    client: httpx.AsyncClient, rule: str, due: str, next_due: str
) -> None:
    await set_zone(client, NEW_YORK)
    task = await make_task(client, user="alice", due_at=due, recurrence=rule)
    following = (await complete(client, task["id"]))["next"]
    assert utc(following["due_at"]) == local(next_due, NEW_YORK)


async def test_an_overdue_occurrence_is_followed_by_the_first_one_after_now(
    client: httpx.AsyncClient,
) -> None:
    await set_zone(client, NEW_YORK)
    task = await make_task(
        client, user="alice", due_at="2026-01-05T09:00:00", recurrence="FREQ=WEEKLY;BYDAY=MO"
    )
    following = (await complete(client, task["id"]))["next"]
    due = utc(following["due_at"])
    assert datetime.now(UTC) < due < datetime.now(UTC) + timedelta(days=7, hours=1)
    assert due.astimezone(NEW_YORK).strftime("%a %H:%M") == "Mon 09:00"


async def test_a_finished_rule_creates_no_more_occurrences(client: httpx.AsyncClient) -> None:
    await set_zone(client, NEW_YORK)
    counted = await make_task(
        client, user="alice", title="Course", due_at="2027-05-03T10:00:00",
        recurrence="FREQ=WEEKLY;COUNT=2",
    )  # fmt: skip
    second = (await complete(client, counted["id"]))["next"]
    assert utc(second["due_at"]) == local("2027-05-10T10:00", NEW_YORK)
    assert (await complete(client, second["id"]))["next"] is None

    until = await make_task(
        client, user="alice", due_at="2027-05-30T10:00:00", recurrence="FREQ=DAILY;UNTIL=20270531"
    )
    last = (await complete(client, until["id"]))["next"]
    assert utc(last["due_at"]) == local("2027-05-31T10:00", NEW_YORK)
    assert (await complete(client, last["id"]))["next"] is None


async def test_stopping_the_series_creates_no_next_one(client: httpx.AsyncClient) -> None:
    task = await make_task(client, user="alice", due_at="2027-05-03", recurrence="FREQ=DAILY")
    stopped = await client.patch(
        f"/api/alice/tasks/{task['id']}", json={"recurrence": None}, headers=auth("alice")
    )
    assert stopped.json()["recurrence"] is None
    assert stopped.json()["recurrence_text"] is None
    assert (await complete(client, task["id"]))["next"] is None


async def test_completing_one_occurrence_concurrently_makes_exactly_one_successor(
    client: httpx.AsyncClient,
) -> None:
    task = await make_task(client, user="alice", due_at="2027-05-03", recurrence="FREQ=DAILY")
    answers = await asyncio.gather(*(complete(client, task["id"]) for _ in range(8)))
    assert sum(answer["next"] is not None for answer in answers) == 1
    reopened = await client.patch(
        f"/api/alice/tasks/{task['id']}/complete", json={"completed": False}, headers=auth("alice")
    )
    assert reopened.json()["completed"] is False
    assert (await complete(client, task["id"]))["next"] is None
    toggled = await client.patch(f"/api/alice/tasks/{task['id']}/complete", headers=auth("alice"))
    assert toggled.json()["completed"] is False
    listed = await client.get("/api/alice/tasks", headers=auth("alice"))
    assert listed.json()["count"] == 2


async def test_a_repeating_task_without_a_due_date_gets_the_rules_first_day(
    client: httpx.AsyncClient,
) -> None:
    await set_zone(client, BERLIN)
    task = await make_task(client, user="alice", recurrence="FREQ=WEEKLY;BYDAY=MO")
    due = utc(task["due_at"]).astimezone(BERLIN)
    today = datetime.now(BERLIN).date()
    assert due.strftime("%a %H:%M:%S") == "Mon 23:59:59"
    assert today <= due.date() < today + timedelta(days=7)


async def test_a_reminder_is_stored_and_moving_it_lets_it_fire_again(
    client: httpx.AsyncClient,
) -> None:
    await set_zone(client, NEW_YORK)
    task = await make_task(client, user="alice", remind_at="2027-01-01T09:00:00")
    assert utc(task["remind_at"]) == local("2027-01-01T09:00", NEW_YORK)
    moved = await client.patch(
        f"/api/alice/tasks/{task['id']}",
        json={"remind_at": "2027-01-02T10:00:00Z"},
        headers=auth("alice"),
    )
    assert utc(moved.json()["remind_at"]) == utc("2027-01-02T10:00:00Z")
    cleared = await client.patch(
        f"/api/alice/tasks/{task['id']}", json={"remind_at": None}, headers=auth("alice")
    )
    assert cleared.json()["remind_at"] is None


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"recurrence": "FREQ=HOURLY"}, "FREQ must be one of"),
        ({"recurrence": "FREQ=MINUTELY;INTERVAL=5"}, "FREQ must be one of"),
        ({"recurrence": "every day"}, "KEY=VALUE"),
        ({"recurrence": "FREQ=WEEKLY;BYSETPOS=1"}, "BYSETPOS is not supported"),
        ({"recurrence": "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30"}, "never occurs"),
        ({"recurrence": "FREQ=WEEKLY;BYDAY=1MO"}, "needs FREQ=MONTHLY or YEARLY"),
        ({"recurrence": "FREQ=DAILY;UNTIL=20270101", "due_at": "2027-06-01"}, "no occurrence"),
        ({"remind_at": "2020-01-01T09:00:00Z"}, "remind_at is in the past"),
    ],
)
async def test_a_schedule_that_cannot_be_used_is_422_and_nothing_is_stored(
    client: httpx.AsyncClient, fields: dict[str, Any], problem: str
) -> None:
    response = await client.post(
        "/api/alice/tasks", json={"title": "x", **fields}, headers=auth("alice")
    )
    assert response.status_code == 422, response.text
    assert problem in str(response.json()["detail"])
    await make_task(client, user="alice", title="ok")
    patched = await client.patch("/api/alice/tasks/1", json=fields, headers=auth("alice"))
    assert patched.status_code == 422
    listed = (await client.get("/api/alice/tasks", headers=auth("alice"))).json()
    assert [(t["title"], t["recurrence"], t["remind_at"]) for t in listed["data"]] == [
        ("ok", None, None)
    ]


# ----------------------------------------------------------------- the tools and MCP


async def test_the_model_sets_a_repeat_and_a_reminder_and_hears_of_the_next_one(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.script(
        tool_calls(
            call(
                "add_todo",
                {
                    "title": "Water the plants",
                    "repeat": "every other thursday at 6pm",
                    "remind_at": "2027-01-07T17:30:00",
                    "due_at": "2027-01-07",
                },
            )
        ),
        reply("Added."),
        tool_calls(call("complete_todo", {"todo_id": "1"})),
        reply("Done; next one on Jan 21."),
        tool_calls(call("update_todo", {"todo_id": "2", "repeat": "every 90 minutes"})),
        reply("Sorry."),
        tool_calls(call("update_todo", {"todo_id": "2", "repeat": "never"})),
        reply("Stopped."),
    )
    added = await chat(agent_client, "water the plants", timezone="America/New_York")
    todo = added["tool_results"][0]["result"]["todo"]
    assert todo["due_at"] == "2027-01-07T18:00-05:00"
    assert todo["remind_at"] == "2027-01-07T17:30-05:00"
    assert todo["recurrence_text"] == "every other Thursday"

    done = await chat(agent_client, "done", timezone="America/New_York")
    result = done["tool_results"][0]["result"]
    assert result["next_todo"]["due_at"] == "2027-01-21T18:00-05:00"
    assert result["next_todo"]["remind_at"] == "2027-01-21T17:30-05:00"
    sent = model.requests[-1].body["messages"][-1]["content"]
    assert "next_todo" in sent  # the model is told, to tell the user

    unreadable = await chat(agent_client, "every 90 minutes")
    message = unreadable["tool_results"][0]["result"]["error"]
    assert "every weekday" in message  # which forms are read

    stopped = await chat(agent_client, "stop it")
    assert "recurrence" not in stopped["tool_results"][0]["result"]["todo"]


async def test_mcp_tools_take_repeat_and_remind_at(app: FastAPI) -> None:
    async with as_alice(app) as alice:
        added = structured(
            await alice.call_tool(
                "add_todo",
                {"title": "Rent", "repeat": "monthly on the 1st", "due_at": "2027-02-01"},
            )
        )["todo"]
        assert added["recurrence_text"] == "every month on the 1st"
        done = structured(await alice.call_tool("complete_todo", {"todo_id": str(added["number"])}))
        assert done["next_todo"]["due_at"].startswith("2027-03-01")
        assert "past" in tool_error(
            await alice.call_tool(
                "update_todo", {"todo_id": "2", "remind_at": "2001-01-01T00:00:00"}
            )
        )
        today = date.today().isoformat()
        assert "every monday" in tool_error(
            await alice.call_tool("add_todo", {"title": "x", "repeat": "now and then",
                                               "due_at": today})
        )  # fmt: skip
