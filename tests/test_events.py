"""Events: one per committed task change from every surface (none for a refused one), the
user's stream with its tenancy and Last-Event-ID resume under concurrent writes, and the
calendar feed as calendar parsers read it."""

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import icalendar
import pytest
import recurring_ical_events
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.context import AppContext
from tests.chat_helpers import chat
from tests.conftest import auth, server_env
from tests.factories import make_task
from tests.fake_openai import FakeOpenAI, call, reply, tool_calls
from tests.servers import ServerProcess, until
from tests.test_mcp import as_alice, structured


async def events_of(engine: AsyncEngine, user: str = "alice") -> list[tuple[str, str]]:
    """(type, task title) of the user's events, in order."""
    async with engine.connect() as connection:
        rows = await connection.execute(
            text(
                "SELECT type, coalesce(data->'task'->>'title', '') FROM events "
                "WHERE user_id = :user ORDER BY id"
            ),
            {"user": user},
        )
        return [(row[0], row[1]) for row in rows]


# ------------------------------------------------------------------ one event per change


async def test_every_rest_change_writes_its_event_and_a_no_op_none(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    task = await make_task(client, user="alice", title="Plan trip", steps=["book", "pack"])
    url = f"/api/alice/tasks/{task['id']}"
    await client.patch(url, json={"priority": "high"}, headers=auth("alice"))
    await client.patch(url, json={"priority": "high"}, headers=auth("alice"))  # changes nothing
    await client.patch(f"{url}/complete", json={"completed": True}, headers=auth("alice"))
    await client.patch(f"{url}/complete", json={"completed": False}, headers=auth("alice"))
    await client.delete(url, headers=auth("alice"))
    events = await events_of(engine)
    assert events[:6] == [
        ("task.created", "Plan trip"),
        ("task.created", "book"),
        ("task.created", "pack"),
        ("task.updated", "Plan trip"),
        ("task.completed", "Plan trip"),
        ("task.reopened", "Plan trip"),
    ]
    # The steps go with their task (the cascade): an event each.
    assert sorted(events[6:]) == [
        ("task.deleted", "Plan trip"),
        ("task.deleted", "book"),
        ("task.deleted", "pack"),
    ]


async def test_a_refused_change_writes_no_event(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await make_task(client, user="alice", title="Keep")
    refused = [
        await client.post("/api/alice/tasks", json={"title": ""}, headers=auth("alice")),
        await client.post(
            "/api/alice/tasks",
            json={"title": "x", "recurrence": "FREQ=HOURLY"},
            headers=auth("alice"),
        ),
        await client.patch(
            "/api/alice/tasks/1", json={"remind_at": "2001-01-01T00:00:00Z"}, headers=auth("alice")
        ),
        await client.post(
            "/api/alice/tasks", json={"title": "step", "parent_id": 99}, headers=auth("alice")
        ),
    ]
    assert [r.status_code for r in refused] == [422, 422, 422, 404]
    assert await events_of(engine) == [("task.created", "Keep")]


async def test_completing_a_repeating_task_writes_its_completion_and_the_next_ones_creation(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    task = await make_task(
        client, user="alice", title="Gym", due_at="2027-05-03", recurrence="FREQ=DAILY"
    )
    await client.patch(f"/api/alice/tasks/{task['id']}/complete", headers=auth("alice"))
    assert await events_of(engine) == [
        ("task.created", "Gym"),
        ("task.completed", "Gym"),
        ("task.created", "Gym"),
    ]


async def test_the_models_tools_and_the_stub_write_events(
    agent_client: httpx.AsyncClient,
    client: httpx.AsyncClient,
    model: FakeOpenAI,
    engine: AsyncEngine,
) -> None:
    model.script(
        tool_calls(call("add_todo", {"title": "Call mum"})),
        reply("Added."),
        tool_calls(call("complete_todo", {"todo_id": "99"})),  # refused: not found
        reply("No such task."),
    )
    await chat(agent_client, "add call mum")
    await chat(agent_client, "done 99")
    await chat(client, "Add a task to buy bread", user="bob")
    await chat(client, "Mark task 1 as complete", user="bob")
    assert await events_of(engine, "alice") == [("task.created", "Call mum")]
    assert await events_of(engine, "bob") == [
        ("task.created", "Buy bread"),
        ("task.completed", "Buy bread"),
    ]


async def test_mcp_tools_write_events(app: FastAPI, engine: AsyncEngine) -> None:
    async with as_alice(app) as alice:
        added = structured(await alice.call_tool("add_todo", {"title": "Via MCP"}))["todo"]
        await alice.call_tool("update_todo", {"todo_id": str(added["number"]), "title": "MCP!"})
        await alice.call_tool("delete_todo", {"todo_id": added["id"]})
    assert await events_of(engine) == [
        ("task.created", "Via MCP"),
        ("task.updated", "MCP!"),
        ("task.deleted", "MCP!"),
    ]


async def test_an_event_is_a_cloudevent_with_the_task(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    task = await make_task(client, user="alice", title="Shape", tags=["a"])
    async with engine.connect() as connection:
        [(kind, subject, data)] = (
            await connection.execute(text("SELECT type, subject, data FROM events"))
        ).all()
    assert (kind, str(subject)) == ("task.created", task["id"])
    assert data["user_id"] == "alice"
    for field in ("id", "number", "title", "tags", "priority", "completed", "recurrence"):
        assert data["task"][field] == task[field], field


# ------------------------------------------------------------------ the stream, for real


@pytest.fixture(scope="module")
def server(
    database_url: str, engine: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    env = server_env(database_url, EVENTS_KEEPALIVE_S="0.5", REMINDER_POLL_S="0.2")
    with ServerProcess(env, log=tmp_path_factory.mktemp("events") / "serve.log") as process:
        yield process


class Stream:
    """An open /events stream, read as a browser's EventSource would parse it."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = response.aiter_lines()
        self.comments = 0

    async def next(self, timeout_s: float = 5.0) -> dict[str, Any]:
        event: dict[str, Any] = {}
        async with asyncio.timeout(timeout_s):
            async for line in self.lines:
                if line.startswith(":"):
                    self.comments += 1
                elif line.startswith("id: "):
                    event["id"] = int(line[4:])
                elif line.startswith("event: "):
                    event["event"] = line[7:]
                elif line.startswith("data: "):
                    event["data"] = json.loads(line[6:])
                elif not line and event:
                    return event
        raise AssertionError("stream ended")


async def open_stream(
    client: httpx.AsyncClient, user: str, *, last_event_id: int | None = None
) -> AsyncIterator[Stream]:
    """Async-iterated once, so that `break` closes the stream."""
    headers = auth(user)
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    async with client.stream("GET", f"/api/{user}/events", headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Stream(response)


def streaming(server: ServerProcess) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.url, timeout=httpx.Timeout(10, read=10))


async def test_a_stream_gets_its_users_changes_live_and_never_anothers(
    server: ServerProcess,
) -> None:
    alice, bob = f"alice-{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"
    async with streaming(server) as http:
        forbidden = await http.get(f"/api/{alice}/events", headers=auth(bob))
        assert forbidden.status_code == 403
        assert (await http.get(f"/api/{alice}/events")).status_code == 401
        async for stream in open_stream(http, alice):
            await make_task(http, user=bob, title="Bob's secret")
            mine = await make_task(http, user=alice, title="Mine")
            event = await stream.next()
            assert event["event"] == "task.created"
            assert event["data"]["type"] == "task.created"
            assert event["data"]["id"] == str(event["id"])
            assert event["data"]["subject"] == mine["id"]
            assert event["data"]["data"]["task"]["title"] == "Mine"
            assert event["data"]["specversion"] == "1.0"
            await asyncio.sleep(0.7)
            await http.delete(f"/api/{alice}/tasks/{mine['id']}", headers=auth(alice))
            deleted = await stream.next()
            assert deleted["event"] == "task.deleted"
            assert deleted["data"]["data"]["task"] == {
                "id": mine["id"],
                "number": mine["number"],
                "title": "Mine",
            }
            assert stream.comments >= 2  # connected, then at least one keep-alive
            break


async def test_last_event_id_resumes_without_loss_or_repeat_under_concurrent_writes(
    server: ServerProcess, engine: AsyncEngine
) -> None:
    user = f"writer-{uuid.uuid4().hex[:6]}"
    async with streaming(server) as http:

        async def write(n: int) -> None:
            task = await make_task(http, user=user, title=f"t{n}")
            await http.patch(f"/api/{user}/tasks/{task['id']}/complete", headers=auth(user))

        writers = asyncio.ensure_future(asyncio.gather(*(write(n) for n in range(40))))
        seen: list[int] = []
        last = 0  # from the start: the writers may be ahead of the first connection
        # Read a few events, drop the connection, resume from the last id: again and again
        # while the writers run, and once more after they are done, until a resume is quiet.
        async with asyncio.timeout(60):
            quiet = False
            while not quiet:
                finished = writers.done()
                async for stream in open_stream(http, user, last_event_id=last):
                    for _ in range(7):
                        try:
                            # Once the writers are done, quiet means quiet for 5 s (a
                            # loaded machine may take more than 1 s to tell the last ones).
                            event = await stream.next(timeout_s=5 if finished else 1)
                        except TimeoutError:
                            quiet = finished
                            break
                        seen.append(event["id"])
                        last = event["id"]
                    break
        await writers
    async with engine.connect() as connection:
        rows = await connection.execute(
            text("SELECT id FROM events WHERE user_id = :user ORDER BY id"), {"user": user}
        )
        written = [row[0] for row in rows]
    assert len(written) == 80
    assert seen == written  # every one, once, in order


async def test_a_resumed_stream_replays_only_what_is_retained(
    server: ServerProcess, engine: AsyncEngine
) -> None:
    user = f"old-{uuid.uuid4().hex[:6]}"
    async with streaming(server) as http:
        await make_task(http, user=user, title="ancient")
        await make_task(http, user=user, title="recent")
        async with engine.begin() as connection:
            await connection.execute(
                text(
                    "UPDATE events SET occurred_at = now() - interval '2 days' "
                    "WHERE user_id = :user AND data->'task'->>'title' = 'ancient'"
                ),
                {"user": user},
            )
        async for stream in open_stream(http, user, last_event_id=0):
            event = await stream.next()
            assert event["data"]["data"]["task"]["title"] == "recent"
            break
        bad = await http.get(f"/api/{user}/events", headers={**auth(user), "Last-Event-ID": "x"})
        assert bad.status_code == 422


async def test_a_reminder_reaches_the_stream_once(server: ServerProcess) -> None:
    user = f"remind-{uuid.uuid4().hex[:6]}"
    async with streaming(server) as http:
        async for stream in open_stream(http, user):
            soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
            task = await make_task(http, user=user, title="Stretch", remind_at=soon)
            assert (await stream.next())["event"] == "task.created"
            due = await stream.next(timeout_s=6)
            assert due["event"] == "reminder.due"
            assert due["data"]["data"]["task"]["id"] == task["id"]
            assert due["data"]["data"]["late"] is False
            assert due["data"]["data"]["remind_at"]
            got = await http.get(f"/api/{user}/tasks/{task['id']}", headers=auth(user))
            assert got.json()["reminded_at"] is not None
            with pytest.raises(TimeoutError):
                await stream.next(timeout_s=1)
            break


async def test_completing_clearing_or_deleting_cancels_a_reminder_and_moving_it_moves_it(
    server: ServerProcess, engine: AsyncEngine
) -> None:
    user = f"cancel-{uuid.uuid4().hex[:6]}"
    async with streaming(server) as http:
        soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
        done = await make_task(http, user=user, title="done", remind_at=soon)
        cleared = await make_task(http, user=user, title="cleared", remind_at=soon)
        gone = await make_task(http, user=user, title="gone", remind_at=soon)
        moved = await make_task(http, user=user, title="moved", remind_at=soon)
        await http.patch(f"/api/{user}/tasks/{done['id']}/complete", headers=auth(user))
        await http.patch(
            f"/api/{user}/tasks/{cleared['id']}", json={"remind_at": None}, headers=auth(user)
        )
        await http.delete(f"/api/{user}/tasks/{gone['id']}", headers=auth(user))
        later = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
        await http.patch(
            f"/api/{user}/tasks/{moved['id']}", json={"remind_at": later}, headers=auth(user)
        )
        async for stream in open_stream(http, user):
            due = await stream.next(timeout_s=6)
            assert due["event"] == "reminder.due"
            assert due["data"]["data"]["task"]["title"] == "moved"
            assert datetime.now(UTC) >= datetime.fromisoformat(later)
            break
    reminders = [e for e in await events_of(engine, user) if e[0] == "reminder.due"]
    assert reminders == [("reminder.due", "moved")]


async def test_a_reminder_is_late_when_it_fires_more_than_5_s_after_its_time(
    app: FastAPI, client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """The contract's `late`, with the default REMINDER_LATE_AFTER_S: a reminder missed
    during a short restart (10 s) is late; one a few seconds behind is not."""
    context: AppContext = app.state.context
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    for title in ("missed", "behind"):
        await make_task(client, user="alice", title=title, remind_at=later)
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "UPDATE tasks SET remind_at = now() - CASE title WHEN 'missed'"
                " THEN interval '10 seconds' ELSE interval '3 seconds' END"
            )
        )
    await context.reminders.fire_due()

    async def fired() -> list[tuple[Any, ...]]:
        async with engine.connect() as connection:
            rows = await connection.execute(
                text(
                    "SELECT data->'task'->>'title', data->'late' FROM events"
                    " WHERE type = 'reminder.due' ORDER BY 1"
                )
            )
            return [tuple(row) for row in rows]

    # The app's own reminder loop may have claimed them first (its claim skips what this
    # call would lock), so wait for whichever fired them to commit.
    async def both_fired() -> bool:
        return len(await fired()) == 2

    await until(both_fired, timeout_s=5, message="the reminders did not fire")
    assert await fired() == [("behind", False), ("missed", True)]


# ------------------------------------------------------------------ the calendar feed


async def test_the_calendar_feed_opens_in_calendar_parsers_with_the_right_events(
    client: httpx.AsyncClient,
) -> None:
    await client.patch(
        "/api/alice/settings", json={"timezone": "Europe/Berlin"}, headers=auth("alice")
    )
    await make_task(client, user="alice", title="All day", due_at="2027-03-10")
    timed = await make_task(
        client,
        user="alice",
        title="Dentist",
        due_at="2027-03-11T15:00:00",
        remind_at="2027-03-11T14:30:00",
    )
    weekly = await make_task(
        client,
        user="alice",
        title="Yoga",
        due_at="2027-03-22T18:00:00",
        recurrence="FREQ=WEEKLY;BYDAY=MO",
        priority="high",
    )
    done = await make_task(client, user="alice", title="Done", due_at="2027-03-12")
    await client.patch(f"/api/alice/tasks/{done['id']}/complete", headers=auth("alice"))
    await make_task(client, user="alice", title="Undated")

    created = await client.post("/api/alice/calendar", headers=auth("alice"))
    assert created.status_code == 201
    url = created.json()["url"]
    path = httpx.URL(url).path
    assert path.startswith("/calendar/")
    assert path.endswith(".ics")
    feed = await client.get(path)
    assert feed.status_code == 200
    assert feed.headers["content-type"].startswith("text/calendar")

    cal = icalendar.Calendar.from_ical(feed.content)
    events = {str(e["SUMMARY"]): e for e in cal.walk("VEVENT")}
    assert set(events) == {"All day", "Dentist", "Yoga"}
    assert events["All day"].decoded("DTSTART") == date(2027, 3, 10)
    berlin = ZoneInfo("Europe/Berlin")
    dentist = events["Dentist"]
    assert str(dentist["UID"]) == timed["id"]
    assert dentist.decoded("DTSTART") == datetime(2027, 3, 11, 15, tzinfo=berlin)
    [alarm] = dentist.walk("VALARM")
    assert alarm.decoded("TRIGGER") == timedelta(minutes=-30)
    assert str(events["Yoga"]["UID"]) == weekly["id"]
    # A priority as RFC 5545 numbers it; a task without one has no PRIORITY (not medium).
    assert events["Yoga"]["PRIORITY"] == 1
    assert "PRIORITY" not in dentist

    # A calendar app expands the rule: Yoga every Monday at 18:00 Berlin time, DST included.
    window = recurring_ical_events.of(cal).between(date(2027, 3, 20), date(2027, 4, 10))
    yoga = sorted(e.decoded("DTSTART") for e in window if str(e["SUMMARY"]) == "Yoga")
    assert [d.astimezone(berlin).strftime("%m-%d %H:%M") for d in yoga] == [
        "03-22 18:00",
        "03-29 18:00",
        "04-05 18:00",
    ]

    rotated = (await client.post("/api/alice/calendar", headers=auth("alice"))).json()["url"]
    assert (await client.get(path)).status_code == 404
    assert (await client.get(httpx.URL(rotated).path)).status_code == 200
    assert (await client.delete("/api/alice/calendar", headers=auth("alice"))).status_code == 204
    assert (await client.get(httpx.URL(rotated).path)).status_code == 404
    assert (await client.get("/calendar/not-a-secret.ics")).status_code == 404


async def test_the_calendar_feed_is_rate_limited(client: httpx.AsyncClient) -> None:
    path = httpx.URL(
        (await client.post("/api/alice/calendar", headers=auth("alice"))).json()["url"]
    ).path
    statuses = [(await client.get(path)).status_code for _ in range(70)]
    assert statuses[0] == 200
    assert 429 in statuses
    limited = await client.get(path)
    assert limited.status_code == 429
    assert int(limited.headers["Retry-After"]) >= 1
