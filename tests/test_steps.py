"""Plans: a task broken into steps, by the API and by the model's tool calls."""

import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.chat_helpers import chat
from tests.conftest import auth
from tests.factories import make_task
from tests.fake_openai import FakeOpenAI, call, reply, tool_calls


async def _get(client: httpx.AsyncClient, ref: str | int, *, user: str = "alice") -> Any:
    response = await client.get(f"/api/{user}/tasks/{ref}", headers=auth(user))
    assert response.status_code == 200, response.text
    return response.json()


async def _list(client: httpx.AsyncClient, *, user: str = "alice", **params: Any) -> Any:
    response = await client.get(f"/api/{user}/tasks", params=params, headers=auth(user))
    assert response.status_code == 200, response.text
    return response.json()


async def _complete(client: httpx.AsyncClient, ref: str | int, *, user: str = "alice") -> Any:
    response = await client.patch(
        f"/api/{user}/tasks/{ref}/complete", json={"completed": True}, headers=auth(user)
    )
    assert response.status_code == 200, response.text
    return response.json()


async def test_a_task_created_with_steps_reads_back_with_them_in_order(
    client: httpx.AsyncClient,
) -> None:
    move = await make_task(client, user="alice", title="Move flat", steps=["Pack", "Van", "Keys"])
    assert (move["number"], move["parent_id"], move["steps_total"], move["steps_done"]) == (
        1,
        None,
        3,
        0,
    )
    assert [(s["number"], s["title"]) for s in move["steps"]] == [
        (2, "Pack"),
        (3, "Van"),
        (4, "Keys"),
    ]
    assert {s["parent_id"] for s in move["steps"]} == {move["id"]}

    alone = await _get(client, 1)
    assert [s["title"] for s in alone["steps"]] == ["Pack", "Van", "Keys"]
    assert (alone["steps_done"], alone["steps_total"]) == (0, 3)
    # A step read alone has no steps of its own.
    assert (await _get(client, 2))["steps"] == []


async def test_a_step_is_added_under_its_parent_by_uuid_or_number(
    client: httpx.AsyncClient,
) -> None:
    taxes = await make_task(client, user="alice", title="Tax return")
    by_id = await make_task(client, user="alice", title="Find receipts", parent_id=taxes["id"])
    by_number = await make_task(client, user="alice", title="File it", parent_id=1)
    assert by_id["parent_id"] == by_number["parent_id"] == taxes["id"]
    assert [s["title"] for s in (await _get(client, taxes["id"]))["steps"]] == [
        "Find receipts",
        "File it",
    ]


async def test_the_list_shows_progress_and_filters_by_parent_and_top_level(
    client: httpx.AsyncClient,
) -> None:
    await make_task(client, user="alice", title="Move flat", steps=["Pack", "Van"])
    await make_task(client, user="alice", title="Call mom")
    await _complete(client, 2)

    everything = await _list(client)
    assert [(t["title"], t["steps_done"], t["steps_total"]) for t in everything["data"]] == [
        ("Move flat", 1, 2),
        ("Pack", 0, 0),
        ("Van", 0, 0),
        ("Call mom", 0, 0),
    ]
    top = await _list(client, top_level="true")
    assert [t["title"] for t in top["data"]] == ["Move flat", "Call mom"]
    assert top["count"] == 2
    steps = await _list(client, parent="1")
    assert [t["title"] for t in steps["data"]] == ["Pack", "Van"]
    assert [t["title"] for t in (await _list(client, parent="#1", status="pending"))["data"]] == [
        "Van"
    ]


async def test_a_foreign_or_missing_parent_is_not_found_and_creates_nothing(
    client: httpx.AsyncClient,
) -> None:
    bobs = await make_task(client, user="bob", title="Bob's plan")
    await make_task(client, user="alice", title="Alice's own")
    for parent in (bobs["id"], str(uuid.uuid4()), 7):
        response = await client.post(
            "/api/alice/tasks",
            json={"title": "Sneaky step", "parent_id": parent},
            headers=auth("alice"),
        )
        assert response.status_code == 404, response.text
        assert response.json() == {"detail": "Parent task not found."}
    assert [t["title"] for t in (await _list(client))["data"]] == ["Alice's own"]
    # Nothing was created, not even a number was spent.
    assert (await make_task(client, user="alice", title="Next"))["number"] == 2
    # Another user's task as a list filter matches nothing, like a missing one.
    assert (await _list(client, parent=bobs["id"]))["data"] == []
    assert (await _get(client, bobs["id"], user="bob"))["steps"] == []


async def test_a_step_cannot_have_steps(client: httpx.AsyncClient) -> None:
    await make_task(client, user="alice", title="Plan", steps=["Step"])
    response = await client.post(
        "/api/alice/tasks", json={"title": "Sub-step", "parent_id": 2}, headers=auth("alice")
    )
    assert response.status_code == 422
    assert response.json()["detail"] == "Task 2 is a step; a step cannot have steps."
    response = await client.post(
        "/api/alice/tasks",
        json={"title": "Both", "parent_id": 1, "steps": ["x"]},
        headers=auth("alice"),
    )
    assert response.status_code == 422
    assert "not both" in response.json()["detail"]
    assert (await _list(client))["count"] == 2


async def test_the_database_keeps_steps_one_level_deep_and_in_their_list(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    plan = await make_task(client, user="alice", title="Plan", steps=["Step"])
    bobs = await make_task(client, user="bob", title="Bob's")
    insert = text(
        "INSERT INTO tasks (id, list_id, created_by, title, parent_id) "
        "VALUES (gen_random_uuid(), :list, 'alice', 'x', :parent)"
    )
    inbox = plan["list_id"]
    for parent in (plan["steps"][0]["id"], bobs["id"]):
        with pytest.raises(IntegrityError):
            async with engine.begin() as connection:
                await connection.execute(insert, {"list": inbox, "parent": parent})


async def test_completing_steps_and_parents_is_independent(client: httpx.AsyncClient) -> None:
    await make_task(client, user="alice", title="Plan", steps=["One", "Two"])
    await _complete(client, 2)
    last = await _complete(client, 3)
    assert last["completed"] is True
    parent = await _get(client, 1)
    assert parent["completed"] is False  # the last step does not complete the plan
    assert (parent["steps_done"], parent["steps_total"]) == (2, 2)

    await make_task(client, user="alice", title="Other", steps=["Open step"])
    done = await _complete(client, 4)
    assert (done["completed"], done["steps_done"], done["steps_total"]) == (True, 0, 1)
    assert (await _get(client, 5))["completed"] is False


async def test_deleting_a_task_deletes_its_steps(client: httpx.AsyncClient) -> None:
    await make_task(client, user="alice", title="Plan", steps=["One", "Two"])
    await make_task(client, user="alice", title="Keep")
    response = await client.delete("/api/alice/tasks/1", headers=auth("alice"))
    assert response.status_code == 204
    assert [t["title"] for t in (await _list(client))["data"]] == ["Keep"]


# -- through the model's tool calls -------------------------------------------------------


async def test_the_model_plans_a_task_with_its_steps_in_one_call(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    steps = ["Book movers", "Pack the kitchen", "Hand over keys"]
    model.script(
        tool_calls(call("add_todo", {"title": "Move flat", "steps": steps})),
        reply("Planned task 1 with 3 steps."),
    )
    answer = await chat(agent_client, "Help me plan the move")
    [result] = [r["result"] for r in answer["tool_results"]]
    assert result["status"] == "created"
    todo = result["todo"]
    assert (todo["number"], todo["steps_done"], todo["steps_total"]) == (1, 0, 3)
    assert [(s["number"], s["title"]) for s in todo["steps"]] == [
        (2, "Book movers"),
        (3, "Pack the kitchen"),
        (4, "Hand over keys"),
    ]
    assert [s["title"] for s in (await _get(agent_client, 1))["steps"]] == steps
    # The service told the model how to plan, before anything about this user.
    rules = model.last_messages()[0]["content"]
    assert "add_todo(title, steps)" in rules


async def test_the_model_adds_lists_and_ticks_off_steps(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    await make_task(agent_client, user="alice", title="Taxes", steps=["Receipts"])
    model.script(
        tool_calls(
            call("add_todo", {"title": "File", "parent": "#1"}),
            call("list_todos", {"parent": "1"}),
            call("complete_todo", {"todo_id": "2"}),
            call("complete_todo", {"todo_id": "3"}),
        ),
        reply("Done."),
    )
    answer = await chat(agent_client, "Add a step 'File' to taxes, then tick both steps")
    added, listed, first, last = (r["result"] for r in answer["tool_results"])
    assert added["todo"]["parent_id"] == (await _get(agent_client, 1))["id"]
    assert [t["title"] for t in listed["todos"]] == ["Receipts", "File"]
    assert "note" not in first
    assert "last open step of task 1" in last["note"]
    assert (await _get(agent_client, 1))["completed"] is False


async def test_completing_a_plan_with_open_steps_is_allowed_and_says_so(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    await make_task(agent_client, user="alice", title="Taxes", steps=["A", "B", "C"])
    model.script(tool_calls(call("complete_todo", {"todo_id": "1"})), reply("Done."))
    answer = await chat(agent_client, "Taxes are done")
    [result] = [r["result"] for r in answer["tool_results"]]
    assert result["status"] == "completed"
    assert result["note"] == "Task 1 is completed, but 3 of its 3 steps are still open."


async def test_a_foreign_parent_in_a_tool_call_is_not_found_and_creates_nothing(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    bobs = await make_task(agent_client, user="bob", title="Bob's plan")
    await make_task(agent_client, user="alice", title="Plan", steps=["Step"])
    model.script(
        tool_calls(
            call("add_todo", {"title": "Into bob's", "parent": bobs["id"]}),
            call("add_todo", {"title": "Step of a step", "parent": "2"}),
            call("add_todo", {"title": "Both", "parent": "1", "steps": ["x"]}),
            call("add_todo", {"title": "Too many", "steps": [f"s{i}" for i in range(21)]}),
        ),
        reply("Could not."),
    )
    answer = await chat(agent_client, "try")
    errors = [r["result"] for r in answer["tool_results"]]
    assert [e["status"] for e in errors] == ["error"] * 4
    assert errors[0]["error"] == f"Parent task not found. No task {bobs['id']!r}."
    assert "step" in errors[1]["error"]
    assert (await _list(agent_client))["count"] == 2
    assert (await _get(agent_client, bobs["id"], user="bob"))["steps_total"] == 0
