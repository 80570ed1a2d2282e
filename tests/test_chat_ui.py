"""POST /chat/ui: the Vercel AI SDK's UI message stream protocol, spoken to `useChat`.
(The AI SDK's own client reads these streams in tests/test_ai_sdk.py.)"""

import asyncio
import json
import uuid
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.services.ui_stream import UIMessageStream
from backend.settings import Settings
from tests.chat_helpers import stored_messages, task_titles, words
from tests.conftest import auth, serving
from tests.factories import make_task
from tests.fake_openai import FakeOpenAI, call, delay, reply, tool_calls
from tests.test_events import events_of

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
    assert words(seen[2]) == "add milk"


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

    chunks = [json.loads(f.removeprefix("data: ")) for f in stream.take().split("\n\n") if f]
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


# Approvals. With "approvals": "ai-sdk" (an AI SDK 6 client) a held call is a card: the
# client answers it with addToolApprovalResponse and posts the same assistant message back.
CARDS = {"approvals": "ai-sdk"}
QUESTION = "Delete task 1 “Buy milk”? Reply yes to go ahead, or no to leave it."


async def ask_to_delete(
    client: httpx.AsyncClient, model: FakeOpenAI | None, **more: Any
) -> list[dict[str, Any]]:
    """Alice has "Buy milk" and asks to delete it; her confirm setting holds the call."""
    await make_task(client, user="alice", title="Buy milk")
    if model is not None:
        model.script(tool_calls(call("delete_todo", {"todo_id": "1"}, id="call_del")))
    text = "delete task 1" if model is not None else "delete the milk task"
    return chunks_of(await post_ui(client, body(text, **more)))


def answered(
    asked: list[dict[str, Any]],
    *,
    approved: bool,
    reason: str | None = None,
    approval_id: str | None = None,
) -> dict[str, Any]:
    """The body ai 6's Chat posts once addToolApprovalResponse answered every card of the
    message: the conversation, ending with that assistant message, its tool part in state
    approval-responded."""
    start = asked[0]
    [card] = [c for c in asked if c["type"] == "tool-approval-request"]
    [held] = [
        c
        for c in asked
        if c["type"] == "tool-input-available" and c["toolCallId"] == card["toolCallId"]
    ]
    approval = {"id": approval_id or card["approvalId"], "approved": approved}
    if reason is not None:
        approval["reason"] = reason
    part = {
        "type": f"tool-{held['toolName']}",
        "toolCallId": held["toolCallId"],
        "state": "approval-responded",
        "input": held["input"],
        "approval": approval,
    }
    assistant = {
        "id": start["messageId"],
        "role": "assistant",
        "parts": [{"type": "step-start"}, part],
        "metadata": start["messageMetadata"],
    }
    return {
        "id": "chat-1",
        "messages": [user_message("delete task 1"), assistant],
        "trigger": "submit-message",
        "messageId": start["messageId"],
        **CARDS,
    }


def text_of(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["delta"] for c in chunks if c["type"] == "text-delta")


async def ui_history(
    client: httpx.AsyncClient, session_id: str, *, user: str = "alice"
) -> list[dict[str, Any]]:
    response = await client.get(
        f"/api/{user}/sessions/{session_id}/messages", params={"format": "ui"}, headers=auth(user)
    )
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()
    return messages


async def test_with_cards_a_held_call_streams_an_approval_request_and_no_question(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    asked = await ask_to_delete(agent_client, model, **CARDS)
    session_id = asked[0]["messageMetadata"]["session_id"]
    [_, held] = await stored_messages(agent_client, session_id)
    pending = held["tool_results"][0]["result"]
    assert asked[:-1] == [
        {"type": "start", "messageId": held["id"], "messageMetadata": {"session_id": session_id}},
        {"type": "start-step"},
        {
            "type": "tool-input-available",
            "toolCallId": "call_del",
            "toolName": "delete_todo",
            "input": {"todo_id": "1"},
        },
        {
            "type": "tool-approval-request",
            "approvalId": pending["approval_id"],
            "toolCallId": "call_del",
        },
        {"type": "finish-step"},
    ]
    assert asked[-1]["type"] == "finish"
    assert held["content"] == QUESTION  # stored in words: a plain "yes" answers it too
    assert await task_titles(agent_client) == ["Buy milk"]
    [_, waiting] = await ui_history(agent_client, session_id)
    assert waiting["id"] == held["id"]
    assert waiting["parts"] == [
        {"type": "step-start"},
        {
            "type": "tool-delete_todo",
            "toolCallId": "call_del",
            "state": "approval-requested",
            "input": {"todo_id": "1"},
            "approval": {"id": pending["approval_id"]},
        },
    ]


async def test_an_approved_card_runs_the_call_and_the_same_message_goes_on(
    agent_client: httpx.AsyncClient, model: FakeOpenAI, engine: AsyncEngine
) -> None:
    asked = await ask_to_delete(agent_client, model, **CARDS)
    model.script(reply("Deleted it; it is in the trash."))
    chunks = chunks_of(await post_ui(agent_client, answered(asked, approved=True)))
    session_id = asked[0]["messageMetadata"]["session_id"]
    user, held, going_on = await stored_messages(agent_client, session_id)
    deleted = held["tool_results"][0]["result"]
    assert deleted["status"] == "deleted"
    # The message the client sent goes on: named again, never a new id.
    assert chunks[0] == asked[0]
    assert chunks[1:3] == [
        {"type": "tool-output-available", "toolCallId": "call_del", "output": deleted},
        {"type": "start-step"},
    ]
    assert [c["type"] for c in chunks[-3:]] == ["text-end", "finish-step", "finish"]
    assert text_of(chunks) == "Deleted it; it is in the trash."
    assert await task_titles(agent_client) == []
    # It goes on from the call's result, not from the question stored as the held reply.
    sent = model.last_messages()
    assert (sent[-1]["role"], sent[-1]["tool_call_id"]) == ("tool", "call_del")
    assert not [m for m in sent if "Reply yes" in str(m.get("content"))]
    # Stored as /chat stores an answer without a message: a second assistant row.
    assert [m["role"] for m in (user, held, going_on)] == ["user", "assistant", "assistant"]
    # The history shows one message, as the client has it.
    [_, message] = await ui_history(agent_client, session_id)
    assert message["id"] == held["id"] == asked[0]["messageId"]
    approval_id = asked[3]["approvalId"]
    assert message["parts"] == [
        {"type": "step-start"},
        {
            "type": "tool-delete_todo",
            "toolCallId": "call_del",
            "state": "output-available",
            "input": {"todo_id": "1"},
            "output": deleted,
            "approval": {"id": approval_id, "approved": True},
        },
        {"type": "step-start"},
        {"type": "text", "text": "Deleted it; it is in the trash.", "state": "done"},
    ]
    assert message["metadata"] == chunks[-1]["messageMetadata"]
    # The same answer again: already answered, nothing runs.
    again = await post_ui(agent_client, answered(asked, approved=True))
    assert again.status_code == 409
    assert "already answered" in again.json()["detail"]
    assert [e[0] for e in await events_of(engine)].count("task.deleted") == 1


async def test_a_denied_card_ends_as_output_denied_and_the_model_hears_why(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    asked = await ask_to_delete(agent_client, model, **CARDS)
    model.script(reply("OK, I kept it."))
    denying = answered(asked, approved=False, reason="still needed")
    chunks = chunks_of(await post_ui(agent_client, denying))
    assert chunks[0] == asked[0]
    assert chunks[1] == {"type": "tool-output-denied", "toolCallId": "call_del"}
    assert text_of(chunks) == "OK, I kept it."
    assert await task_titles(agent_client) == ["Buy milk"]
    told = next(m for m in model.last_messages() if m["role"] == "tool")
    assert model.last_messages()[-1] == told  # the continuation ends with the result
    assert (json.loads(told["content"])["status"], json.loads(told["content"])["reason"]) == (
        "denied",
        "still needed",
    )
    [_, message] = await ui_history(agent_client, asked[0]["messageMetadata"]["session_id"])
    assert message["parts"][1] == {
        "type": "tool-delete_todo",
        "toolCallId": "call_del",
        "state": "output-denied",
        "input": {"todo_id": "1"},
        "approval": {"id": asked[3]["approvalId"], "approved": False, "reason": "still needed"},
    }


async def test_the_stub_asks_with_a_card_too(client: httpx.AsyncClient) -> None:
    asked = await ask_to_delete(client, None, **CARDS)
    card = asked.index(next(c for c in asked if c["type"] == "tool-approval-request"))
    assert [c["type"] for c in asked[card - 1 :]] == [
        "tool-input-available",
        "tool-approval-request",
        "finish-step",
        "finish",
    ]
    assert asked[card - 1]["toolName"] == "delete_todo"
    assert text_of(asked) == ""
    chunks = chunks_of(await post_ui(client, answered(asked, approved=True)))
    assert [c["type"] for c in chunks[:3]] == ["start", "tool-output-available", "start-step"]
    assert text_of(chunks) == "Here is what I did: Deleted task 1: Buy milk."
    assert await task_titles(client) == []
    [_, message] = await ui_history(client, asked[0]["messageMetadata"]["session_id"])
    assert [(p["type"], p.get("state")) for p in message["parts"]] == [
        ("step-start", None),
        ("tool-list_todos", "output-available"),  # how the stub found "the milk task"
        ("tool-delete_todo", "output-available"),
        ("step-start", None),
        ("text", "done"),
    ]
    assert message["metadata"]["using_stub"] is True


async def test_without_the_opt_in_the_question_is_words_and_yes_is_a_message(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    asked = await ask_to_delete(agent_client, model)
    types = [c["type"] for c in asked]
    assert "tool-approval-request" not in types
    assert "tool-input-available" not in types  # the held call is the question, not a part
    assert text_of(asked) == QUESTION
    model.script(reply("Done."))
    yes = body("yes")
    yes["messages"][0]["id"] = "m2"
    chunks = chunks_of(await post_ui(agent_client, yes))
    assert chunks[0]["messageId"] != asked[0]["messageId"]  # a new answer to a new message
    assert [c["type"] for c in chunks[1:4]] == [
        "start-step",
        "tool-input-available",
        "tool-output-available",
    ]
    assert chunks[3]["output"]["status"] == "deleted"
    assert "tool-output-denied" not in [c["type"] for c in chunks]
    assert text_of(chunks) == "Done."
    assert await task_titles(agent_client) == []


async def test_a_plain_no_answers_a_card_too_and_the_denial_is_a_result_in_the_new_answer(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    await ask_to_delete(agent_client, model, **CARDS)
    model.script(reply("Kept."))
    chunks = chunks_of(await post_ui(agent_client, body("no", **CARDS)))
    # The card's message is not the one that goes on: the call is told whole here.
    tools = [c for c in chunks if c["type"].startswith("tool-")]
    assert [c["type"] for c in tools] == ["tool-input-available", "tool-output-available"]
    assert tools[1]["output"]["status"] == "denied"
    assert await task_titles(agent_client) == ["Buy milk"]


async def test_answers_that_cannot_be_taken_are_refused_before_the_stream(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    asked = await ask_to_delete(agent_client, model, **CARDS)
    without_opt_in = answered(asked, approved=True)
    del without_opt_in["approvals"]
    no_answer = answered(asked, approved=True)
    no_answer["messages"][-1]["parts"][1]["state"] = "approval-requested"
    not_a_bool = answered(asked, approved=True)
    not_a_bool["messages"][-1]["parts"][1]["approval"]["approved"] = "maybe"
    for refused, text in [
        (without_opt_in, "must end with the user message"),
        (no_answer, "answers no approval request"),
        (not_a_bool, "approval responses of the last message"),
    ]:
        response = await post_ui(agent_client, refused)
        assert response.status_code == 422, response.text
        assert text in response.text
    unknown = await post_ui(agent_client, answered(asked, approved=True, approval_id="apr_x"))
    assert unknown.status_code == 409
    elsewhere = answered(asked, approved=True)
    elsewhere["id"] = "another-chat"  # a chat with no session holds none of them
    assert (await post_ui(agent_client, elsewhere)).status_code == 409
    bobs = await post_ui(agent_client, answered(asked, approved=True), user="bob")
    assert bobs.status_code == 404  # Alice's approval, named in Bob's chat
    assert await task_titles(agent_client) == ["Buy milk"]


async def test_an_idempotent_retry_of_a_card_tells_it_again(
    agent_client: httpx.AsyncClient, model: FakeOpenAI, engine: AsyncEngine
) -> None:
    await make_task(agent_client, user="alice", title="Buy milk")
    # A round that holds one call and runs another: the retry keeps each with its own.
    model.script(
        tool_calls(
            call("delete_todo", {"todo_id": "1"}, id="call_del"),
            call("add_todo", {"title": "Oat milk"}, id="call_add"),
        )
    )
    key = {"Idempotency-Key": "card-1"}
    asked = chunks_of(await post_ui(agent_client, body("swap the milk", **CARDS), headers=key))
    again = chunks_of(await post_ui(agent_client, body("swap the milk", **CARDS), headers=key))
    assert again == asked
    assert [c["type"] for c in asked if c["type"].startswith("tool-")] == [
        "tool-input-available",
        "tool-approval-request",
        "tool-input-available",
        "tool-output-available",
    ]
    assert await task_titles(agent_client) == ["Buy milk", "Oat milk"]  # added once
    assert [e[0] for e in await events_of(engine)].count("task.deleted") == 0


async def test_an_idempotent_retry_of_an_answer_tells_it_again(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    asked = await ask_to_delete(agent_client, model, **CARDS)
    model.script(reply("Deleted."))
    key = {"Idempotency-Key": "card-yes"}
    going_on = await post_ui(agent_client, answered(asked, approved=True), headers=key)
    retried = await post_ui(agent_client, answered(asked, approved=True), headers=key)
    assert retried.status_code == 200, retried.text
    first, again = chunks_of(going_on), chunks_of(retried)
    assert text_of(again) == text_of(first) == "Deleted."
    assert [c for c in again if c["type"] != "text-delta"] == [
        c for c in first if c["type"] != "text-delta"
    ]


async def test_an_expired_call_ends_as_an_error_part(
    make_settings: Any, model: FakeOpenAI, engine: AsyncEngine
) -> None:
    settings = make_settings(
        openai_api_key="sk-test", openai_base_url=model.base_url, agent_approval_ttl_s=0.3
    )
    async with serving(settings) as client:
        asked = await ask_to_delete(client, model, **CARDS)
        await asyncio.sleep(0.4)
        late = await post_ui(client, answered(asked, approved=True))
        assert late.status_code == 409
        assert "expired" in late.json()["detail"]
        model.script(reply("That one expired."))
        chunks = chunks_of(await post_ui(client, body("hello again", **CARDS)))
        history = await ui_history(client, asked[0]["messageMetadata"]["session_id"])
        assert await task_titles(client) == ["Buy milk"]
    ended = next(c for c in chunks if c["type"].startswith("tool-output"))
    assert ended == {
        "type": "tool-output-error",
        "toolCallId": "call_del",
        "errorText": "Nobody answered in time, so this was not done.",
    }
    assert history[1]["parts"][1] == {
        "type": "tool-delete_todo",
        "toolCallId": "call_del",
        "state": "output-error",
        "input": {"todo_id": "1"},
        "errorText": "Nobody answered in time, so this was not done.",
    }


def test_a_resumed_stream_of_a_message_going_on_tells_the_answered_call_whole() -> None:
    # ai 6 replays a resumed stream into an empty message, which has no part to end.
    call_event = {"id": "c", "name": "delete_todo", "arguments": {"todo_id": "1"}}
    denied = {"status": "denied", "reason": "no", "note": "Nothing was changed."}

    def read(resumed: bool) -> list[dict[str, Any]]:
        stream = UIMessageStream(
            message_id="m", session_id="s", cards=True, continued=frozenset({"c"}), resumed=resumed
        )
        stream.on_event("tool_call", call_event | {"approval_id": "apr_1"}, 0)
        stream.on_event(
            "tool_result", {"tool_call_id": "c", "name": "delete_todo", "result": denied}, 0
        )
        stream.on_event("done", {"response": "Kept.", "using_stub": True, "usage": {}}, 0)
        return [json.loads(f.removeprefix("data: ")) for f in stream.take().split("\n\n") if f]

    posted, resumed = read(False), read(True)
    assert [c["type"] for c in posted[:2]] == ["start", "tool-output-denied"]
    assert [c["type"] for c in resumed[:3]] == [
        "start",
        "tool-input-available",
        "tool-output-available",
    ]
    assert resumed[2]["output"] == denied
    assert posted[2:] == resumed[3:]
