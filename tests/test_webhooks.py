"""Webhooks as a receiver sees them: real `todo-agent serve` processes POST every event to a
receiver that verifies it with the real Standard Webhooks clients, the Python package (an
in-test HTTP server, scripted to answer 2xx, 500 or not at all) and the npm package (a Node
receiver, tests/js/webhooks).

The sending servers start once for the module and share the test database: every one of
them delivers every event, so two of them running is also the test that no attempt is
sent twice. Each test uses a user of its own; the receiver tells the users' deliveries
apart by the `user_id` in the event.
"""

import asyncio
import base64
import contextlib
import json
import secrets
import select
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import pairwise
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from standardwebhooks import Webhook

from tests.conftest import auth, server_env
from tests.node import JS_DIR, require_node
from tests.servers import ServerProcess, server_processes, start_all, stop_all, until
from tests.test_observability import Scrape

pytestmark = pytest.mark.asyncio

SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
# WEBHOOK_RETRY_SCHEDULE_S: four attempts, given up about 2.6 s after the first.
SCHEDULE_S = (0.3, 0.3, 2.0)
TIMEOUT_S = 0.5  # WEBHOOK_TIMEOUT_S
HANG_S = 5.0  # how long the receiver keeps a "hang" request before letting it go
# A "dribble" answer: a 204 sent in pieces, each sooner than the timeout, over 2 s in all.
DRIBBLE = [b"HTTP/1.1 204 No Content\r\n", b"content-length: 0\r\n", b"x-slow: 1\r\n", b"\r\n"]
DRIBBLE_PAUSE_S = 0.4
EVENT_TYPES = [
    "task.created",
    "task.updated",
    "reminder.due",
    "task.completed",
    "task.reopened",
    "task.deleted",
]


# --- Receivers ----------------------------------------------------------------------------


@dataclass
class Delivery:
    """One POST the receiver got, and what its client library made of it."""

    webhook_id: str
    received_at: float  # time.monotonic()
    user_id: str | None
    payload: Any  # the verified JSON; None when verification failed
    error: str | None = None
    answer: str = "ok"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Two servers open up to 2 x 20 connections at once (a claimed batch each); with the
    # default backlog of 5 the kernel drops the rest and they time out, unseen here.
    request_queue_size = 128


class Receiver:
    """A webhook receiver on a loopback port that verifies each delivery with the Python
    `standardwebhooks` package and answers each user's attempts as `plans` says: "ok" (204),
    "fail" (500), "hang" (no answer for HANG_S) or "dribble" (a 204, slowly); the last
    answer of a plan repeats."""

    def __init__(self, secret: str) -> None:
        self._webhook = Webhook(secret)
        self.deliveries: list[Delivery] = []
        self.plans: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self.released = threading.Event()  # lets go of every hanging request
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hooks"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                answer = receiver.record(dict(self.headers.items()), body)
                if answer == "hang":
                    receiver.released.wait(HANG_S)
                    return  # the connection closes without an answer
                if answer == "dribble":
                    with contextlib.suppress(OSError):
                        for piece in DRIBBLE:
                            receiver.released.wait(DRIBBLE_PAUSE_S)
                            self.wfile.write(piece)
                            self.wfile.flush()
                    return
                self.send_response(204 if answer == "ok" else 500)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        return Handler

    def record(self, headers: dict[str, str], body: bytes) -> str:
        received_at = time.monotonic()
        try:
            payload, error = self._webhook.verify(body, headers), None
        except Exception as failure:
            payload, error = None, f"{type(failure).__name__}: {failure}"
        try:
            user_id = json.loads(body)["data"]["user_id"]
        except (ValueError, KeyError, TypeError):
            user_id = None
        webhook_id = headers.get("webhook-id") or headers.get("Webhook-Id") or ""
        with self._lock:
            attempt = sum(
                1
                for seen in self.deliveries
                if (seen.user_id, seen.webhook_id) == (user_id, webhook_id)
            )
            plan = self.plans.get(user_id or "", ["ok"])
            answer = plan[min(attempt, len(plan) - 1)]
            self.deliveries.append(
                Delivery(webhook_id, received_at, user_id, payload, error, answer)
            )
        return answer

    def of(self, user_id: str) -> list[Delivery]:
        with self._lock:
            return [delivery for delivery in self.deliveries if delivery.user_id == user_id]

    def __enter__(self) -> "Receiver":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()


class NodeReceiver:
    """tests/js/webhooks/receiver.mjs: verifies each delivery with the npm `standardwebhooks`
    package and prints one JSON line per delivery, read here as they come."""

    def __init__(self, node: str, secret: str) -> None:
        self.lines: list[dict[str, Any]] = []
        self.process = subprocess.Popen(
            [node, "receiver.mjs", "0", secret],
            cwd=JS_DIR / "webhooks",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        started, _, _ = select.select([self.process.stdout], [], [], 30)
        ready = json.loads(self.process.stdout.readline() if started else "{}")
        assert ready.get("ready"), f"the Node receiver did not start (exit {self.process.poll()})"
        self.url = f"http://127.0.0.1:{ready['port']}/hooks"
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(json.loads(line))

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# --- Servers ------------------------------------------------------------------------------


def sender_env(database_url: str, url: str) -> dict[str, str]:
    return server_env(
        database_url,
        WEBHOOK_URL=url,
        WEBHOOK_SECRET=SECRET,
        WEBHOOK_RETRY_SCHEDULE_S=",".join(str(delay) for delay in SCHEDULE_S),
        WEBHOOK_TIMEOUT_S=str(TIMEOUT_S),
        REMINDER_POLL_S="0.2",
        # Small pools: the test database server is shared, and none of this needs more.
        DB_POOL_SIZE="4",
        DB_MAX_OVERFLOW="4",
    )


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver(SECRET) as receiver:
        yield receiver


@pytest.fixture(scope="module")
def all_senders(
    database_url: str,
    engine: AsyncEngine,
    receiver: Receiver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[ServerProcess]]:
    logs = tmp_path_factory.mktemp("webhooks")
    env = sender_env(database_url, receiver.url)
    with server_processes(env, logs, ("sender-1", "sender-2")) as servers:
        yield servers


@pytest.fixture
def senders(all_senders: list[ServerProcess]) -> list[ServerProcess]:
    """Two servers delivering to `receiver`, running (again) for this test."""
    start_all(all_senders)
    return all_senders


@pytest.fixture
def user() -> str:
    return f"hooks-{uuid.uuid4().hex[:12]}"


# --- Helpers ------------------------------------------------------------------------------


@dataclass
class EventRow:
    id: int
    type: str
    subject: uuid.UUID
    data: dict[str, Any]
    webhook_attempts: int
    webhook_due_at: datetime | None
    webhook_outcome: str | None


async def event_rows(engine: AsyncEngine, user_id: str) -> list[EventRow]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            text(
                "SELECT id, type, subject, data, webhook_attempts, webhook_due_at,"
                " webhook_outcome FROM events WHERE user_id = :user_id ORDER BY id"
            ),
            {"user_id": user_id},
        )
        return [EventRow(*row) for row in rows]


async def settled(engine: AsyncEngine, user_id: str, count: int, outcome: str) -> list[EventRow]:
    """The user's `count` events, once every one of them has `outcome`."""
    rows: list[EventRow] = []

    async def done() -> bool:
        nonlocal rows
        rows = await event_rows(engine, user_id)
        return len(rows) == count and all(row.webhook_outcome == outcome for row in rows)

    await until(
        done,
        timeout_s=sum(SCHEDULE_S) + 8,
        message=f"expected {count} events {outcome}: {rows}",
    )
    return rows


async def create_task(api: httpx.AsyncClient, user_id: str, **fields: Any) -> dict[str, Any]:
    response = await api.post(f"/api/{user_id}/tasks", json={"title": "Water the plants"} | fields)
    assert response.status_code == 201, response.text
    task: dict[str, Any] = response.json()
    return task


async def every_event_type(api: httpx.AsyncClient, engine: AsyncEngine, user_id: str) -> str:
    """Make the user's one task go through every event type; the task's id."""
    remind_at = datetime.now(UTC) + timedelta(seconds=1.5)
    task = await create_task(api, user_id, remind_at=remind_at.isoformat())
    path = f"/api/{user_id}/tasks/{task['id']}"
    assert (await api.patch(path, json={"title": "Water the ferns"})).status_code == 200

    async def reminded() -> bool:
        return any(row.type == "reminder.due" for row in await event_rows(engine, user_id))

    await until(reminded, timeout_s=6, message="the reminder did not fire")
    assert (await api.patch(f"{path}/complete", json={"completed": True})).status_code == 200
    assert (await api.patch(f"{path}/complete", json={"completed": False})).status_code == 200
    assert (await api.delete(path)).status_code == 204
    return str(task["id"])


def assert_delivered_once_each(
    rows: list[EventRow], deliveries: list[tuple[str, Any]], task_id: str
) -> None:
    """Each event arrived once, verified, as its CloudEvent, with webhook-id = its id."""
    assert [row.type for row in rows] == EVENT_TYPES
    by_id = {webhook_id: payload for webhook_id, payload in deliveries}
    assert sorted(webhook_id for webhook_id, _ in deliveries) == sorted(str(row.id) for row in rows)
    for row in rows:
        event = by_id[str(row.id)]
        assert event["specversion"] == "1.0"
        assert event["id"] == str(row.id)
        assert event["type"] == row.type
        assert event["subject"] == task_id == str(row.subject)
        assert event["source"] == "urn:todo-agent"
        assert event["datacontenttype"] == "application/json"
        assert datetime.fromisoformat(event["time"]).tzinfo is not None
        assert event["data"] == row.data
        assert event["data"]["user_id"] == rows[0].data["user_id"]
    reminder = by_id[str(rows[2].id)]["data"]
    assert reminder["late"] is False
    assert reminder["task"]["reminded_at"] is not None


async def gave_up_total(servers: list[ServerProcess]) -> float:
    async with httpx.AsyncClient() as client:
        scrapes = [Scrape((await client.get(f"{server.url}/metrics")).text) for server in servers]
    name = "todo_agent_webhook_deliveries_total"
    return sum(scrape.value(name, outcome="gave_up") for scrape in scrapes)


def client_for(server: ServerProcess, user_id: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.url, headers=auth(user_id), timeout=10)


# --- Delivery, signed -----------------------------------------------------------------------


async def test_memory_events_reach_the_receiver_signed(
    senders: list[ServerProcess], receiver: Receiver, engine: AsyncEngine, user: str
) -> None:
    async with client_for(senders[0], user) as api:
        made = await api.post(f"/api/{user}/memories", json={"text": "My gate code is 4711"})
        assert made.status_code == 201, made.text
        memory_id = made.json()["id"]
        changed = await api.patch(
            f"/api/{user}/memories/{memory_id}", json={"text": "My gate code is 1234"}
        )
        assert changed.status_code == 200
        assert (await api.delete(f"/api/{user}/memories/{memory_id}")).status_code == 204
    rows = await settled(engine, user, 3, "delivered")
    deliveries = {delivery.webhook_id: delivery for delivery in receiver.of(user)}
    assert [row.type for row in rows] == ["memory.created", "memory.updated", "memory.deleted"]
    texts = ["My gate code is 4711", "My gate code is 1234", "My gate code is 1234"]
    for row, said in zip(rows, texts, strict=True):
        delivery = deliveries[str(row.id)]
        assert delivery.error is None
        assert delivery.payload["type"] == row.type
        assert delivery.payload["subject"] == memory_id
        assert delivery.payload["data"] == {"user_id": user, "memory_id": memory_id, "text": said}


async def test_every_event_type_reaches_the_receiver_signed_with_the_event_as_body(
    senders: list[ServerProcess], receiver: Receiver, engine: AsyncEngine, user: str
) -> None:
    async with client_for(senders[0], user) as api:
        task_id = await every_event_type(api, engine, user)
    rows = await settled(engine, user, len(EVENT_TYPES), "delivered")

    deliveries = receiver.of(user)
    assert [delivery.error for delivery in deliveries] == [None] * len(EVENT_TYPES)
    assert_delivered_once_each(
        rows, [(delivery.webhook_id, delivery.payload) for delivery in deliveries], task_id
    )
    assert all(row.webhook_attempts == 1 and row.webhook_due_at is None for row in rows)


async def test_a_forged_delivery_fails_the_python_verification(receiver: Receiver) -> None:
    """The receiver's verification is real: a body signed with another secret is refused."""
    forger = Webhook("whsec_" + base64.b64encode(secrets.token_bytes(24)).decode())
    body = json.dumps({"id": "1", "data": {"user_id": "forged"}})
    now = datetime.now(UTC)
    headers = {
        "webhook-id": "1",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": forger.sign("1", now, body),
    }
    async with httpx.AsyncClient() as client:
        await client.post(receiver.url, content=body, headers=headers)
    [delivery] = receiver.of("forged")
    assert delivery.payload is None
    assert delivery.error is not None
    assert "WebhookVerificationError" in delivery.error


# --- Retries --------------------------------------------------------------------------------


async def test_failing_receiver_gets_the_same_event_after_each_delay_then_it_is_given_up(
    senders: list[ServerProcess], receiver: Receiver, engine: AsyncEngine, user: str
) -> None:
    receiver.plans[user] = ["fail"]
    gave_up_before = await gave_up_total(senders)
    async with client_for(senders[0], user) as api:
        await create_task(api, user)
    [row] = await settled(engine, user, 1, "gave_up")

    attempts = receiver.of(user)
    assert [attempt.webhook_id for attempt in attempts] == [str(row.id)] * (len(SCHEDULE_S) + 1)
    assert all(attempt.error is None for attempt in attempts)  # each one signed anew, validly
    gaps = [later.received_at - earlier.received_at for earlier, later in pairwise(attempts)]
    for gap, delay in zip(gaps, SCHEDULE_S, strict=True):
        assert gap >= delay * 0.9, (gaps, SCHEDULE_S)
    assert row.webhook_attempts == len(SCHEDULE_S) + 1
    assert row.webhook_due_at is None
    assert await gave_up_total(senders) == gave_up_before + 1

    await asyncio.sleep(2 * SCHEDULE_S[0])
    assert len(receiver.of(user)) == len(attempts)  # given up means no more attempts


async def test_hanging_receiver_never_slows_the_api_and_is_retried(
    senders: list[ServerProcess], receiver: Receiver, engine: AsyncEngine, user: str
) -> None:
    receiver.plans[user] = ["hang", "ok"]
    async with client_for(senders[0], user) as api:
        await create_task(api, user, title="first")

        async def hanging() -> bool:
            return len(receiver.of(user)) >= 1

        await until(hanging, timeout_s=5, message="no delivery reached the receiver")
        latencies = []
        for n in range(5):
            started = time.monotonic()
            await create_task(api, user, title=f"while the receiver hangs {n}")
            latencies.append(time.monotonic() - started)
    print(f"\ntask creation while the receiver hangs: max {1000 * max(latencies):.0f} ms")
    assert max(latencies) < TIMEOUT_S, latencies

    rows = await settled(engine, user, 6, "delivered")
    attempts = receiver.of(user)
    for row in rows:
        mine = [attempt for attempt in attempts if attempt.webhook_id == str(row.id)]
        assert [attempt.answer for attempt in mine] == ["hang", "ok"]
        assert mine[1].received_at - mine[0].received_at >= TIMEOUT_S
        assert row.webhook_attempts == 2


async def test_receiver_answering_too_slowly_is_cut_off_at_the_timeout_and_retried(
    senders: list[ServerProcess], receiver: Receiver, engine: AsyncEngine, user: str
) -> None:
    """WEBHOOK_TIMEOUT_S bounds a whole attempt, not each read: a receiver that sends its
    answer a little at a time has not answered in time."""
    receiver.plans[user] = ["dribble", "ok"]
    async with client_for(senders[0], user) as api:
        await create_task(api, user)
    [row] = await settled(engine, user, 1, "delivered")

    first, second = receiver.of(user)
    assert (first.answer, second.answer) == ("dribble", "ok")
    assert second.webhook_id == first.webhook_id == str(row.id)
    # Cut off at the timeout and retried after the first delay, before the slow 204 ended.
    assert second.received_at - first.received_at < len(DRIBBLE) * DRIBBLE_PAUSE_S
    assert row.webhook_attempts == 2


# --- Several processes, restarts ------------------------------------------------------------


async def test_two_processes_never_send_the_same_attempt_twice(
    senders: list[ServerProcess], receiver: Receiver, engine: AsyncEngine, user: str
) -> None:
    count = 30
    async with client_for(senders[0], user) as one, client_for(senders[1], user) as other:
        await asyncio.gather(
            *(create_task((one, other)[n % 2], user, title=f"task {n}") for n in range(count))
        )
    rows = await settled(engine, user, count, "delivered")

    sent = [delivery.webhook_id for delivery in receiver.of(user)]
    assert sorted(sent) == sorted(str(row.id) for row in rows)  # each once, none missing
    assert all(row.webhook_attempts == 1 for row in rows)


async def test_pending_delivery_survives_a_restart(
    senders: list[ServerProcess], receiver: Receiver, engine: AsyncEngine, user: str
) -> None:
    receiver.plans[user] = ["fail"]  # the receiver is down
    async with client_for(senders[0], user) as api:
        await create_task(api, user)

    async def first_attempt_failed() -> bool:
        return len(receiver.of(user)) >= 1

    await until(first_attempt_failed, timeout_s=5, message="no delivery reached the receiver")
    stop_all(senders)
    [row] = await event_rows(engine, user)
    too_slow = f"the servers took too long to stop: the event was settled first ({row})"
    assert row.webhook_outcome is None, too_slow
    assert row.webhook_due_at is not None, too_slow
    attempts_before = len(receiver.of(user))

    receiver.plans[user] = ["ok"]  # back up while nothing runs
    start_all(senders[:1])  # one is enough (the next test that needs both starts the other)
    [row] = await settled(engine, user, 1, "delivered")
    attempts = receiver.of(user)
    assert len(attempts) == attempts_before + 1
    assert {attempt.webhook_id for attempt in attempts} == {str(row.id)}
    assert [attempt.answer for attempt in attempts][-1] == "ok"


async def test_attempt_in_flight_when_the_server_stops_is_sent_again_soon_after_restart(
    all_senders: list[ServerProcess], receiver: Receiver, engine: AsyncEngine, user: str
) -> None:
    """Stopping mid-attempt hands the delivery back: after the restart it goes out again at
    once, with the same webhook-id, not when its lease (timeout + 10 s) runs out."""
    sender = all_senders[0]
    start_all([sender])
    stop_all(all_senders[1:])  # one process, so the restart is what delivers it
    receiver.plans[user] = ["hang", "ok"]
    async with client_for(sender, user) as api:
        await create_task(api, user)

    async def in_flight() -> bool:
        return len(receiver.of(user)) >= 1

    await until(in_flight, timeout_s=5, message="no delivery reached the receiver")
    stop_all([sender])  # while the receiver holds the first attempt
    async with engine.connect() as connection:
        wait = await connection.scalar(
            text(
                "SELECT extract(epoch FROM webhook_due_at - now()) FROM events WHERE user_id = :u"
            ),
            {"u": user},
        )
    # Handed back (due now), or retried as usual if the attempt timed out before the stop;
    # not left leased.
    assert wait is not None
    assert float(wait) <= SCHEDULE_S[0], f"the delivery is leased for {float(wait):.1f} s more"
    start_all([sender])
    restarted = time.monotonic()

    async def delivered() -> bool:
        return [row.webhook_outcome for row in await event_rows(engine, user)] == ["delivered"]

    await until(delivered, timeout_s=5, message="the delivery waited for its lease to run out")
    print(f"\ndelivered {1000 * (time.monotonic() - restarted):.0f} ms after the restart")
    attempts = receiver.of(user)
    assert {attempt.webhook_id for attempt in attempts} == {attempts[0].webhook_id}
    assert [attempt.answer for attempt in attempts] == ["hang", "ok"]


# --- The npm client -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node_receiver() -> Iterator[NodeReceiver]:
    node = require_node("webhooks")
    receiver = NodeReceiver(node, SECRET)
    try:
        yield receiver
    finally:
        receiver.close()


@pytest.fixture(scope="module")
def node_sender(
    all_senders: list[ServerProcess],
    node_receiver: NodeReceiver,
    database_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerProcess]:
    """A server delivering to the Node receiver, and the only one running: a delivery is
    one per event, to whichever WEBHOOK_URL the process that claims it has."""
    stop_all(all_senders)
    log = tmp_path_factory.mktemp("webhooks-node") / "sender.log"
    with ServerProcess(sender_env(database_url, node_receiver.url), log=log) as server:
        yield server


async def test_every_event_type_is_verified_by_the_npm_standardwebhooks(
    node_sender: ServerProcess, node_receiver: NodeReceiver, engine: AsyncEngine, user: str
) -> None:
    async with client_for(node_sender, user) as api:
        task_id = await every_event_type(api, engine, user)
    rows = await settled(engine, user, len(EVENT_TYPES), "delivered")

    lines = [line for line in node_receiver.lines if line.get("id") in {str(r.id) for r in rows}]
    assert all(line["verified"] for line in lines), lines
    assert_delivered_once_each(rows, [(line["id"], line["payload"]) for line in lines], task_id)


async def test_a_forged_delivery_fails_the_npm_verification(node_receiver: NodeReceiver) -> None:
    forger = Webhook("whsec_" + base64.b64encode(secrets.token_bytes(24)).decode())
    body = json.dumps({"id": "forged", "data": {}})
    now = datetime.now(UTC)
    headers = {
        "webhook-id": "forged",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": forger.sign("forged", now, body),
    }
    async with httpx.AsyncClient() as client:
        response = await client.post(node_receiver.url, content=body, headers=headers)
    assert response.status_code == 400

    async def reported() -> bool:
        return any(line.get("id") == "forged" for line in node_receiver.lines)

    await until(reported, timeout_s=5, message="the Node receiver printed nothing")
    [line] = [line for line in node_receiver.lines if line.get("id") == "forged"]
    assert line["verified"] is False
    assert line["error"]
