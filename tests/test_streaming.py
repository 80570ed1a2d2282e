"""POST /chat/stream: the answer as server-sent events, stored exactly like /chat's."""

from pathlib import Path
from typing import Any

import httpx

from backend.settings import Settings
from tests.chat_helpers import chat, chat_stream, stored_messages
from tests.conftest import auth, server_env, serving
from tests.fake_openai import FakeOpenAI, call, delay, reply, tool_calls
from tests.servers import ServerProcess


def _script(model: FakeOpenAI) -> None:
    model.script(
        tool_calls(
            call("add_todo", {"title": "Buy groceries", "tags": ["home", "food"]}, id="call_1"),
            call("list_todos", {"status": "pending", "search": "groceries"}, id="call_2"),
        ),
        reply(
            "Added task 1: Buy groceries. You have 1 pending task.",
            usage={"prompt_tokens": 30, "completion_tokens": 12},
        ),
    )


async def test_events_come_in_order_and_done_is_the_chat_answer(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    _script(model)
    events = await chat_stream(agent_client, "Add a task to buy groceries")
    names = [name for name, _ in events]
    assert names[0] == "session"
    assert names[-1] == "done"
    assert names.index("tool_call") < names.index("tool_result") < names.index("delta")
    assert names.count("tool_call") == names.count("tool_result") == 2
    session = events[0][1]
    done = events[-1][1]
    assert session["session_id"] == done["session_id"]
    assert "".join(data["text"] for name, data in events if name == "delta") == done["response"]
    assert done["response"] == "Added task 1: Buy groceries. You have 1 pending task."
    assert done["using_stub"] is False
    calls = [data for name, data in events if name == "tool_call"]
    assert calls[0] == {
        "id": "call_1",
        "name": "add_todo",
        "arguments": {"title": "Buy groceries", "tags": ["home", "food"]},
    }
    assert calls == done["tool_calls"]
    results = [data for name, data in events if name == "tool_result"]
    assert results == done["tool_results"]
    assert results[1]["result"]["total"] == 1
    assert set(done) == {
        "session_id",
        "conversation_id",
        "message_id",
        "response",
        "timestamp",
        "tool_calls",
        "tool_results",
        "using_stub",
        "usage",
        "pending_approvals",
    }
    stored = await stored_messages(agent_client, done["session_id"])
    assert stored[0]["id"] == session["user_message_id"]
    assert all(request.stream for request in model.requests)


def _comparable(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {key: value for key, value in message.items() if key not in ("id", "created_at")}
        for message in messages
    ]


async def test_a_streamed_turn_is_stored_like_a_plain_one(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    _script(model)
    plain = await chat(agent_client, "Add a task to buy groceries", user="alice")
    _script(model)
    streamed = await chat_stream(agent_client, "Add a task to buy groceries", user="bob")
    done = streamed[-1][1]

    def same(answer: dict[str, Any]) -> dict[str, Any]:
        return {
            k: v
            for k, v in answer.items()
            if k not in ("session_id", "conversation_id", "message_id", "timestamp")
        }

    assert same(done)["tool_calls"] == same(plain)["tool_calls"]
    assert same(done)["response"] == same(plain)["response"]
    assert same(done)["usage"] == same(plain)["usage"]
    stored_plain = await stored_messages(agent_client, plain["session_id"], user="alice")
    stored_streamed = await stored_messages(agent_client, done["session_id"], user="bob")

    def without_task_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for message in messages:
            for result in message["tool_results"]:
                for todo in [result["result"].get("todo"), *result["result"].get("todos", [])]:
                    if todo:
                        todo.pop("id")
        return _comparable(messages)

    assert without_task_ids(stored_streamed) == without_task_ids(stored_plain)


async def test_tool_call_arguments_streamed_in_pieces_are_assembled(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    title = 'A "quoted", long title with \\ backslashes, ünïcödé and commas, split anywhere'
    model.script(
        tool_calls(
            call("add_todo", {"title": title, "description": "x" * 100, "priority": "low"}),
            call("add_todo", {"title": "Second", "due_at": "2026-12-24"}),
        ),
        "ok",
    )
    events = await chat_stream(agent_client, "add them")
    done = events[-1][1]
    assert [c["arguments"] for c in done["tool_calls"]] == [
        {"title": title, "description": "x" * 100, "priority": "low"},
        {"title": "Second", "due_at": "2026-12-24"},
    ]
    titles = [r["result"]["todo"]["title"] for r in done["tool_results"]]
    assert titles == [title, "Second"]


async def test_the_stub_streams_too(client: httpx.AsyncClient) -> None:
    events = await chat_stream(client, "Add a task to buy milk")
    deltas = "".join(data["text"] for name, data in events if name == "delta")
    assert deltas == events[-1][1]["response"]
    assert events[-1][1]["using_stub"] is True
    assert [name for name, _ in events if name.startswith("tool")] == ["tool_call", "tool_result"]


async def test_keep_alive_comments_flow_while_the_model_is_slow(
    model_settings: Settings, model: FakeOpenAI, engine: object
) -> None:
    model.script(delay(0.6, then=reply("finally")))
    settings = model_settings.model_copy(update={"chat_stream_keepalive_s": 0.1})
    async with serving(settings) as client:
        events = await chat_stream(client, "slow one")
    assert ("", "keep-alive") in events
    assert events[-1][1]["response"] == "finally"


async def test_errors_before_the_stream_starts_are_plain_http_errors(
    agent_client: httpx.AsyncClient,
) -> None:
    unknown = await agent_client.post(
        "/api/alice/chat/stream",
        json={"message": "hi", "session_id": "00000000-0000-0000-0000-000000000000"},
        headers=auth("alice"),
    )
    invalid = await agent_client.post(
        "/api/alice/chat/stream", json={"message": ""}, headers=auth("alice")
    )
    assert unknown.status_code == 404
    assert invalid.status_code == 422


async def test_a_client_that_disconnects_mid_answer_still_gets_its_turn_stored(
    tmp_path: Path, database_url: str, model: FakeOpenAI, engine: object
) -> None:
    model.script(reply("one two three four five six seven eight", chunk_interval_s=0.2))
    env = server_env(database_url, model)
    with ServerProcess(env, log=tmp_path / "serve.log") as server:
        async with httpx.AsyncClient(base_url=server.url, headers=auth("alice")) as client:
            session_id = None
            async with client.stream(
                "POST", "/api/alice/chat/stream", json={"message": "count for me"}
            ) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: ") and '"session_id"' in line and not session_id:
                        session_id = line.split('"session_id": "')[1].split('"')[0]
                    if line == "event: delta":
                        break  # hang up after the first delta
            assert session_id is not None
            for _ in range(50):
                stored = await stored_messages(client, session_id)
                if len(stored) == 2:
                    break
                await _sleep(0.1)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[1]["content"] == "one two three four five six seven eight"


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)
