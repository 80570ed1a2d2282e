"""Undo after: a chat turn's changes are taken back whole, from what was recorded when it
ran; a task changed since blocks it (409, nothing undone); again, the turn before."""

from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.chat_helpers import chat, task_titles
from tests.conftest import auth
from tests.factories import make_task
from tests.fake_openai import FakeOpenAI, call, reply, tool_calls
from tests.test_events import events_of


async def _undo(
    client: httpx.AsyncClient, session_id: str, *, user: str = "alice", expect: int = 200
) -> Any:
    response = await client.post(f"/api/{user}/sessions/{session_id}/undo", headers=auth(user))
    assert response.status_code == expect, response.text
    return response.json()


async def _task(client: httpx.AsyncClient, ref: Any, user: str = "alice") -> Any:
    response = await client.get(f"/api/{user}/tasks/{ref}", headers=auth(user))
    return response.json() if response.status_code == 200 else None


async def test_undo_takes_back_a_turn_that_added_changed_completed_a_repeating_task_and_deleted(
    agent_client: httpx.AsyncClient, model: FakeOpenAI, engine: AsyncEngine
) -> None:
    await agent_client.patch(
        "/api/alice/settings", json={"confirm": "never"}, headers=auth("alice")
    )
    weekly = await make_task(
        agent_client, user="alice", title="Bins", due_at="2030-01-07T08:00:00Z",
        recurrence="FREQ=WEEKLY",
    )  # fmt: skip
    rename = await make_task(agent_client, user="alice", title="Call mom", priority="low")
    doomed = await make_task(agent_client, user="alice", title="Party", steps=["cake", "music"])
    model.script(
        tool_calls(
            call("add_todo", {"title": "Buy milk"}),
            call("update_todo", {"todo_id": "2", "title": "Call dad", "priority": "high"}),
            call("complete_todo", {"todo_id": "1"}),
            call("delete_todo", {"todo_id": str(doomed["number"])}),
        ),
        reply("All done."),
    )
    turn = await chat(agent_client, "do all the things")
    next_one = turn["tool_results"][2]["result"]["next_todo"]
    assert await task_titles(agent_client) == ["Bins", "Call dad", "Buy milk", "Bins"]
    before = len(await events_of(engine))

    undone = await _undo(agent_client, turn["session_id"])
    assert undone["message_id"] == turn["message_id"]
    actions = {(c["number"], c["title"], c["action"]) for c in undone["changes"]}
    assert actions == {
        (6, "Buy milk", "removed"),
        (2, "Call mom", "reverted"),
        (1, "Bins", "reopened"),
        (next_one["number"], "Bins", "removed"),
        (3, "Party", "restored"),
        (4, "cake", "restored"),
        (5, "music", "restored"),
    }
    assert undone["summary"].startswith("Undone: ")
    assert await task_titles(agent_client) == ["Bins", "Call mom", "Party", "cake", "music"]
    assert (await _task(agent_client, rename["id"]))["priority"] == "low"
    bins = await _task(agent_client, weekly["id"])
    assert (bins["completed"], bins["due_at"]) == (False, weekly["due_at"])
    # Each change back is an ordinary event.
    kinds = [kind for kind, _ in (await events_of(engine))[before:]]
    assert sorted(kinds) == sorted(
        ["task.deleted", "task.deleted", "task.updated", "task.reopened"] + ["task.restored"] * 3
    )
    # The occurrence can have its next one again.
    completed = await agent_client.patch(
        f"/api/alice/tasks/{weekly['id']}/complete", json={"completed": True}, headers=auth("alice")
    )
    assert completed.json()["next"] is not None
    # Nothing left to undo.
    assert (
        "Nothing to undo" in (await _undo(agent_client, turn["session_id"], expect=409))["detail"]
    )


async def test_a_task_changed_since_blocks_the_undo_and_nothing_is_undone(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    await make_task(agent_client, user="alice", title="Call mom")
    model.script(
        tool_calls(
            call("add_todo", {"title": "Buy milk"}),
            call("update_todo", {"todo_id": "1", "title": "Call dad"}),
        ),
        reply("Done."),
    )
    turn = await chat(agent_client, "add milk, and it's dad")
    await agent_client.patch("/api/alice/tasks/1", json={"priority": "high"}, headers=auth("alice"))
    refused = await _undo(agent_client, turn["session_id"], expect=409)
    assert refused["detail"].startswith("Task 1 “Call dad” has changed since")
    assert await task_titles(agent_client) == ["Call dad", "Buy milk"]
    # Changed back by hand, it no longer stands in the way.
    await agent_client.patch("/api/alice/tasks/1", json={"priority": "none"}, headers=auth("alice"))
    await _undo(agent_client, turn["session_id"])
    assert await task_titles(agent_client) == ["Call mom"]


async def test_undo_walks_back_turn_by_turn_and_only_turns_that_changed_something(
    client: httpx.AsyncClient,
) -> None:
    first = await chat(client, "add buy milk")
    session = first["session_id"]
    await chat(client, "add call mom", session_id=session)
    await chat(client, "show my tasks", session_id=session)  # changes nothing
    await chat(client, "task 1 is done", session_id=session)
    assert [c["action"] for c in (await _undo(client, session))["changes"]] == ["reopened"]
    assert [c["title"] for c in (await _undo(client, session))["changes"]] == ["Call mom"]
    assert await task_titles(client) == ["Buy milk"]
    # "undo" in the conversation does the same, and says what it did.
    said = await chat(client, "undo", session_id=session)
    assert said["response"] == "Undone: removed task 1 “Buy milk” (to the trash)."
    assert await task_titles(client) == []
    again = await chat(client, "undo that", session_id=session)
    assert "Nothing to undo" in again["response"]


async def test_the_models_undo_tool_undoes_the_turn_before(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    model.script(tool_calls(call("add_todo", {"title": "Buy milk"})), reply("Added."))
    first = await chat(agent_client, "add milk")
    model.script(
        tool_calls(call("add_todo", {"title": "Buy eggs"}), call("undo_last_turn", {})),
        reply("Undone."),
    )
    second = await chat(agent_client, "add eggs and undo the milk", session_id=first["session_id"])
    undone = second["tool_results"][1]["result"]
    assert (undone["status"], [c["title"] for c in undone["changes"]]) == ("undone", ["Buy milk"])
    assert await task_titles(agent_client) == ["Buy eggs"]


async def test_one_undo_brings_back_what_a_yes_deleted(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    for title in ("party hats", "party music", "groceries"):
        await make_task(agent_client, user="alice", title=title)
    model.script(
        tool_calls(call("delete_todo", {"todo_id": "1"}), call("delete_todo", {"todo_id": "2"}))
    )
    asked = await chat(agent_client, "delete everything about the party")
    assert len(asked["pending_approvals"]) == 2
    model.script(reply("Deleted both."))
    await chat(agent_client, "yes", session_id=asked["session_id"])
    assert await task_titles(agent_client) == ["groceries"]
    undone = await _undo(agent_client, asked["session_id"])
    assert {c["title"] for c in undone["changes"]} == {"party hats", "party music"}
    assert await task_titles(agent_client) == ["party hats", "party music", "groceries"]


async def test_another_users_session_has_nothing_to_undo_here(client: httpx.AsyncClient) -> None:
    first = await chat(client, "add buy milk")
    await _undo(client, first["session_id"], user="bob", expect=404)
    assert await task_titles(client) == ["Buy milk"]


async def test_a_turn_that_only_purged_is_no_turn_to_undo_and_does_not_block_earlier_ones(
    client: httpx.AsyncClient,
) -> None:
    await client.patch("/api/alice/settings", json={"confirm": "never"}, headers=auth("alice"))
    old = await make_task(client, user="alice", title="Old thing")
    await client.delete(f"/api/alice/tasks/{old['id']}", headers=auth("alice"))
    first = await chat(client, "add buy milk")
    session = first["session_id"]
    emptied = await chat(client, "empty the trash", session_id=session)
    assert emptied["response"] == "Emptied the trash: 1 task deleted for good."
    undone = await _undo(client, session)  # the turn before: the purge cannot come back
    assert [c["title"] for c in undone["changes"]] == ["Buy milk"]
    assert await task_titles(client) == []
