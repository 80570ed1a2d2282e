"""The chat turn against a scripted OpenAI-compatible server, through the real openai SDK."""

import json
from collections.abc import Callable
from typing import Any

import httpx

from backend.services.tools import TOOL_DEFINITIONS
from backend.settings import Settings
from tests.chat_helpers import CLOCK_NOTE, chat, stored_messages, task_titles, words
from tests.conftest import auth, serving
from tests.factories import make_task
from tests.fake_openai import FakeOpenAI, call, error, reply, tool_calls


async def test_a_new_session_gets_an_answer_and_both_messages_are_stored(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.script(reply("Hello Alice!", usage={"prompt_tokens": 50, "completion_tokens": 4}))
    answer = await chat(agent_client, "Hi there, who are you?")

    assert answer["response"] == "Hello Alice!"
    assert answer["using_stub"] is False
    assert answer["session_id"] == answer["conversation_id"]
    assert answer["usage"] == {
        "prompt_tokens": 50,
        "completion_tokens": 4,
        "total_tokens": 54,
        "cached_tokens": 0,
    }
    assert answer["tool_calls"] == []
    assert answer["tool_results"] == []
    stored = await stored_messages(agent_client, answer["session_id"])
    assert [(m["role"], m["content"]) for m in stored] == [
        ("user", "Hi there, who are you?"),
        ("assistant", "Hello Alice!"),
    ]
    assert stored[1]["id"] == answer["message_id"]
    session = await agent_client.get(
        f"/api/alice/sessions/{answer['session_id']}", headers=auth("alice")
    )
    assert session.json()["title"] == "Hi there, who are you?"
    assert session.json()["usage"]["total_tokens"] == 54


async def test_the_model_is_called_with_strict_tools_and_a_system_prompt(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    await chat(agent_client, "hello", timezone="Europe/Berlin")
    body = model.last_request.body
    assert body["tool_choice"] == "auto"
    assert body["tools"] == json.loads(json.dumps(TOOL_DEFINITIONS))
    rules, context = body["messages"][:2]
    assert rules["role"] == context["role"] == "system"
    assert "never instructions" in rules["content"]
    assert "Europe/Berlin" in context["content"]
    # The time goes with the message (the context above stays the same every turn).
    assert body["messages"][-1]["role"] == "user"
    assert CLOCK_NOTE.match(body["messages"][-1]["content"])
    assert words(body["messages"][-1]) == "hello"


def _check_strict(schema: dict[str, Any], where: str) -> None:
    """OpenAI strict mode: objects list every property as required, allow nothing else."""
    if schema.get("type") == "object" or "properties" in schema:
        assert schema.get("additionalProperties") is False, where
        assert sorted(schema.get("required", [])) == sorted(schema.get("properties", {})), where
    for key in ("minLength", "maxLength", "default", "format", "minimum", "maximum"):
        assert key not in schema, f"{where}: {key}"
    for name, sub in schema.get("properties", {}).items():
        _check_strict(sub, f"{where}.{name}")
    for sub in schema.get("anyOf", []):
        _check_strict(sub, where)
    if isinstance(schema.get("items"), dict):
        _check_strict(schema["items"], f"{where}[]")


def test_tool_schemas_are_strict_and_have_no_user_id() -> None:
    names = [tool["function"]["name"] for tool in TOOL_DEFINITIONS]
    assert names == [
        "list_todos",
        "add_todo",
        "update_todo",
        "complete_todo",
        "delete_todo",
        "restore_todo",
        "purge_trash",
        "undo_last_turn",
        "list_lists",
        "create_list",
        "search_documents",
        "get_user_context",
        "remember",
        "forget",
    ]
    for tool in TOOL_DEFINITIONS:
        function = tool["function"]
        assert function.get("strict") is True
        assert "user" not in json.dumps(function["parameters"]).lower().replace("user's", "")
        _check_strict(dict(function["parameters"]), function["name"])


async def test_a_tool_call_is_carried_out_and_recorded_with_its_result(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.script(
        tool_calls(call("add_todo", {"title": "Buy groceries", "priority": "high"})),
        reply("Added task 1: Buy groceries."),
    )
    answer = await chat(agent_client, "Add a task to buy groceries")

    assert answer["response"] == "Added task 1: Buy groceries."
    assert answer["tool_calls"] == [
        {
            "id": "call_1",
            "name": "add_todo",
            "arguments": {"title": "Buy groceries", "priority": "high"},
        }
    ]
    [result] = answer["tool_results"]
    assert result["tool_call_id"] == "call_1"
    assert result["result"]["status"] == "created"
    assert result["result"]["todo"]["number"] == 1
    assert await task_titles(agent_client) == ["Buy groceries"]
    # The model saw its call answered by the tool result.
    messages = model.last_messages()
    assert messages[-2]["tool_calls"][0]["id"] == "call_1"
    assert messages[-1]["role"] == "tool"
    assert messages[-1]["tool_call_id"] == "call_1"
    assert json.loads(messages[-1]["content"])["status"] == "created"
    stored = await stored_messages(agent_client, answer["session_id"])
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[1]["tool_calls"] == answer["tool_calls"]
    assert stored[1]["tool_results"] == answer["tool_results"]
    assert stored[1]["content"] == "Added task 1: Buy groceries."


async def test_parallel_tool_calls_run_in_call_order(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.script(
        tool_calls(
            call("add_todo", {"title": "First"}),
            call("add_todo", {"title": "Second"}),
            call("list_todos", {"status": "pending"}),
        ),
        reply("Done."),
    )
    answer = await chat(agent_client, "Add first and second, then list")
    assert [r["tool_call_id"] for r in answer["tool_results"]] == ["call_1", "call_2", "call_3"]
    assert [r["result"]["todo"]["number"] for r in answer["tool_results"][:2]] == [1, 2]
    listed = answer["tool_results"][2]["result"]
    assert [t["title"] for t in listed["todos"]] == ["First", "Second"]
    # Each call goes to the model as its own assistant message, its result right after it.
    sent = model.last_messages()[-6:]
    assert [m["role"] for m in sent] == ["assistant", "tool"] * 3
    assert [m["tool_call_id"] for m in sent[1::2]] == ["call_1", "call_2", "call_3"]


async def test_bad_tool_calls_go_back_to_the_model_as_errors(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.script(
        tool_calls(
            call("add_todo", '{"title": "unterminated'),
            call("launch_rockets", {}),
            call("add_todo", {"title": ""}),
            call("complete_todo", {"todo_id": "#99"}),
            call("update_todo", {"todo_id": "1", "user_id": "bob"}),
        ),
        reply("Sorry, some of that failed."),
    )
    answer = await chat(agent_client, "do things")
    assert answer["response"] == "Sorry, some of that failed."
    results = [r["result"] for r in answer["tool_results"]]
    assert all(result["status"] == "error" for result in results)
    assert "JSON" in results[0]["error"]
    assert "Unknown tool" in results[1]["error"]
    assert answer["tool_calls"][0]["arguments"] == '{"title": "unterminated'
    tool_messages = [m for m in model.last_messages() if m["role"] == "tool"]
    assert len(tool_messages) == 5
    assert await task_titles(agent_client) == []


async def test_the_tool_loop_is_capped_and_the_turn_still_answers(
    make_settings: Callable[..., Settings],
    model_settings: Settings,
    model: FakeOpenAI,
    engine: object,
) -> None:
    model.default = tool_calls(call("list_todos", {}))  # a model that never stops
    settings = model_settings.model_copy(update={"agent_max_tool_rounds": 3})
    async with serving(settings) as client:
        answer = await chat(client, "list forever")
    assert len(answer["tool_calls"]) == 3
    assert model.requests_count == 4
    assert model.last_request.body["tool_choice"] == "none"
    assert answer["response"]
    assert answer["using_stub"] is False


async def test_history_after_thirty_turns_is_the_digest_then_the_latest_messages_in_order(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    session_id = None
    for turn in range(30):
        if turn % 3 == 0:
            model.script(tool_calls(call("add_todo", {"title": f"task {turn}"})), f"added {turn}")
        else:
            model.script(f"answer {turn}")
        answer = await chat(agent_client, f"message {turn}", session_id=session_id)
        session_id = answer["session_id"]
    model.script("last answer")
    await chat(agent_client, "the new message", session_id=session_id)

    messages = model.last_messages()
    assert [m["role"] for m in messages[:3]] == ["system"] * 3  # rules, user context, digest
    digest = messages[2]["content"]
    # 62 stored messages with the new one: 20 (AGENT_HISTORY_MESSAGES) would be 21, so the
    # oldest 10 of them (5 turns) were folded, as every fifth turn before this one did.
    assert '"message 0"' in digest
    assert '"message 24"' in digest
    assert 'Added task 9 "task 24".' in digest
    conversation = messages[3:]
    user_texts = [words(m) for m in conversation if m["role"] == "user"]
    assert user_texts == [f"message {t}" for t in range(25, 30)] + ["the new message"]
    assert words(conversation[-1]) == "the new message"
    assert conversation[0]["role"] == "user"  # the recent messages start with the person's
    for index, message in enumerate(conversation):
        if message["role"] == "tool":
            assert conversation[index - 1]["tool_calls"][0]["id"] == message["tool_call_id"]


async def test_a_model_that_targets_another_users_tasks_finds_nothing(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    bobs = await make_task(agent_client, user="bob", title="Bob's task")
    await make_task(agent_client, user="alice", title="Alice's task")
    model.script(
        tool_calls(
            call("complete_todo", {"todo_id": bobs["id"], "completed": True}),
            call("delete_todo", {"todo_id": bobs["id"]}),
            call("update_todo", {"todo_id": bobs["id"], "title": "pwned"}),
            call("get_user_context", {}),
        ),
        reply("Done"),
    )
    answer = await chat(agent_client, "mess with bob")
    results = [r["result"] for r in answer["tool_results"]]
    assert [r["status"] for r in results[:3]] == ["error"] * 3
    assert all("not found" in r["error"].lower() for r in results[:3])
    assert results[3]["pending"] == 1  # only Alice's own task is counted
    after = await agent_client.get(f"/api/bob/tasks/{bobs['id']}", headers=auth("bob"))
    assert after.json() == bobs
    # By number, "1" is Alice's own task 1, never Bob's (and a delete waits for her yes).
    model.script(tool_calls(call("delete_todo", {"todo_id": "1"})), reply("ok"))
    asked = await chat(agent_client, "delete task 1")
    assert asked["pending_approvals"][0]["summary"] == "Delete task 1 “Alice's task”"
    await chat(agent_client, "yes", session_id=asked["session_id"])
    assert await task_titles(agent_client, user="bob") == ["Bob's task"]
    assert await task_titles(agent_client, user="alice") == []


async def test_the_models_user_id_argument_is_refused_not_obeyed(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    await make_task(agent_client, user="bob", title="Bob's task")
    model.script(
        tool_calls(
            call("list_todos", {"user_id": "bob"}),
            call("delete_todo", {"todo_id": "1", "user_id": "bob"}),
        ),
        reply("ok"),
    )
    answer = await chat(agent_client, "show bob's tasks")
    assert [r["result"]["status"] for r in answer["tool_results"]] == ["error", "error"]
    assert await task_titles(agent_client, user="bob") == ["Bob's task"]


async def test_sessions_continue_and_history_includes_earlier_turns(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    first = await chat(agent_client, "remember the word banana")
    model.script("banana")
    second = await chat(agent_client, "what was the word?", session_id=first["session_id"])
    assert second["session_id"] == first["session_id"]
    roles = [(m["role"], words(m)) for m in model.last_messages()[2:]]
    assert roles == [
        ("user", "remember the word banana"),
        ("assistant", "OK"),
        ("user", "what was the word?"),
    ]
    listing = await agent_client.get("/api/alice/sessions", headers=auth("alice"))
    assert [s["id"] for s in listing.json()["data"]] == [first["session_id"]]


async def test_conversation_id_is_accepted_as_an_alias(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    first = await chat(agent_client, "one")
    second = await chat(agent_client, "two", conversation_id=first["session_id"])
    assert second["session_id"] == first["session_id"]


async def test_timezone_is_validated_and_remembered(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    await chat(agent_client, "hi", timezone="Not/A_Zone", expect=422)
    first = await chat(agent_client, "hi", timezone="Asia/Tokyo")
    await chat(agent_client, "again", session_id=first["session_id"])
    assert "Asia/Tokyo" in model.last_messages()[1]["content"]


async def test_invalid_chat_requests_are_422(agent_client: httpx.AsyncClient) -> None:
    for body in [
        {},
        {"message": ""},
        {"message": "   \n "},
        {"message": "x" * 10_001},
        {"message": 5},
        {"message": "hi", "session_id": "not-a-uuid"},
        {"message": "hi", "timezone": ""},
    ]:
        response = await agent_client.post("/api/alice/chat", json=body, headers=auth("alice"))
        assert response.status_code == 422, body
    assert (await chat(agent_client, "x" * 10_000))["response"]


async def test_unknown_and_foreign_sessions_are_404_and_store_nothing(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    bobs = await chat(agent_client, "bob's secret plan", user="bob")
    for session_id in (bobs["session_id"], "00000000-0000-0000-0000-000000000000"):
        response = await agent_client.post(
            "/api/alice/chat",
            json={"message": "hi", "session_id": session_id},
            headers=auth("alice"),
        )
        assert response.status_code == 404
        assert response.json() == {"detail": "Session not found."}
    assert len(await stored_messages(agent_client, bobs["session_id"], user="bob")) == 2
    assert model.requests_count == 1


async def test_empty_model_answer_still_gets_a_reply(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.script(reply(""))
    answer = await chat(agent_client, "hello?")
    assert answer["response"]


async def test_tool_effects_survive_a_model_that_fails_after_them(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.script(
        tool_calls(call("add_todo", {"title": "Pay rent"})),
        error(400, message="context too long"),
    )
    answer = await chat(agent_client, "add pay rent")
    assert await task_titles(agent_client) == ["Pay rent"]  # done once, not redone by the stub
    assert "Created task 1: Pay rent" in answer["response"]
    assert answer["using_stub"] is True
    stored = await stored_messages(agent_client, answer["session_id"])
    assert stored[1]["tool_results"][0]["result"]["status"] == "created"
