"""Exactly once across processes: two `todo-agent serve` replicas on one database send each
reminder to each browser once, whichever of them is SIGKILLed with pushes in flight, and the
daily plan once.

The push service answers these pushes slowly, so the kill lands while the replica waits for
answers; a push whose sender died before the answer was never accepted (the fake push
service counts only answers taken by a live sender), and the other replica sends it once
the lease runs out.
"""

import asyncio
import signal
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.services.notify.keys import generate_private_key
from tests.conftest import auth, server_env
from tests.push_service import BrowserSubscription, FakePushService
from tests.servers import ServerProcess, server_processes, start_all, until

REMINDERS = 8
SLOW_S = 3.0


@pytest.fixture(scope="module")
def push_service() -> Iterator[FakePushService]:
    with FakePushService() as service:
        yield service


@pytest.fixture(scope="module")
def replicas(
    database_url: str,
    engine: AsyncEngine,
    tmp_path_factory: pytest.TempPathFactory,
    push_service: FakePushService,
) -> Iterator[list[ServerProcess]]:
    logs = tmp_path_factory.mktemp("notify-replicas")
    env = server_env(
        database_url,
        REMINDER_POLL_S="0.2",
        VAPID_PRIVATE_KEY=generate_private_key(),  # one key pair for both
        NOTIFY_ALLOWED_HOSTS="127.0.0.1",
        WEBHOOK_TIMEOUT_S=str(SLOW_S + 1),
        WEBHOOK_RETRY_SCHEDULE_S="0.5,0.5,0.5",
        DB_POOL_SIZE="4",
        DB_MAX_OVERFLOW="4",
    )
    with server_processes(env, logs, ("a", "b")) as servers:
        yield servers


@pytest.fixture
def both(replicas: list[ServerProcess]) -> list[ServerProcess]:
    start_all(replicas)
    return replicas


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


async def subscribe(
    http: httpx.AsyncClient, server: ServerProcess, user: str, service: FakePushService
) -> BrowserSubscription:
    browser = BrowserSubscription(next(service.endpoints(1)))
    response = await http.post(
        f"{server.url}/api/{user}/push/subscriptions", headers=auth(user), json=browser.to_json()
    )
    assert response.status_code == 201, response.text
    return browser


async def test_the_daily_plan_is_sent_once_by_two_replicas(
    both: list[ServerProcess],
    http: httpx.AsyncClient,
    engine: AsyncEngine,
    push_service: FakePushService,
) -> None:
    push_service.clear()
    a, b = both
    user = f"plan-{uuid.uuid4().hex[:8]}"
    browser = await subscribe(http, a, user, push_service)
    today = datetime.now(UTC).date()
    await http.post(
        f"{a.url}/api/{user}/tasks", headers=auth(user), json={"title": "x", "due_at": str(today)}
    )
    await http.patch(
        f"{b.url}/api/{user}/notifications",
        headers=auth(user),
        json={"digest": {"at": "00:00", "channels": ["push"]}},
    )
    for _ in range(3):  # due, again and again, with both replicas told each time
        async with engine.begin() as connection:
            await connection.execute(
                text(
                    "UPDATE notification_settings SET digest_next_at = now() - interval '1 s'"
                    " WHERE user_id = :user"
                ),
                {"user": user},
            )
            await connection.execute(text("SELECT pg_notify('todo_agent_notify', '')"))
        await asyncio.sleep(0.5)
    path = browser.endpoint.removeprefix(push_service.url)

    async def sent() -> bool:
        return len(push_service.to(path)) >= 1

    await until(sent, timeout_s=10, message="no daily plan")
    await asyncio.sleep(1.0)
    assert len(push_service.to(path)) == 1


async def test_each_reminder_reaches_each_browser_once_though_a_replica_is_killed_mid_send(
    both: list[ServerProcess],
    http: httpx.AsyncClient,
    engine: AsyncEngine,
    push_service: FakePushService,
) -> None:
    push_service.clear()
    a, b = both
    user = f"replicas-{uuid.uuid4().hex[:8]}"
    browsers = [await subscribe(http, server, user, push_service) for server in (a, b)]
    for browser in browsers:  # every first answer slow; later ones at once
        push_service.answer(
            browser.endpoint.removeprefix(push_service.url), *[201] * REMINDERS, delay=SLOW_S
        )
    remind_at = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
    tasks: list[dict[str, Any]] = []
    for n in range(REMINDERS):
        response = await http.post(
            f"{(a, b)[n % 2].url}/api/{user}/tasks",
            headers=auth(user),
            json={"title": f"reminder {n}", "remind_at": remind_at},
        )
        assert response.status_code == 201
        tasks.append(response.json())

    async def all_in_flight() -> bool:
        return push_service.waiting >= REMINDERS * len(browsers)

    await until(all_in_flight, timeout_s=15, message="the pushes did not all go out")
    a.stop(signal.SIGKILL)

    async def all_accepted() -> bool:
        return len(push_service.received) >= REMINDERS * len(browsers)

    await until(all_accepted, timeout_s=30, message="B did not send what A left")
    await asyncio.sleep(1.5)  # a second copy would come by now
    accepted = Counter(
        (received.path, received.headers["topic"]) for received in push_service.received
    )
    topics = {task["id"].replace("-", "") for task in tasks}
    expected = {
        (browser.endpoint.removeprefix(push_service.url), topic)
        for browser in browsers
        for topic in topics
    }
    assert set(accepted) == expected
    assert set(accepted.values()) == {1}, accepted
    for received in push_service.received:
        assert received.vapid is not None  # both replicas sign with the one key
    async with engine.connect() as connection:
        outcomes = await connection.execute(
            text("SELECT outcome, count(*) FROM notify_deliveries WHERE user_id = :u GROUP BY 1"),
            {"u": user},
        )
        assert dict(outcomes.all()) == {"delivered": REMINDERS * len(browsers)}
