"""A bounded chaos run: three `todo-agent serve` replicas behind a small round-robin proxy,
several users chatting with Idempotency-Keys and retrying on errors, one replica SIGKILLed
(and started again) every few seconds until some were killed and back (a slow machine
restarts them slowly: the run is bounded by those cycles, and capped in time). Afterwards
every message was stored and answered exactly once, every task created once, and no
request answered 500.

Before turns outlived their replica, the same run stored some messages twice and created
some tasks twice (a retry ran a dead replica's turn again once its key's lock lapsed).
"""

import asyncio
import contextlib
import itertools
import json
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.chat_helpers import words
from tests.conftest import auth, server_env
from tests.fake_openai import FakeOpenAI, Step, call, reply, tool_calls
from tests.servers import ServerProcess, free_port, server_processes, start_all

pytestmark = pytest.mark.asyncio

LEASE_S = 2
USERS = 6
MESSAGES = 5  # at least, per user, each adding one task
CYCLES = 2  # users chat on until this many replicas were killed and started again
CAP_S = 180  # but send no new message after this long, whatever happened
KILL_EVERY_S = 4
DEADLINE_S = 120  # every message answered this long after it was first sent
START_S = 180  # a loaded machine starts a replica slowly


class RoundRobinProxy:
    """A TCP proxy on loopback: each connection goes to the next replica that accepts it."""

    def __init__(self, upstreams: list[ServerProcess]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._upstreams = upstreams
        self._turn = itertools.cycle(range(len(upstreams)))
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> "RoundRobinProxy":
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in self._upstreams:
            upstream = self._upstreams[next(self._turn)]
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream.port)
            except OSError:
                continue  # that replica is down: the next one
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            return
        writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.close()


def agent(body: dict[str, Any]) -> Step:
    """The model: "add X" calls add_todo, its result is answered; each a moment late, so
    that kills land mid-turn."""
    last = body["messages"][-1]
    if last["role"] == "user":
        title = (words(last) or "").removeprefix("add ")
        return tool_calls(call("add_todo", {"title": title}), delay=0.3)
    todo = json.loads(last["content"])["todo"]
    return reply(f"Added task {todo['number']}: {todo['title']}.", delay=0.3)


@pytest.fixture(scope="module")
def replicas(
    database_url: str,
    engine: AsyncEngine,
    fake_openai_server: FakeOpenAI,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[ServerProcess]]:
    env = server_env(
        database_url,
        fake_openai_server,
        CHAT_SESSION_LEASE_S=str(LEASE_S),
        CHAT_RATE_LIMIT_PER_MINUTE="0",
        DB_POOL_SIZE="4",
        DB_MAX_OVERFLOW="4",
    )
    with server_processes(env, tmp_path_factory.mktemp("chaos"), ("a", "b", "c")) as servers:
        yield servers


class Chaos:
    """Every few seconds SIGKILL one replica, while another runs, and start it again in
    the background; counts the kills and the restarts done."""

    def __init__(self, servers: list[ServerProcess]) -> None:
        self.kills = 0
        self.restarted = 0
        self._servers = servers
        self._lock = threading.Lock()  # restarts finish on their own threads

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`; those still starting then are not waited for: the module's end
        kills them."""
        restarting: list[threading.Thread] = []
        for victim in itertools.cycle(self._servers):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), KILL_EVERY_S)
            if stop.is_set():
                return
            if sum(restart.is_alive() for restart in restarting) >= len(self._servers) - 1:
                continue  # the others are still coming back: one always runs
            victim.stop(signal.SIGKILL)
            self.kills += 1
            restart = threading.Thread(target=self._restart, args=(victim,), daemon=True)
            restart.start()
            restarting.append(restart)

    def _restart(self, server: ServerProcess) -> None:
        with contextlib.suppress(RuntimeError):  # killed at the module's end before it was up
            server.start(timeout_s=START_S)
            with self._lock:
                self.restarted += 1


async def converse(
    proxy: RoundRobinProxy, user: str, statuses: Counter[int], chaos: Chaos, until: float
) -> list[str]:
    """The user's messages, each sent with its own key and retried until answered, until
    MESSAGES were and CYCLES replicas were killed and back (no new one after `until`); the
    answers."""
    answers = []
    limits = httpx.Limits(max_keepalive_connections=0)  # each request its own connection
    async with httpx.AsyncClient(base_url=proxy.url, timeout=30, limits=limits) as http:
        session_id = None
        for i in itertools.count():
            if (i >= MESSAGES and chaos.restarted >= CYCLES) or time.monotonic() > until:
                break
            body = {"message": f"add {user} task {i}", "session_id": session_id}
            headers = auth(user) | {"Idempotency-Key": f"{user}-{i}"}
            deadline = time.monotonic() + DEADLINE_S
            while True:
                assert time.monotonic() < deadline, f"{user}'s message {i} was never answered"
                try:
                    response = await http.post(f"/api/{user}/chat", json=body, headers=headers)
                except httpx.HTTPError:
                    await asyncio.sleep(0.2)  # the replica died under it: again, elsewhere
                    continue
                statuses[response.status_code] += 1
                if response.status_code == 200:
                    break
                assert response.status_code in (409, 503), response.text
                await asyncio.sleep(random.uniform(0.1, 0.4))
            session_id = response.json()["session_id"]
            answers.append(response.json()["response"])
    return answers


async def test_killing_replicas_under_load_loses_and_doubles_nothing(
    replicas: list[ServerProcess], model: FakeOpenAI, engine: AsyncEngine
) -> None:
    model.default = agent
    await asyncio.to_thread(start_all, replicas, timeout_s=START_S)
    statuses: Counter[int] = Counter()
    users = [f"chaos-{n}" for n in range(USERS)]
    chaos = Chaos(replicas)
    async with RoundRobinProxy(replicas) as proxy:
        stop = asyncio.Event()
        killer = asyncio.create_task(chaos.run(stop))
        try:
            started = time.monotonic()
            until = started + CAP_S
            answers = await asyncio.gather(
                *(converse(proxy, user, statuses, chaos, until) for user in users)
            )
            print(
                f"answered in {time.monotonic() - started:.1f} s, {chaos.kills} killed:"
                f" {dict(statuses)}"
            )
        finally:
            stop.set()
            await killer
    assert 500 not in statuses
    for user, said in zip(users, answers, strict=True):
        assert said == [f"Added task {i + 1}: {user} task {i}." for i in range(len(said))]
        assert len(said) >= MESSAGES
    async with engine.connect() as connection:
        messages = (
            await connection.execute(
                text(
                    "SELECT m.user_id, m.content, count(r.id) AS replies"
                    " FROM agent_messages m LEFT JOIN agent_messages r ON r.reply_to = m.id"
                    " WHERE m.role = 'user' GROUP BY m.id"
                )
            )
        ).all()
        unanswered = await connection.scalar(
            text(
                "SELECT count(*) FROM agent_messages"
                " WHERE role = 'assistant' AND (content IS NULL OR reply_to IS NULL)"
            )
        )
        tasks = (await connection.execute(text("SELECT title FROM tasks"))).all()
    sent = Counter((m.user_id, m.content) for m in messages)
    answered = sum(len(said) for said in answers)
    assert len(sent) == answered
    assert set(sent.values()) == {1}, "a message was stored twice"
    assert {m.replies for m in messages} == {1}, "a message has no reply, or two"
    assert unanswered == 0
    made = Counter(title for (title,) in tasks)
    assert len(made) == answered
    assert set(made.values()) == {1}, "a task was created twice"
    assert chaos.restarted >= CYCLES, "the run ended before it killed much"
