"""A turn outlives its replica: two `todo-agent serve` replicas on one database, started
once for the module, with a short session lease; one is SIGKILLed mid-turn, before and
after a committed tool call, and the other finishes the turn, exactly once.

Real processes and real signals: the turn's lease lapses, the survivor's sweeper takes the
turn over, the model is given what had committed, and the reply is stored once (the
database refuses a second). A retry with the same Idempotency-Key gets 409 while the turn
is finished elsewhere, then its one answer.
"""

import asyncio
import json
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.conftest import auth, server_env
from tests.fake_openai import FakeOpenAI, call, delay, reply, tool_calls
from tests.servers import ServerProcess, server_processes, start_all
from tests.test_turn_streams import SSE

pytestmark = pytest.mark.asyncio

# CHAT_SESSION_LEASE_S: a dead replica's turn is taken over about this late. Short, yet
# long enough that a live replica stalled on a loaded machine does not lose its turn.
LEASE_S = 4
TAKEOVER_S = LEASE_S + 10  # the contract's bound
USER = "alice"
START_S = 180


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
        CHAT_BUSY_POLICY="reject",
        DB_POOL_SIZE="4",
        DB_MAX_OVERFLOW="4",
    )
    with server_processes(env, tmp_path_factory.mktemp("handover"), ("a", "b")) as servers:
        yield servers


@pytest.fixture
def both(replicas: list[ServerProcess]) -> list[ServerProcess]:
    """Replicas A and B, running (again) for this test."""
    start_all(replicas, timeout_s=START_S)
    return replicas


async def post_chat(
    server: ServerProcess, body: dict[str, Any], *, key: str | None = None, timeout: float = 60
) -> httpx.Response:
    headers = auth(USER) | ({"Idempotency-Key": key} if key else {})
    async with httpx.AsyncClient(timeout=timeout) as http:
        return await http.post(f"{server.url}/api/{USER}/chat", json=body, headers=headers)


async def kill_mid_turn(
    victim: ServerProcess,
    model: FakeOpenAI,
    body: dict[str, Any],
    *,
    requests: int,
    key: str,
    committed: AsyncEngine | None = None,
) -> float:
    """Send `body` to `victim`, SIGKILL it once the model has seen `requests` requests (the
    turn is then waiting for its model) and, given `committed`, once that database shows
    the turn's tool call; return when it was killed."""
    doomed = asyncio.create_task(post_chat(victim, body, key=key))
    await asyncio.to_thread(model.wait_for_requests, requests, 60)
    # The model's next request tells of a committed call only while the turn kept its
    # lease (a stalled replica may lose it to the other one): wait for the commit itself.
    deadline = time.monotonic() + 60
    while committed is not None and not any(m["tool_calls"] for m in await conversation(committed)):
        assert time.monotonic() < deadline, "the turn's tool call never committed"
        await asyncio.sleep(0.1)
    victim.stop(signal.SIGKILL)
    killed_at = time.monotonic()
    with pytest.raises(httpx.HTTPError):
        await doomed
    return killed_at


async def the_answer(survivor: ServerProcess, body: dict[str, Any], key: str) -> httpx.Response:
    """Retry with the same key until the turn is answered: 409 with Retry-After meanwhile."""
    deadline = time.monotonic() + TAKEOVER_S + 5
    while True:
        retry = await post_chat(survivor, body, key=key)
        if retry.status_code != 409:
            return retry
        assert "Retry-After" in retry.headers
        assert time.monotonic() < deadline, "the turn was not finished elsewhere"
        await asyncio.sleep(0.2)


async def conversation(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            text(
                "SELECT id, session_id, role, content, tool_calls, tool_results, reply_to"
                " FROM agent_messages WHERE user_id = :user ORDER BY seq"
            ),
            {"user": USER},
        )
        return [dict(row._mapping) for row in rows]


async def titles(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            text("SELECT title FROM tasks ORDER BY created_at"),
        )
        return [row[0] for row in rows]


async def test_a_turn_killed_before_its_tool_call_is_answered_once_by_the_other_replica(
    both: list[ServerProcess], model: FakeOpenAI, engine: AsyncEngine
) -> None:
    victim, survivor = both
    model.script(
        delay(60, then=reply("never sent")),  # the victim's model call: it dies waiting
        tool_calls(call("add_todo", {"title": "Buy milk"})),  # the survivor's
        reply("Added task 1: Buy milk."),
    )
    body = {"message": "Add buy milk"}
    await kill_mid_turn(victim, model, body, requests=1, key="before-1")
    answer = await the_answer(survivor, body, "before-1")
    assert answer.status_code == 200, answer.text
    assert answer.json()["response"] == "Added task 1: Buy milk."
    assert [c["name"] for c in answer.json()["tool_calls"]] == ["add_todo"]
    stored = await conversation(engine)
    assert [(m["role"], m["content"]) for m in stored] == [
        ("user", "Add buy milk"),
        ("assistant", "Added task 1: Buy milk."),
    ]
    assert stored[1]["reply_to"] == stored[0]["id"]
    assert await titles(engine) == ["Buy milk"]
    # The same answer again, from either replica, and the model was asked three times.
    again = await post_chat(survivor, body, key="before-1")
    assert again.json() == answer.json()
    assert model.requests_count == 3


async def test_a_turn_killed_after_its_tool_call_committed_is_finished_without_running_it_again(
    both: list[ServerProcess], model: FakeOpenAI, engine: AsyncEngine
) -> None:
    victim, survivor = both
    model.script(
        tool_calls(call("add_todo", {"title": "Call the plumber"}, id="call_plumber")),
        delay(60, then=reply("never sent")),  # after the call committed: it dies waiting
        reply("Added task 1: Call the plumber."),  # the survivor's, given the stored result
    )
    body = {"message": "Add call the plumber"}
    killed_at = await kill_mid_turn(
        victim, model, body, requests=2, key="after-1", committed=engine
    )
    # A client that lost its stream joins the turn's on the survivor, before the takeover.
    session_id = (await conversation(engine))[0]["session_id"]
    async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as http:
        url = f"{survivor.url}/api/{USER}/sessions/{session_id}/stream"
        joined = SSE(http, "GET", url, headers=auth(USER)).start()
        answer = await the_answer(survivor, body, "after-1")
        taken_s = time.monotonic() - killed_at
        told = await joined.finish(timeout_s=TAKEOVER_S)
    assert joined.status == 200
    assert told[-1].event == "done"
    assert told[-1].data == answer.json()
    assert answer.status_code == 200, answer.text
    assert answer.json()["response"] == "Added task 1: Call the plumber."
    # The committed call is in the answer once, with its stored result.
    assert [c["id"] for c in answer.json()["tool_calls"]] == ["call_plumber"]
    assert answer.json()["tool_results"][0]["result"]["status"] == "created"
    assert await titles(engine) == ["Call the plumber"]
    stored = await conversation(engine)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[1]["content"] == "Added task 1: Call the plumber."
    assert [c["id"] for c in stored[1]["tool_calls"]] == ["call_plumber"]
    assert stored[1]["reply_to"] == stored[0]["id"]
    # The survivor's model call: the call and its stored result, no second call asked for.
    sent = model.requests[-1].messages
    assert sent[-2]["tool_calls"][0]["id"] == "call_plumber"
    assert sent[-1]["role"] == "tool"
    assert sent[-1]["tool_call_id"] == "call_plumber"
    assert json.loads(sent[-1]["content"])["status"] == "created"
    assert model.requests_count == 3
    assert taken_s < TAKEOVER_S + 5


async def test_a_temporary_turn_taken_over_stays_temporary(
    both: list[ServerProcess], model: FakeOpenAI, engine: AsyncEngine
) -> None:
    """The survivor never saw the request's `"temporary": true`; the lease it takes over
    says so: its model call carries no memory, and a `remember` in it saves nothing."""
    victim, survivor = both
    async with httpx.AsyncClient(timeout=30) as http:
        saved = await http.post(
            f"{survivor.url}/api/{USER}/memories",
            json={"text": "My dentist is Dr. Lee"},
            headers=auth(USER),
        )
        assert saved.status_code == 201, saved.text
    model.script(
        delay(60, then=reply("never sent")),  # the victim's model call: it dies waiting
        tool_calls(call("remember", {"text": "I like tea"})),  # the survivor's
        reply("Not remembered: this chat is temporary."),
    )
    body = {"message": "remember that I like tea", "temporary": True}
    await kill_mid_turn(victim, model, body, requests=1, key="temporary-1")
    answer = await the_answer(survivor, body, "temporary-1")
    assert answer.status_code == 200, answer.text
    taken_over = model.requests[1].messages
    assert "Dr. Lee" not in json.dumps(taken_over)
    assert answer.json()["tool_results"][0]["result"]["status"] == "error"
    async with engine.connect() as connection:
        texts = (await connection.execute(text("SELECT text FROM memories"))).scalars().all()
    assert texts == ["My dentist is Dr. Lee"]


async def test_a_new_message_waits_for_the_dead_turn_to_be_finished_first(
    both: list[ServerProcess], model: FakeOpenAI, engine: AsyncEngine
) -> None:
    """The lapsed lease still names its turn: the session's next message is refused (busy)
    until the sweeper has answered the one before, never answered in its place."""
    victim, survivor = both
    first = await post_chat(survivor, {"message": "hello"})
    session_id = first.json()["session_id"]
    model.script(delay(60, then=reply("never sent")), reply("re: doomed"), reply("re: next"))
    await kill_mid_turn(
        victim, model, {"message": "doomed", "session_id": session_id}, requests=2, key="k-d"
    )
    deadline = time.monotonic() + TAKEOVER_S + 5
    while (
        nxt := await post_chat(survivor, {"message": "next", "session_id": session_id})
    ).status_code == 409:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.2)
    assert nxt.status_code == 200, nxt.text
    stored = await conversation(engine)
    assert [(m["role"], m["content"]) for m in stored][2:] == [
        ("user", "doomed"),
        ("assistant", "re: doomed"),
        ("user", "next"),
        ("assistant", "re: next"),
    ]


async def test_the_database_refuses_a_second_reply_to_one_message(
    engine: AsyncEngine,
) -> None:
    session_id, message_id = uuid.uuid4(), uuid.uuid4()
    insert = text(
        "INSERT INTO agent_messages (id, session_id, user_id, role, content, reply_to)"
        " VALUES (gen_random_uuid(), :session, 'alice', 'assistant', 'twice', :message)"
    )
    async with engine.begin() as connection:
        await connection.execute(text("INSERT INTO users (id) VALUES ('alice')"))
        await connection.execute(
            text("INSERT INTO agent_sessions (id, user_id, title) VALUES (:id, 'alice', 't')"),
            {"id": session_id},
        )
        await connection.execute(
            text(
                "INSERT INTO agent_messages (id, session_id, user_id, role, content)"
                " VALUES (:id, :session, 'alice', 'user', 'hi')"
            ),
            {"id": message_id, "session": session_id},
        )
        await connection.execute(insert, {"session": session_id, "message": message_id})
    with pytest.raises(Exception, match="ux_agent_messages_reply_to"):
        async with engine.begin() as connection:
            await connection.execute(insert, {"session": session_id, "message": message_id})
