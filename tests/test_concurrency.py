"""Double-texting, idempotent retries and several replicas on one database."""

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.db import Database
from backend.models.session import Usage
from backend.services import turns
from backend.settings import Settings
from tests.chat_helpers import chat, chat_stream, stored_messages, task_titles, words
from tests.conftest import auth, server_env, serving
from tests.fake_openai import FakeOpenAI, Step, call, delay, reply, tool_calls
from tests.servers import ServerProcess


def echo(body: dict[str, Any]) -> Step:
    """Answer each message with itself, so every reply shows which message it answers."""
    return reply(f"re: {words(body['messages'][-1])}")


def assert_coherent(messages: list[dict[str, Any]]) -> None:
    """Strictly alternating turns, each reply answering the message just before it."""
    assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2)
    for question, answer in zip(messages[::2], messages[1::2], strict=True):
        assert answer["content"] == f"re: {question['content']}"


async def test_a_second_message_waits_for_the_first_by_default(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.default = echo
    session_id = (await chat(agent_client, "first"))["session_id"]
    model.latency_s = 0.3
    answers = await asyncio.gather(
        chat(agent_client, "second", session_id=session_id),
        chat(agent_client, "third", session_id=session_id),
    )
    assert sorted(a["response"] for a in answers) == ["re: second", "re: third"]
    stored = await stored_messages(agent_client, session_id)
    assert len(stored) == 6
    assert_coherent(stored)


async def test_reject_policy_answers_409_at_once(
    model_settings: Settings, model: FakeOpenAI, engine: object
) -> None:
    model.default = echo
    settings = model_settings.model_copy(update={"chat_busy_policy": "reject"})
    async with serving(settings) as client:
        session_id = (await chat(client, "first"))["session_id"]
        model.latency_s = 0.5
        slow = asyncio.create_task(chat(client, "slow", session_id=session_id))
        await asyncio.sleep(0.2)
        rejected = await client.post(
            "/api/alice/chat",
            json={"message": "impatient", "session_id": session_id},
            headers=auth("alice"),
        )
        assert not slow.done()  # refused while the first turn still runs, not after it
        await slow
        stored = await stored_messages(client, session_id)
    assert rejected.status_code == 409
    assert "busy" in rejected.json()["detail"]
    assert [m["content"] for m in stored if m["role"] == "user"] == ["first", "slow"]


async def test_waiting_is_bounded_then_409(
    model_settings: Settings, model: FakeOpenAI, engine: object
) -> None:
    model.default = echo
    settings = model_settings.model_copy(update={"chat_busy_wait_s": 0.3})
    async with serving(settings) as client:
        session_id = (await chat(client, "first"))["session_id"]
        model.latency_s = 1.0
        slow = asyncio.create_task(chat(client, "slow", session_id=session_id))
        await asyncio.sleep(0.1)
        late = await client.post(
            "/api/alice/chat",
            json={"message": "late", "session_id": session_id},
            headers=auth("alice"),
        )
        await slow
    assert late.status_code == 409


def _env(database_url: str, model: FakeOpenAI, **extra: str) -> dict[str, str]:
    return server_env(database_url, model, CHAT_RATE_LIMIT_PER_MINUTE="0", **extra)


async def test_a_turn_finishing_while_the_next_opens_in_its_session_takes_locks_in_one_order(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    """Opening a turn locks the user's row, then the session's; finishing one must take them
    in the same order, or the two deadlock (and one turn answers 500). Here the opening
    turn is held between its two locks while the other finishes."""
    session_id, turn_id = uuid.uuid4(), uuid.uuid4()
    async with engine.begin() as setup:
        await setup.execute(text("INSERT INTO users (id, timezone) VALUES ('alice', 'UTC')"))
        await setup.execute(
            text(
                "INSERT INTO agent_sessions (id, user_id, title, lease_owner, lease_expires_at)"
                " VALUES (:id, 'alice', 't', :turn, now() + interval '1 minute')"
            ),
            {"id": session_id, "turn": turn_id},
        )
    database = Database(make_settings())
    try:
        async with engine.connect() as opening, opening.begin():
            await opening.execute(text("SELECT FROM users WHERE id = 'alice' FOR NO KEY UPDATE"))

            async def finishing() -> None:
                async with database.raw() as db:
                    await turns.finish(
                        db,
                        owner="alice",
                        session_id=session_id,
                        message_id=uuid.uuid4(),
                        turn_id=turn_id,
                        reply_to=None,
                        content="done",
                        using_stub=False,
                        usage=Usage(),
                    )

            finished = asyncio.create_task(finishing())
            await asyncio.sleep(0.3)  # the finish is now waiting for the user's row
            await opening.execute(
                text("UPDATE agent_sessions SET updated_at = now() WHERE id = :id"),
                {"id": session_id},
            )
        await asyncio.wait_for(finished, 10)
    finally:
        await database.dispose()


async def test_twenty_messages_into_one_session_across_two_replicas(
    tmp_path: Path, database_url: str, model: FakeOpenAI, engine: object
) -> None:
    model.default = echo
    model.latency_s = 0.05
    env = _env(database_url, model, CHAT_BUSY_WAIT_S="60")
    with (
        ServerProcess(env, log=tmp_path / "a.log") as first,
        ServerProcess(env, log=tmp_path / "b.log") as second,
    ):
        async with (
            httpx.AsyncClient(base_url=first.url, headers=auth("alice"), timeout=90) as a,
            httpx.AsyncClient(base_url=second.url, headers=auth("alice"), timeout=90) as b,
        ):
            session_id = (await chat(a, "opening"))["session_id"]

            async def send(i: int) -> httpx.Response:
                return await (a if i % 2 else b).post(
                    "/api/alice/chat", json={"message": f"message {i}", "session_id": session_id}
                )

            responses = await asyncio.gather(*(send(i) for i in range(20)))
            stored = await stored_messages(a, session_id)
    accepted = [r for r in responses if r.status_code == 200]
    assert {r.status_code for r in responses} <= {200, 409}
    assert len(accepted) == 20, [r.text for r in responses if r.status_code != 200]
    for i, response in enumerate(responses):
        assert response.json()["response"] == f"re: message {i}"
    assert len(stored) == 2 * 21
    assert_coherent(stored)
    assert sorted(m["content"] for m in stored if m["role"] == "user") == sorted(
        ["opening"] + [f"message {i}" for i in range(20)]
    )


async def test_an_idempotent_chat_retry_returns_the_first_answer_and_runs_nothing_twice(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.script(tool_calls(call("add_todo", {"title": "Once only"})), "Added it.")
    key = {"Idempotency-Key": "retry-me-1"}
    body = {"message": "Add once only"}
    first = await agent_client.post("/api/alice/chat", json=body, headers={**auth("alice"), **key})
    again = await agent_client.post("/api/alice/chat", json=body, headers={**auth("alice"), **key})
    streamed = await chat_stream(agent_client, "Add once only", headers=key)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert streamed[-1] == ("done", first.json())
    assert model.requests_count == 2
    assert await task_titles(agent_client) == ["Once only"]
    assert len(await stored_messages(agent_client, first.json()["session_id"])) == 2


async def test_the_same_key_with_another_body_is_422_and_keys_are_per_user(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    key = {"Idempotency-Key": "k"}
    await agent_client.post(
        "/api/alice/chat", json={"message": "a"}, headers={**auth("alice"), **key}
    )
    reused = await agent_client.post(
        "/api/alice/chat", json={"message": "b"}, headers={**auth("alice"), **key}
    )
    bobs = await agent_client.post(
        "/api/bob/chat", json={"message": "b"}, headers={**auth("bob"), **key}
    )
    bad = await agent_client.post(
        "/api/alice/chat",
        json={"message": "a"},
        headers={**auth("alice"), "Idempotency-Key": "x" * 256},
    )
    assert reused.status_code == 422
    assert bobs.status_code == 200
    assert bad.status_code == 422


async def test_a_retry_while_the_first_is_running_is_409(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.script(delay(0.5, then=reply("slow")))
    headers = {**auth("alice"), "Idempotency-Key": "in-flight"}
    first = asyncio.create_task(
        agent_client.post("/api/alice/chat", json={"message": "x"}, headers=headers)
    )
    await asyncio.sleep(0.2)
    second = await agent_client.post("/api/alice/chat", json={"message": "x"}, headers=headers)
    assert second.status_code == 409
    assert (await first).status_code == 200
    third = await agent_client.post("/api/alice/chat", json={"message": "x"}, headers=headers)
    assert third.json() == (await first).json()


async def test_idempotent_task_creation_makes_one_task(client: httpx.AsyncClient) -> None:
    headers = {**auth("alice"), "Idempotency-Key": "task-1"}
    body = {"title": "Only one"}
    responses = await asyncio.gather(
        *(client.post("/api/alice/tasks", json=body, headers=headers) for _ in range(5))
    )
    assert {r.status_code for r in responses} == {201}
    assert len({r.json()["id"] for r in responses}) == 1
    listing = await client.get("/api/alice/tasks", headers=auth("alice"))
    assert listing.json()["count"] == 1
    other = await client.post("/api/alice/tasks", json={"title": "Different"}, headers=headers)
    assert other.status_code == 422
