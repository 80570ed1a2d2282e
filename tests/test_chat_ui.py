"""POST /chat/ui: the Vercel AI SDK's UI message stream protocol, spoken to `useChat`.
(The AI SDK's own client reads these streams in tests/test_ai_sdk.py.)"""

import asyncio
import json
import uuid
from typing import Any

import httpx

from backend.services.ui_stream import UIMessageStream
from backend.settings import Settings
from tests.chat_helpers import stored_messages
from tests.conftest import auth, serving
from tests.fake_openai import FakeOpenAI, call, delay, reply, tool_calls

UI_HEADERS = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}


def user_message(text: str, *, id: str = "m1") -> dict[str, Any]:
    return {"id": id, "role": "user", "parts": [{"type": "text", "text": text}]}


def body(text: str, *, chat_id: str = "chat-1", **more: Any) -> dict[str, Any]:
    return {"id": chat_id, "messages": [user_message(text)], "trigger": "submit-message", **more}


def chunks_of(response: httpx.Response) -> list[dict[str, Any]]:
    """The chunks of a UI message stream; asserts every frame is `data: ...` and it ends
    with [DONE]. Keep-alive comments come back as {"comment": ...}."""
    frames = [frame for frame in response.text.split("\n\n") if frame]
    assert frames[-1] == "data: [DONE]"
    chunks: list[dict[str, Any]] = []
    for frame in frames[:-1]:
        assert "\n" not in frame
        if frame.startswith(":"):
            chunks.append({"comment": frame[1:].strip()})
        else:
            assert frame.startswith("data: ")
            chunks.append(json.loads(frame.removeprefix("data: ")))
    return chunks


async def post_ui(
    client: httpx.AsyncClient,
    payload: dict[str, Any],
    *,
    user: str = "alice",
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return await client.post(
        f"/api/{user}/chat/ui", json=payload, headers={**auth(user), **(headers or {})}
    )


async def test_a_tool_turn_streams_start_steps_tools_text_and_finish(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.script(
        tool_calls(
            call("add_todo", {"title": "Buy milk"}, id="call_1"),
            call("complete_todo", {"todo_id": "99"}, id="call_2"),
        ),
        reply("Added task 1.", usage={"prompt_tokens": 10, "completion_tokens": 3}),
    )
    response = await post_ui(agent_client, body("add milk"))
    assert response.status_code == 200
    assert {k: response.headers[k] for k in UI_HEADERS} == UI_HEADERS
    chunks = chunks_of(response)
    start, finish = chunks[0], chunks[-1]
    session_id = start["messageMetadata"]["session_id"]
    stored = await stored_messages(agent_client, session_id)
    assert start == {
        "type": "start",
        "messageId": stored[1]["id"],
        "messageMetadata": {"session_id": session_id},
    }
    added = stored[1]["tool_results"][0]["result"]
    assert chunks[1:-1] == [
        {"type": "start-step"},
        {
            "type": "tool-input-available",
            "toolCallId": "call_1",
            "toolName": "add_todo",
            "input": {"title": "Buy milk"},
        },
        {"type": "tool-output-available", "toolCallId": "call_1", "output": added},
        {
            "type": "tool-input-available",
            "toolCallId": "call_2",
            "toolName": "complete_todo",
            "input": {"todo_id": "99"},
        },
        {
            "type": "tool-output-error",
            "toolCallId": "call_2",
            "errorText": "Task not found. No task '99'.",
        },
        {"type": "finish-step"},
        {"type": "start-step"},
        {"type": "text-start", "id": "text-1"},
        *[
            {"type": "text-delta", "id": "text-1", "delta": piece}
            for piece in [c["delta"] for c in chunks if c["type"] == "text-delta"]
        ],
        {"type": "text-end", "id": "text-1"},
        {"type": "finish-step"},
    ]
    assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta") == "Added task 1."
    session = await agent_client.get(f"/api/alice/sessions/{session_id}", headers=auth("alice"))
    assert finish == {
        "type": "finish",
        "messageMetadata": {
            "session_id": session_id,
            "using_stub": False,
            "usage": session.json()["usage"],
        },
    }


async def test_a_chat_id_names_one_session_per_user(
    client: httpx.AsyncClient,
) -> None:
    first = chunks_of(await post_ui(client, body("Add a task to buy milk", chat_id="abc")))
    again = chunks_of(await post_ui(client, body("Show me all my tasks", chat_id="abc")))
    session_id = first[0]["messageMetadata"]["session_id"]
    assert again[0]["messageMetadata"]["session_id"] == session_id
    by_uuid = chunks_of(await post_ui(client, body("What's pending?", chat_id=session_id)))
    assert by_uuid[0]["messageMetadata"]["session_id"] == session_id
    assert len(await stored_messages(client, session_id)) == 6

    # Bob's "abc", and Bob naming Alice's session id, are chats of Bob's own.
    bobs = chunks_of(await post_ui(client, body("Show me all my tasks", chat_id="abc"), user="bob"))
    bob_session = bobs[0]["messageMetadata"]["session_id"]
    foreign = await post_ui(client, body("Show me all my tasks", chat_id=session_id), user="bob")
    foreign_session = chunks_of(foreign)[0]["messageMetadata"]["session_id"]
    assert len({session_id, bob_session, foreign_session}) == 3
    bobs_messages = await stored_messages(client, foreign_session, user="bob")
    assert [m["content"] for m in bobs_messages][:1] == ["Show me all my tasks"]
    assert len(bobs_messages) == 2
    assert len(await stored_messages(client, session_id)) == 6


async def test_regenerate_answers_the_stored_message_again_without_storing_it_twice(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.script(
        tool_calls(call("add_todo", {"title": "Buy milk"}, id="call_1")),
        reply("Added it."),
        reply("I added task 1: Buy milk."),
    )
    first = chunks_of(await post_ui(agent_client, body("add milk")))
    session_id = first[0]["messageMetadata"]["session_id"]
    again = await post_ui(agent_client, body("add milk", trigger="regenerate-message"))
    chunks = chunks_of(again)
    assert [c["type"] for c in chunks if c["type"].startswith("tool")] == []
    assert "".join(c.get("delta", "") for c in chunks) == "I added task 1: Buy milk."
    stored = await stored_messages(agent_client, session_id)
    assert [m["role"] for m in stored] == ["user", "assistant", "assistant"]
    assert stored[1]["tool_calls"][0]["id"] == "call_1"  # the first answer keeps its record
    assert stored[2]["content"] == "I added task 1: Buy milk."
    # The model saw the tools that ran, not the words being replaced.
    seen = model.requests[-1].messages
    # (the service's rules, then the user's context: two system messages)
    assert [m["role"] for m in seen] == ["system", "system", "user", "assistant", "tool"]
    assert seen[2]["content"] == "add milk"


async def test_regenerating_a_stub_answer_does_not_do_its_tools_again(
    client: httpx.AsyncClient,
) -> None:
    first = chunks_of(await post_ui(client, body("Add a task to buy milk")))
    regenerate = body("Add a task to buy milk", trigger="regenerate-message")
    again = chunks_of(await post_ui(client, regenerate))
    assert [c["type"] for c in again if c["type"].startswith("tool")] == []
    text = "".join(c.get("delta", "") for c in again)
    assert text == "Here is what I did: Created task 1: Buy milk."
    tasks = await client.get("/api/alice/tasks", headers=auth("alice"))
    assert [t["title"] for t in tasks.json()["data"]] == ["Buy milk"]
    assert len(await stored_messages(client, first[0]["messageMetadata"]["session_id"])) == 3


async def test_errors_before_the_stream_are_json_like_chat(client: httpx.AsyncClient) -> None:
    no_text = body("x")
    no_text["messages"] = [{"id": "m", "role": "user", "parts": [{"type": "file"}]}]
    answered = body("x")
    answered["messages"].append({"id": "a", "role": "assistant", "parts": []})
    blank = await post_ui(client, body("   "))
    missing = await post_ui(client, no_text)
    ends_with_an_answer = await post_ui(client, answered)
    assert blank.status_code == missing.status_code == ends_with_an_answer.status_code == 422
    assert "last user message" in missing.text
    assert "must end with the user message" in ends_with_an_answer.text
    unknown = await post_ui(client, body("again", chat_id="never", trigger="regenerate-message"))
    assert unknown.status_code == 404
    assert unknown.json() == {"detail": "There is no message in this chat to answer again."}
    unauthenticated = await client.post("/api/alice/chat/ui", json=body("hi"))
    assert unauthenticated.status_code == 401
    assert (await post_ui(client, body("hi"), user="alice", headers=auth("bob"))).status_code == 403


async def test_an_idempotent_retry_tells_the_first_answer_again(
    client: httpx.AsyncClient,
) -> None:
    key = {"Idempotency-Key": "ui-retry-1"}
    first = chunks_of(await post_ui(client, body("Add a task to buy milk"), headers=key))
    retry = chunks_of(await post_ui(client, body("Add a task to buy milk"), headers=key))
    assert retry[0] == first[0]
    assert [c for c in retry if c["type"].startswith("tool")] == [
        c for c in first if c["type"].startswith("tool")
    ]
    session_id = first[0]["messageMetadata"]["session_id"]
    assert len(await stored_messages(client, session_id)) == 2


async def test_keep_alives_flow_and_resume_answers_204_when_nothing_runs(
    model_settings: Settings, model: FakeOpenAI, engine: object
) -> None:
    model.script(delay(0.5, then=reply("finally")))
    settings = model_settings.model_copy(update={"chat_stream_keepalive_s": 0.1})
    async with serving(settings) as client:
        chunks = chunks_of(await post_ui(client, body("slow one")))
        resumed = await client.get("/api/alice/chat/ui/chat-1/stream", headers=auth("alice"))
    assert {"comment": "keep-alive"} in chunks
    assert chunks[-1]["type"] == "finish"
    assert resumed.status_code == 204


async def test_history_as_ui_messages(agent_client: httpx.AsyncClient, model: FakeOpenAI) -> None:
    model.script(tool_calls(call("add_todo", {"title": "Buy milk"}, id="call_1")), "Done.")
    chunks = chunks_of(await post_ui(agent_client, body("add milk")))
    session_id = chunks[0]["messageMetadata"]["session_id"]
    response = await agent_client.get(
        f"/api/alice/sessions/{session_id}/messages", params={"format": "ui"}, headers=auth("alice")
    )
    assert response.status_code == 200
    user, assistant = response.json()
    assert user["parts"] == [{"type": "text", "text": "add milk"}]
    assert assistant["id"] == chunks[0]["messageId"]
    output = next(c["output"] for c in chunks if c["type"] == "tool-output-available")
    assert assistant["parts"] == [
        {"type": "step-start"},
        {
            "type": "tool-add_todo",
            "toolCallId": "call_1",
            "state": "output-available",
            "input": {"title": "Buy milk"},
            "output": output,
        },
        {"type": "step-start"},
        {"type": "text", "text": "Done.", "state": "done"},
    ]
    assert assistant["metadata"]["using_stub"] is False
    missing = await agent_client.get(
        f"/api/alice/sessions/{uuid.uuid4()}/messages",
        params={"format": "ui"},
        headers=auth("alice"),
    )
    assert missing.status_code == 404


async def test_resume_tells_a_running_turn_from_its_start(
    model_settings: Settings, model: FakeOpenAI, engine: object
) -> None:
    model.script(delay(0.5, then=reply("take your time")))
    async with serving(model_settings) as client:
        posted = asyncio.create_task(post_ui(client, body("slow one", chat_id="r1")))
        for _ in range(100):
            resumed = await client.get("/api/alice/chat/ui/r1/stream", headers=auth("alice"))
            if resumed.status_code == 200:
                break
            await asyncio.sleep(0.02)
        first = await posted
        foreign = await client.get("/api/bob/chat/ui/r1/stream", headers=auth("bob"))
    assert resumed.status_code == 200
    assert {k: resumed.headers[k] for k in UI_HEADERS} == UI_HEADERS
    assert chunks_of(resumed) == chunks_of(first)
    assert foreign.status_code == 204


async def test_rate_limited_before_the_stream(make_settings: Any, engine: object) -> None:
    async with serving(make_settings(chat_rate_limit_per_minute=1)) as client:
        first = await post_ui(client, body("Show me all my tasks"))
        second = await post_ui(client, body("Show me all my tasks"))
    assert first.status_code == 200
    assert second.status_code == 429
    assert "retry-after" in second.headers


def test_a_turn_that_fails_mid_stream_ends_with_an_error_chunk() -> None:
    stream = UIMessageStream(message_id="m", session_id="s")
    stream.on_event("delta", {"text": "Working on"}, 1)
    stream.on_event("error", {"detail": "This turn lost its session."}, 1)
    stream.on_event("done", {"response": "late", "using_stub": False, "usage": {}}, 1)

    async def read() -> list[str]:
        return [frame async for frame in stream.frames(keepalive_s=1)]

    frames = "".join(asyncio.run(read())).split("\n\n")
    chunks = [json.loads(f.removeprefix("data: ")) for f in frames if f and f != "data: [DONE]"]
    assert [c["type"] for c in chunks] == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "error",
    ]
    assert chunks[-1] == {"type": "error", "errorText": "This turn lost its session."}
    assert frames[-2:] == ["data: [DONE]", ""]
