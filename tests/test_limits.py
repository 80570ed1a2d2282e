"""Limits that keep one user from exhausting the service (OWASP API4, LLM10)."""

import asyncio
from pathlib import Path

import httpx

from backend.settings import Settings
from tests.chat_helpers import chat
from tests.conftest import auth, server_env, serving
from tests.factories import make_task
from tests.fake_openai import FakeOpenAI, call, reply, tool_calls
from tests.servers import ServerProcess


async def test_chat_rate_limit_answers_429_with_retry_after(
    model_settings: Settings, model: FakeOpenAI, engine: object
) -> None:
    settings = model_settings.model_copy(update={"chat_rate_limit_per_minute": 3})
    async with serving(settings) as client:
        statuses = [
            (await client.post("/api/alice/chat", json={"message": f"m{i}"}, headers=auth("alice")))
            for i in range(5)
        ]
        other_user = await client.post("/api/bob/chat", json={"message": "hi"}, headers=auth("bob"))
    assert [r.status_code for r in statuses] == [200, 200, 200, 429, 429]
    limited = statuses[3]
    assert 1 <= int(limited.headers["Retry-After"]) <= 20
    assert "slow down" in limited.json()["detail"]
    assert other_user.status_code == 200
    assert model.requests_count == 4  # a refused turn never reaches the model


async def test_the_rate_limit_holds_across_replicas(
    tmp_path: Path, database_url: str, model: FakeOpenAI, engine: object
) -> None:
    env = server_env(database_url, model, CHAT_RATE_LIMIT_PER_MINUTE="4")
    with (
        ServerProcess(env, log=tmp_path / "a.log") as a,
        ServerProcess(env, log=tmp_path / "b.log") as b,
    ):
        async with httpx.AsyncClient(headers=auth("alice")) as client:
            responses = await asyncio.gather(
                *(
                    client.post(f"{(a, b)[i % 2].url}/api/alice/chat", json={"message": f"{i}"})
                    for i in range(10)
                )
            )
    assert sorted(r.status_code for r in responses) == [200] * 4 + [429] * 6


async def test_list_todos_never_returns_more_than_fifty(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    for i in range(55):
        await make_task(agent_client, user="alice", title=f"task {i}")
    model.script(tool_calls(call("list_todos", {"limit": None})), "ok")
    answer = await chat(agent_client, "list everything")
    result = answer["tool_results"][0]["result"]
    assert len(result["todos"]) == 50
    assert result["total"] == 55
    model.script(tool_calls(call("list_todos", {"limit": 500})), "ok")
    capped = await chat(agent_client, "list 500")
    assert capped["tool_results"][0]["result"]["status"] == "error"


async def test_output_tokens_are_capped_on_every_model_call(
    model_settings: Settings, model: FakeOpenAI, engine: object
) -> None:
    settings = model_settings.model_copy(update={"agent_max_tokens": 123})
    async with serving(settings) as client:
        await chat(client, "hello")
    assert model.last_request.body["max_completion_tokens"] == 123


async def test_token_usage_is_recorded_per_message_and_summed_per_session(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 10}
    model.script(tool_calls(call("list_todos", {}), usage=usage), reply("one", usage=usage))
    first = await chat(agent_client, "one")
    model.script(reply("two", usage=usage))
    await chat(agent_client, "two", session_id=first["session_id"])
    assert first["usage"] == {
        "prompt_tokens": 200,
        "completion_tokens": 20,
        "total_tokens": 220,
        "cached_tokens": 0,
    }
    session = await agent_client.get(
        f"/api/alice/sessions/{first['session_id']}", headers=auth("alice")
    )
    assert session.json()["usage"] == {
        "prompt_tokens": 300,
        "completion_tokens": 30,
        "total_tokens": 330,
        "cached_tokens": 0,
    }
    messages = await agent_client.get(
        f"/api/alice/sessions/{first['session_id']}/messages", headers=auth("alice")
    )
    assistant_usage = [m["usage"] for m in messages.json()["data"] if m["role"] == "assistant"]
    assert assistant_usage == [
        {"prompt_tokens": 200, "completion_tokens": 20, "total_tokens": 220, "cached_tokens": 0},
        {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110, "cached_tokens": 0},
    ]


async def test_a_user_over_the_daily_token_budget_is_answered_by_the_stub(
    model_settings: Settings, model: FakeOpenAI, engine: object
) -> None:
    settings = model_settings.model_copy(update={"agent_daily_token_budget": 150})
    model.default = reply("from the model", usage={"prompt_tokens": 90, "completion_tokens": 10})
    async with serving(settings) as client:
        first = await chat(client, "Add a task to buy milk")
        second = await chat(client, "Add a task to buy bread")
        third = await chat(client, "Add a task to buy eggs")
        bobs = await chat(client, "hello", user="bob")
    assert [a["using_stub"] for a in (first, second, third)] == [False, False, True]
    assert third["response"].startswith("Added task")
    assert bobs["using_stub"] is False
    assert model.requests_count == 3
