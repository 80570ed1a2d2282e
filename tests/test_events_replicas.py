"""Events across processes: two `todo-agent serve` replicas on one database, started once
for the module, with a quick reminder clock.

A change made through one replica reaches streams held on the other; reminders fire once
whatever the number of replicas, and when one of them is killed; one that came due while
nothing ran fires, late, when the service is back; open streams hold no database
connection. The tests that kill and stop replicas come last.
"""

import asyncio
import contextlib
import json
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.conftest import auth, server_env
from tests.servers import ServerProcess, server_processes, start_all, stop_all, until
from tests.test_observability import Scrape

pytestmark = pytest.mark.asyncio

POLL_S = 0.2  # REMINDER_POLL_S
LATE_AFTER_S = 1.0  # REMINDER_LATE_AFTER_S
REMINDERS = 10


# --- A stream, read as a browser's EventSource would -----------------------------------------


@dataclass
class Seen:
    id: int
    type: str
    data: dict[str, Any]
    at: float  # time.monotonic() when it arrived


class EventStream:
    """GET /api/{user_id}/events on a real server, read in the background: the events it
    carried (`id:`, `event:`, `data:`), in order."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        server: ServerProcess,
        user_id: str,
        *,
        last_event_id: int | None = None,
    ) -> None:
        self.events: list[Seen] = []
        self._client = client
        self._url = f"{server.url}/api/{user_id}/events"
        self._headers = auth(user_id)
        if last_event_id is not None:
            self._headers["Last-Event-ID"] = str(last_event_id)
        self._connected = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        async with self._client.stream("GET", self._url, headers=self._headers) as response:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            fields: dict[str, str] = {}
            async for line in response.aiter_lines():
                if line.startswith(":"):
                    self._connected.set()  # the first comment: the stream is open
                elif line:
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
                elif fields:
                    data = json.loads(fields["data"])
                    seen = Seen(int(fields["id"]), fields["event"], data, time.monotonic())
                    self.events.append(seen)
                    fields = {}

    def of_type(self, kind: str) -> list[Seen]:
        return [event for event in self.events if event.type == kind]

    async def __aenter__(self) -> "EventStream":
        self._reader = asyncio.create_task(self._read())
        connected = asyncio.create_task(self._connected.wait())
        await asyncio.wait({self._reader, connected}, timeout=10, return_when="FIRST_COMPLETED")
        connected.cancel()
        if self._reader.done():
            self._reader.result()  # raises what went wrong
        assert self._connected.is_set(), "the stream did not open within 10 s"
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._reader is not None
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
            await self._reader


# --- Replicas -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def replicas(
    database_url: str, engine: AsyncEngine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ServerProcess]]:
    logs = tmp_path_factory.mktemp("replicas")
    env = server_env(
        database_url,
        REMINDER_POLL_S=str(POLL_S),
        REMINDER_LATE_AFTER_S=str(LATE_AFTER_S),
        EVENTS_KEEPALIVE_S="1",
        # Small pools: fewer connections than the streams a test holds open, and the test
        # database server is shared.
        DB_POOL_SIZE="4",
        DB_MAX_OVERFLOW="4",
    )
    with server_processes(env, logs, ("a", "b")) as servers:
        yield servers


@pytest.fixture
def both(replicas: list[ServerProcess]) -> list[ServerProcess]:
    """Replicas A and B, running (again) for this test."""
    start_all(replicas)
    return replicas


@pytest.fixture
def user() -> str:
    return f"replicas-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    timeout = httpx.Timeout(10, read=None)  # streams stay quiet for as long as they like
    async with httpx.AsyncClient(timeout=timeout) as client:
        yield client


async def create_task(
    http: httpx.AsyncClient, server: ServerProcess, user_id: str, **fields: Any
) -> dict[str, Any]:
    response = await http.post(
        f"{server.url}/api/{user_id}/tasks",
        headers=auth(user_id),
        json={"title": "Call the plumber"} | fields,
    )
    assert response.status_code == 201, response.text
    task: dict[str, Any] = response.json()
    return task


async def reminder_events(engine: AsyncEngine, user_id: str) -> dict[str, list[dict[str, Any]]]:
    """The user's reminder.due events in the outbox, by task id."""
    async with engine.connect() as connection:
        rows = await connection.execute(
            text(
                "SELECT subject, data FROM events"
                " WHERE user_id = :user_id AND type = 'reminder.due' ORDER BY id"
            ),
            {"user_id": user_id},
        )
        fired: dict[str, list[dict[str, Any]]] = {}
        for subject, data in rows:
            fired.setdefault(str(subject), []).append(data)
        return fired


async def reminded_at(engine: AsyncEngine, user_id: str) -> dict[str, datetime | None]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            text("SELECT id, reminded_at FROM tasks WHERE created_by = :user_id"),
            {"user_id": user_id},
        )
        return {str(task_id): at for task_id, at in rows}


async def reminders_fired_total(http: httpx.AsyncClient, servers: list[ServerProcess]) -> float:
    total = 0.0
    for server in servers:
        scrape = Scrape((await http.get(f"{server.url}/metrics")).text)
        total += scrape.value("todo_agent_reminders_fired_total")
    return total


async def database_connections(engine: AsyncEngine, application_name: str) -> int:
    async with engine.connect() as connection:
        count = await connection.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = :name"
            ),
            {"name": application_name},
        )
        return int(count or 0)


def soon(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


# --- Streams across replicas ----------------------------------------------------------------


async def test_change_through_one_replica_reaches_a_stream_on_the_other_within_2_s(
    both: list[ServerProcess], http: httpx.AsyncClient, user: str
) -> None:
    a, b = both
    async with EventStream(http, b, user) as on_b, EventStream(http, a, user) as on_a:
        changed = time.monotonic()
        task = await create_task(http, a, user)

        async def arrived() -> bool:
            return len(on_b.events) >= 1

        await until(arrived, timeout_s=2, message="the change on A did not reach B in 2 s")
        [created] = on_b.events
        print(f"\nA -> B in {1000 * (created.at - changed):.0f} ms")
        assert created.type == "task.created"
        assert created.data["type"] == "task.created"
        assert created.data["subject"] == task["id"]
        assert created.data["id"] == str(created.id)

        # And back: completed through B, seen on A, with the same ids on both.
        changed = time.monotonic()
        response = await http.patch(
            f"{b.url}/api/{user}/tasks/{task['id']}/complete",
            headers=auth(user),
            json={"completed": True},
        )
        assert response.status_code == 200, response.text

        async def both_arrived() -> bool:
            return len(on_a.events) >= 2 and len(on_b.events) >= 2

        await until(both_arrived, timeout_s=2, message="the change on B did not reach A in 2 s")
        assert on_a.events[1].at - changed < 2
        for stream in (on_a, on_b):
            assert [(e.id, e.type) for e in stream.events] == [
                (created.id, "task.created"),
                (on_b.events[1].id, "task.completed"),
            ]
        assert on_b.events[1].id > created.id


# --- Reminders fire once --------------------------------------------------------------------


async def test_ten_reminders_due_together_fire_once_each_across_two_replicas(
    both: list[ServerProcess], http: httpx.AsyncClient, engine: AsyncEngine, user: str
) -> None:
    a, b = both
    fired_before = await reminders_fired_total(http, both)
    remind_at = soon(2)
    async with EventStream(http, a, user) as on_a, EventStream(http, b, user) as on_b:
        tasks = await asyncio.gather(
            *(
                create_task(http, (a, b)[n % 2], user, title=f"reminder {n}", remind_at=remind_at)
                for n in range(REMINDERS)
            )
        )
        ids = sorted(task["id"] for task in tasks)

        async def all_seen() -> bool:
            return all(len(s.of_type("reminder.due")) >= REMINDERS for s in (on_a, on_b))

        await until(all_seen, timeout_s=8, message="the reminders did not all reach both streams")
        await asyncio.sleep(3 * POLL_S)  # a reminder that fires twice would do so by now
        for stream in (on_a, on_b):
            reminders = stream.of_type("reminder.due")
            assert sorted(event.data["subject"] for event in reminders) == ids
            assert all(event.data["data"]["late"] is False for event in reminders)

    fired = await reminder_events(engine, user)
    assert sorted(fired) == ids
    assert all(len(events) == 1 for events in fired.values()), fired
    # reminded_at was set once: it is still what the one event recorded.
    stored = await reminded_at(engine, user)
    for task_id, [event] in fired.items():
        at = stored[task_id]
        assert at is not None
        assert datetime.fromisoformat(event["task"]["reminded_at"]) == at
    assert await reminders_fired_total(http, both) == fired_before + REMINDERS


# --- Streams hold no connection ---------------------------------------------------------------


async def test_twenty_open_streams_hold_no_database_connection(
    both: list[ServerProcess], http: httpx.AsyncClient, engine: AsyncEngine, user: str
) -> None:
    a, _ = both
    async with EventStream(http, a, user):
        pass  # the user exists, and the pool has what one stream's opening needs
    await asyncio.sleep(0.5)
    before = await database_connections(engine, "todo-agent")
    assert await database_connections(engine, "todo-agent-listen") == 2  # one per replica

    async with contextlib.AsyncExitStack() as stack:
        streams = [await stack.enter_async_context(EventStream(http, a, user)) for _ in range(20)]
        samples = []
        for _ in range(5):
            samples.append(await database_connections(engine, "todo-agent"))
            await asyncio.sleep(0.1)
        print(f"\npooled connections: {before} before, {samples} with 20 streams open")
        # Flat: the pool may lend one more to a background loop, never one per stream.
        assert max(samples) <= before + 2, (before, samples)

        # With all twenty open, the API answers and every stream gets the change.
        started = time.monotonic()
        await create_task(http, a, user)

        async def everywhere() -> bool:
            return all(len(stream.events) == 1 for stream in streams)

        await until(everywhere, timeout_s=2, message="not every open stream got the change")
        print(f"20 streams served in {1000 * (time.monotonic() - started):.0f} ms")


# --- Crashes and stops (these leave replicas down: they come last) ---------------------------


async def test_reminders_fire_once_when_a_replica_is_killed_while_they_come_due(
    both: list[ServerProcess], http: httpx.AsyncClient, engine: AsyncEngine, user: str
) -> None:
    a, b = both
    async with EventStream(http, b, user) as on_b:
        start = datetime.now(UTC)
        # Due one by one over a second; A is killed halfway through.
        tasks = await asyncio.gather(
            *(
                create_task(
                    http,
                    (a, b)[n % 2],
                    user,
                    title=f"reminder {n}",
                    remind_at=(start + timedelta(seconds=2 + n / REMINDERS)).isoformat(),
                )
                for n in range(REMINDERS)
            )
        )
        ids = sorted(task["id"] for task in tasks)
        await asyncio.sleep(
            max(0.0, (start + timedelta(seconds=2.5) - datetime.now(UTC)).total_seconds())
        )
        a.stop(signal.SIGKILL)

        async def all_fired() -> bool:
            return len(on_b.of_type("reminder.due")) >= REMINDERS

        await until(all_fired, timeout_s=8, message="B did not fire the reminders A left")
        await asyncio.sleep(3 * POLL_S)
        assert sorted(event.data["subject"] for event in on_b.of_type("reminder.due")) == ids

    fired = await reminder_events(engine, user)
    assert sorted(fired) == ids
    assert all(len(events) == 1 for events in fired.values()), fired
    for [event] in fired.values():
        lag = datetime.fromisoformat(event["task"]["reminded_at"]) - datetime.fromisoformat(
            event["remind_at"]
        )
        assert lag < timedelta(seconds=5)  # the contract's "within 5 s"


async def test_reminder_missed_while_nothing_ran_fires_late_on_start(
    replicas: list[ServerProcess], http: httpx.AsyncClient, engine: AsyncEngine, user: str
) -> None:
    up = [server for server in replicas if server.running] or replicas[1:]
    start_all(up)
    task = await create_task(http, up[0], user, remind_at=soon(3600))
    stop_all(replicas)  # nothing runs

    async with engine.begin() as connection:
        await connection.execute(
            text("UPDATE tasks SET remind_at = now() - interval '10 seconds' WHERE id = :id"),
            {"id": task["id"]},
        )
        last_id = await connection.scalar(
            text("SELECT max(id) FROM events WHERE user_id = :user_id"), {"user_id": user}
        )
    assert await reminder_events(engine, user) == {}

    a = replicas[0]
    start_all([a])
    # A stream resuming from before the restart gets it, whether it fired before or after
    # the stream opened.
    async with EventStream(http, a, user, last_event_id=last_id) as stream:

        async def fired() -> bool:
            return len(stream.of_type("reminder.due")) >= 1

        await until(fired, timeout_s=5, message="the missed reminder did not fire on start")
        [reminder] = stream.of_type("reminder.due")
        assert reminder.data["subject"] == task["id"]
        assert reminder.data["data"]["late"] is True

    stored = await reminder_events(engine, user)
    assert list(stored) == [task["id"]]
    [event] = stored[task["id"]]
    assert event["late"] is True
