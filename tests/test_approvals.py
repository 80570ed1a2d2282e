"""Ask first: the calls the person's `confirm` setting holds wait for their yes, on every
surface, and an answer runs the stored call at most once, exactly as it was stored."""

import asyncio
import json
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.chat_helpers import chat, parse_sse, stored_messages, task_titles, words
from tests.conftest import auth, serving
from tests.factories import make_task
from tests.fake_openai import FakeOpenAI, call, reply, tool_calls
from tests.test_events import events_of


async def answer(
    client: httpx.AsyncClient,
    session_id: str,
    approvals: list[dict[str, Any]],
    *,
    user: str = "alice",
    message: str | None = None,
    expect: int = 200,
) -> Any:
    body: dict[str, Any] = {"session_id": session_id, "approvals": approvals}
    if message is not None:
        body["message"] = message
    response = await client.post(f"/api/{user}/chat", json=body, headers=auth(user))
    assert response.status_code == expect, response.text
    return response.json()


async def _ask_to_delete(
    client: httpx.AsyncClient, model: FakeOpenAI, todo_id: str = "1", *, user: str = "alice"
) -> dict[str, Any]:
    model.script(tool_calls(call("delete_todo", {"todo_id": todo_id}, id="call_del")))
    asked = await chat(client, f"delete task {todo_id}", user=user)
    assert len(asked["pending_approvals"]) == 1
    return asked


def _tool_messages(model: FakeOpenAI) -> dict[str, Any]:
    """The tool results the model was last sent, by call id."""
    return {
        m["tool_call_id"]: json.loads(m["content"])
        for m in model.last_messages()
        if m["role"] == "tool"
    }


def _assert_continues_from_the_result(model: FakeOpenAI, call_id: str) -> None:
    sent = model.last_messages()
    assert (sent[-1]["role"], sent[-1]["tool_call_id"]) == ("tool", call_id)
    assert not [m for m in sent if "Reply yes" in str(m.get("content"))]


async def test_a_held_delete_is_stored_asked_about_and_not_run(
    agent_client: httpx.AsyncClient, model: FakeOpenAI, engine: AsyncEngine
) -> None:
    await make_task(agent_client, user="alice", title="Buy milk")
    asked = await _ask_to_delete(agent_client, model)
    [held] = asked["pending_approvals"]
    assert held["summary"] == "Delete task 1 “Buy milk”"
    assert (held["name"], held["arguments"], held["tool_call_id"]) == (
        "delete_todo",
        {"todo_id": "1"},
        "call_del",
    )
    assert held["id"].startswith("apr_")
    assert len(held["id"]) > 30
    assert (
        asked["response"] == "Delete task 1 “Buy milk”? Reply yes to go ahead, or no to leave it."
    )
    assert [c["name"] for c in asked["tool_calls"]] == ["delete_todo"]
    assert asked["tool_results"] == []  # nothing ran
    assert await task_titles(agent_client) == ["Buy milk"]
    assert model.requests_count == 1  # the turn ended by asking
    assert [e[0] for e in await events_of(engine)] == ["task.created"]
    # The record keeps the call with a placeholder, so the model sees it asked next time.
    [_, stored] = await stored_messages(agent_client, asked["session_id"])
    assert stored["tool_results"][0]["result"]["status"] == "pending_approval"


async def test_an_approved_call_runs_as_stored_and_the_model_goes_on(
    agent_client: httpx.AsyncClient, model: FakeOpenAI, engine: AsyncEngine
) -> None:
    await make_task(agent_client, user="alice", title="Buy milk")
    await make_task(agent_client, user="alice", title="Keep me")
    asked = await _ask_to_delete(agent_client, model)
    approval = asked["pending_approvals"][0]["id"]
    model.script(reply("Deleted it; it is in the trash if you need it."))
    # A client that sends other arguments along: they are not the stored call's.
    done = await answer(
        agent_client,
        asked["session_id"],
        [{"id": approval, "approved": True, "arguments": {"todo_id": "2"}, "name": "add_todo"}],
    )
    assert done["response"] == "Deleted it; it is in the trash if you need it."
    assert [r["result"]["status"] for r in done["tool_results"]] == ["deleted"]
    assert done["pending_approvals"] == []
    assert await task_titles(agent_client) == ["Keep me"]
    # The model saw the real result in place of the placeholder.
    assert _tool_messages(model)["call_del"]["status"] == "deleted"
    # It goes on from the result: the question was the held turn's reply to the person.
    _assert_continues_from_the_result(model, "call_del")
    # Answered once: a replay is refused and runs nothing.
    again = await answer(
        agent_client, asked["session_id"], [{"id": approval, "approved": True}], expect=409
    )
    assert "already answered" in again["detail"]
    assert [e[0] for e in await events_of(engine)].count("task.deleted") == 1


async def test_a_denied_call_tells_the_model_why_and_changes_nothing(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    await make_task(agent_client, user="alice", title="Buy milk")
    asked = await _ask_to_delete(agent_client, model)
    model.script(reply("OK, I kept it."))
    done = await answer(
        agent_client,
        asked["session_id"],
        [{"id": asked["pending_approvals"][0]["id"], "approved": False, "reason": "still needed"}],
        message="keep it please",
    )
    assert done["response"] == "OK, I kept it."
    denied = _tool_messages(model)["call_del"]
    assert (denied["status"], denied["reason"]) == ("denied", "still needed")
    assert words(model.last_messages()[-1]) == "keep it please"
    assert await task_titles(agent_client) == ["Buy milk"]


async def test_a_plain_yes_approves_a_plain_no_denies_anything_else_denies_and_is_answered(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    for title in ("one", "two", "three"):
        await make_task(agent_client, user="alice", title=title)
    asked = await _ask_to_delete(agent_client, model, "1")
    model.script(reply("Done."))
    await chat(agent_client, "yes", session_id=asked["session_id"])
    assert await task_titles(agent_client) == ["two", "three"]

    asked = await _ask_to_delete(agent_client, model, "2")
    model.script(reply("Kept."))
    await chat(agent_client, "no", session_id=asked["session_id"])
    assert _tool_messages(model)["call_del"]["status"] == "denied"
    assert await task_titles(agent_client) == ["two", "three"]

    asked = await _ask_to_delete(agent_client, model, "3")
    model.script(reply("Here is the weather."))
    await chat(agent_client, "what is the weather like", session_id=asked["session_id"])
    held = _tool_messages(model)["call_del"]
    assert held["status"] == "denied"
    assert "something else" in held["reason"]
    assert words(model.last_messages()[-1]) == "what is the weather like"
    assert await task_titles(agent_client) == ["two", "three"]


async def test_the_rounds_other_calls_run_and_a_call_that_would_fail_is_not_held(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    await make_task(agent_client, user="alice", title="Old")
    model.script(
        tool_calls(
            call("delete_todo", {"todo_id": "1"}),
            call("add_todo", {"title": "New"}),
            call("delete_todo", {"todo_id": "99"}),
            call("list_todos", {}),
        )
    )
    asked = await chat(agent_client, "replace old with new")
    assert [p["summary"] for p in asked["pending_approvals"]] == ["Delete task 1 “Old”"]
    statuses = [r["result"].get("status", "listed") for r in asked["tool_results"]]
    assert statuses == ["created", "error", "listed"]  # the unknown task fails unasked
    assert await task_titles(agent_client) == ["Old", "New"]


async def test_the_users_confirm_setting_decides_what_is_held(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    await agent_client.patch(
        "/api/alice/settings", json={"confirm": "changes"}, headers=auth("alice")
    )
    model.script(tool_calls(call("add_todo", {"title": "New"}), call("list_todos", {})))
    asked = await chat(agent_client, "add new")
    assert [p["summary"] for p in asked["pending_approvals"]] == ["Add task “New”"]
    assert await task_titles(agent_client) == []

    await agent_client.patch(
        "/api/alice/settings", json={"confirm": "never"}, headers=auth("alice")
    )
    gone = await make_task(agent_client, user="alice", title="Gone")
    model.script(tool_calls(call("delete_todo", {"todo_id": str(gone["number"])})), reply("ok"))
    done = await chat(agent_client, "delete it")
    assert done["pending_approvals"] == []
    assert await task_titles(agent_client) == []


async def test_two_answers_at_once_run_the_call_once(
    agent_client: httpx.AsyncClient, model: FakeOpenAI, engine: AsyncEngine
) -> None:
    await make_task(agent_client, user="alice", title="Buy milk")
    asked = await _ask_to_delete(agent_client, model)
    approval = [{"id": asked["pending_approvals"][0]["id"], "approved": True}]
    model.default = reply("Done.")

    async def send() -> int:
        response = await agent_client.post(
            "/api/alice/chat",
            json={"session_id": asked["session_id"], "approvals": approval},
            headers=auth("alice"),
        )
        return response.status_code

    statuses = await asyncio.gather(*(send() for _ in range(4)))
    assert sorted(statuses) == [200, 409, 409, 409]
    assert [e[0] for e in await events_of(engine)].count("task.deleted") == 1
    async with engine.connect() as connection:
        state = await connection.scalar(text("SELECT state FROM approvals"))
    assert state == "approved"


async def test_unknown_expired_and_foreign_approvals_run_nothing(
    make_settings: Any, engine: AsyncEngine, model: FakeOpenAI
) -> None:
    settings = make_settings(
        openai_api_key="sk-test", openai_base_url=model.base_url, agent_approval_ttl_s=0.5
    )
    async with serving(settings) as client:
        await make_task(client, user="alice", title="Alice's")
        await make_task(client, user="bob", title="Bob's")
        alices = await _ask_to_delete(client, model)
        bobs = await _ask_to_delete(client, model, user="bob")
        bob_approval = bobs["pending_approvals"][0]["id"]
        foreign = await answer(
            client, alices["session_id"], [{"id": bob_approval, "approved": True}], expect=404
        )
        assert foreign["detail"] == "No such approval."
        unknown = [{"id": "apr_guessed", "approved": True}]
        await answer(client, alices["session_id"], unknown, expect=409)
        await asyncio.sleep(0.6)
        late = [{"id": alices["pending_approvals"][0]["id"], "approved": True}]
        expired = await answer(client, alices["session_id"], late, expect=409)
        assert "expired" in expired["detail"]
        # An expired call is told to the model as such on the next turn.
        model.script(reply("It expired."))
        await chat(client, "hello again", session_id=alices["session_id"])
        assert _tool_messages(model)["call_del"]["status"] == "expired"
        assert await task_titles(client) == ["Alice's"]
        assert await task_titles(client, user="bob") == ["Bob's"]


async def test_the_stream_asks_with_an_approval_request_before_done(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    await make_task(agent_client, user="alice", title="Buy milk")
    model.script(tool_calls(call("delete_todo", {"todo_id": "1"}, id="call_del")))
    response = await agent_client.post(
        "/api/alice/chat/stream", json={"message": "delete task 1"}, headers=auth("alice")
    )
    events = parse_sse(response.text)
    names = [name for name, _ in events if name]
    assert names[-1] == "done"
    assert "approval_request" in names
    assert "tool_call" not in names  # the call is the request: it has not run
    request = next(data for name, data in events if name == "approval_request")
    done = events[-1][1]
    assert "".join(data["text"] for name, data in events if name == "delta") == done["response"]
    assert done["pending_approvals"] == [request]
    assert request["summary"] == "Delete task 1 “Buy milk”"
    model.script(reply("Gone."))
    resumed = await agent_client.post(
        "/api/alice/chat/stream",
        json={
            "session_id": done["session_id"],
            "approvals": [{"id": request["id"], "approved": True}],
        },
        headers=auth("alice"),
    )
    events = parse_sse(resumed.text)
    results = [data for name, data in events if name == "tool_result"]
    assert [r["result"]["status"] for r in results] == ["deleted"]
    assert events[-1][1]["response"] == "Gone."


async def test_delete_everything_about_the_party_asks_once_and_one_undo_brings_it_back(
    client: httpx.AsyncClient,
) -> None:
    """The issue's scene, with the stub (what `make run` answers with): asked first, a no
    keeps everything, a yes deletes them all, one "undo" brings them all back."""
    titles = ["Buy balloons for the party", "Send party invitations", "Call mom"]
    for title in titles:
        await make_task(client, user="alice", title=title)
    asked = await chat(client, "delete everything about the party")
    assert asked["response"].splitlines() == [
        "I need your OK first:",
        "- Delete task 1 “Buy balloons for the party”",
        "- Delete task 2 “Send party invitations”",
        "Reply yes to go ahead, or no to leave them.",
    ]
    assert len(asked["pending_approvals"]) == 2
    session = asked["session_id"]
    await chat(client, "no", session_id=session)
    assert await task_titles(client) == titles

    await chat(client, "delete everything about the party", session_id=session)
    done = await chat(client, "yes", session_id=session)
    assert done["response"] == (
        "Here is what I did: Deleted task 1: Buy balloons for the party."
        " Deleted task 2: Send party invitations."
    )
    assert await task_titles(client) == ["Call mom"]
    undone = await chat(client, "undo", session_id=session)
    assert undone["response"].startswith("Undone: brought back task 1")
    assert await task_titles(client) == titles


async def test_the_stub_asks_too_and_understands_the_answer(client: httpx.AsyncClient) -> None:
    for title in ("Buy milk", "Call mom"):
        await make_task(client, user="alice", title=title)
    asked = await chat(client, "delete the milk task")
    assert (
        asked["response"] == "Delete task 1 “Buy milk”? Reply yes to go ahead, or no to leave it."
    )
    assert asked["using_stub"] is True
    session = asked["session_id"]
    kept = await chat(client, "no", session_id=session)
    assert "denied" in json.dumps(kept["tool_results"])
    assert await task_titles(client) == ["Buy milk", "Call mom"]

    await chat(client, "delete the milk task", session_id=session)
    done = await chat(client, "go ahead", session_id=session)
    assert done["response"] == "Here is what I did: Deleted task 1: Buy milk."
    assert await task_titles(client) == ["Call mom"]

    await chat(client, "delete the call task", session_id=session)
    moved_on = await chat(client, "show my tasks", session_id=session)
    assert "Call mom" in moved_on["response"]  # answered as itself; the delete was denied
    assert await task_titles(client) == ["Call mom"]
