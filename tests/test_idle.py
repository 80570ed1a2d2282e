"""Idle costs nothing: two `todo-agent serve` replicas on one database, started once for the
module, with the reminder clock's safety net out of reach (REMINDER_POLL_S an hour), so
that only what the database says wakes them: the next reminder's time, read in a round,
and the notification of a reminder written anywhere.

Replica B reaches PostgreSQL through `tests/statement_counter.py`, a proxy that counts the
statements it sends (simple queries and executes, BEGIN and COMMIT included).
"""

import asyncio
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.conftest import server_env
from tests.servers import ServerProcess, start_all, until
from tests.statement_counter import StatementCounter
from tests.test_events_replicas import create_task, reminder_events, reminders_fired_total, soon

pytestmark = pytest.mark.asyncio

LATE_AFTER_S = 5.0  # REMINDER_LATE_AFTER_S: the contract's "within 5 s"
# Statements an idle replica may send over the window: each of its loops asks at most once
# a minute (a round is 4 or 5 statements, upkeep's about 15), while polling sent about 9 a
# second. Generous: a round of every loop may land in the window.
WINDOW_S = 10.0
IDLE_BOUND = 45


@pytest.fixture(scope="module")
def counter(database_url: str) -> Iterator[StatementCounter]:
    with StatementCounter(database_url) as counting:
        yield counting


@pytest.fixture(scope="module")
def replicas(
    database_url: str, counter: StatementCounter, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ServerProcess]]:
    logs = tmp_path_factory.mktemp("idle")
    env = server_env(
        database_url,
        REMINDER_POLL_S="3600",
        REMINDER_LATE_AFTER_S=str(LATE_AFTER_S),
        DB_POOL_SIZE="4",
        DB_MAX_OVERFLOW="4",
    )
    counted = {**env, "DATABASE_URL": counter.url_for(env["DATABASE_URL"])}
    servers = [
        ServerProcess(env, log=logs / "a.log"),
        ServerProcess(counted, log=logs / "b.log"),
    ]
    try:
        start_all(servers)
        yield servers
    finally:
        for server in servers:
            server.kill()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


async def _still(counter: StatementCounter, *, for_s: float = 1.0, timeout_s: float = 60) -> None:
    """Wait until the replica has sent nothing for `for_s` seconds."""
    deadline = time.monotonic() + timeout_s
    seen, since = counter.total, time.monotonic()
    while time.monotonic() - since < for_s:
        assert time.monotonic() < deadline, "the replica never went quiet"
        await asyncio.sleep(0.05)
        if counter.total != seen:
            seen, since = counter.total, time.monotonic()


async def test_an_idle_replica_sends_the_database_almost_nothing(
    replicas: list[ServerProcess], counter: StatementCounter
) -> None:
    await _still(counter)  # past start-up's first rounds (and the catch-up on listening)
    before = counter.total
    await asyncio.sleep(WINDOW_S)
    sent = counter.total - before
    assert sent <= IDLE_BOUND, counter.snapshot().most_common(10)


async def test_a_reminder_written_through_one_replica_fires_on_the_other_woken_by_notify(
    replicas: list[ServerProcess], http: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    a, b = replicas
    user = f"idle-{uuid.uuid4().hex[:12]}"
    fired_on_b = await reminders_fired_total(http, [b])
    # B asked when the next reminder is a while ago (none): it sleeps for the hour.
    await asyncio.sleep(1)
    task = await create_task(http, a, user, remind_at=soon(2))
    assert a.process is not None
    a.process.send_signal(signal.SIGSTOP)  # the writer cannot fire it: only B can
    try:

        async def fired() -> bool:
            return bool(await reminder_events(engine, user))

        await until(fired, timeout_s=30, message="the reminder never fired on the other replica")
    finally:
        a.process.send_signal(signal.SIGCONT)
    [[event]] = (await reminder_events(engine, user)).values()
    assert event["task"]["id"] == task["id"]
    assert event["late"] is False  # within REMINDER_LATE_AFTER_S of its time
    assert await reminders_fired_total(http, [b]) == fired_on_b + 1


async def test_after_the_listening_connection_is_lost_every_replica_catches_up_once(
    replicas: list[ServerProcess], http: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    a, _ = replicas
    user = f"idle-{uuid.uuid4().hex[:12]}"
    task = await create_task(http, a, user, remind_at=soon(3600))
    # Moved to now with the triggers off: no notification, as if it was sent while the
    # replicas were not listening. Their clocks sleep on, to the hour.
    async with engine.begin() as connection:
        await connection.execute(text("SET LOCAL session_replication_role = replica"))
        await connection.execute(
            text("UPDATE tasks SET remind_at = now() WHERE id = :id"), {"id": task["id"]}
        )
    assert await reminder_events(engine, user) == {}
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'todo-agent-listen' AND datname = current_database()"
            )
        )

    async def fired() -> bool:
        return bool(await reminder_events(engine, user))

    await until(fired, timeout_s=30, message="no replica caught up after listening again")
    assert list(await reminder_events(engine, user)) == [task["id"]]
