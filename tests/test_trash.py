"""The trash: every delete moves a task (and its steps) there; restore, purge, retention."""

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.context import AppContext
from tests.conftest import auth, serving
from tests.factories import make_task
from tests.test_events import events_of
from tests.test_mcp import as_alice, structured


async def _tasks(client: httpx.AsyncClient, user: str = "alice", **params: Any) -> Any:
    response = await client.get(f"/api/{user}/tasks", params=params, headers=auth(user))
    assert response.status_code == 200, response.text
    return response.json()


async def _trash(client: httpx.AsyncClient, user: str = "alice", **params: Any) -> Any:
    response = await client.get(f"/api/{user}/trash", params=params, headers=auth(user))
    assert response.status_code == 200, response.text
    return response.json()


async def _delete(client: httpx.AsyncClient, ref: Any, user: str = "alice") -> None:
    response = await client.delete(f"/api/{user}/tasks/{ref}", headers=auth(user))
    assert response.status_code == 204, response.text


async def _restore(
    client: httpx.AsyncClient, ref: Any, user: str = "alice", expect: int = 200
) -> Any:
    response = await client.post(f"/api/{user}/tasks/{ref}/restore", headers=auth(user))
    assert response.status_code == expect, response.text
    return response.json()


async def test_a_deleted_task_leaves_every_list_count_and_lookup_but_keeps_its_number(
    client: httpx.AsyncClient,
) -> None:
    party = await make_task(client, user="alice", title="Plan the party", steps=["cake", "music"])
    await make_task(client, user="alice", title="Buy milk")
    await _delete(client, party["number"])

    assert [t["title"] for t in (await _tasks(client))["data"]] == ["Buy milk"]
    assert (await _tasks(client, q="party"))["count"] == 0
    assert (await _tasks(client, parent=str(party["number"])))["count"] == 0
    gone = await client.get(f"/api/alice/tasks/{party['id']}", headers=auth("alice"))
    assert gone.status_code == 404
    # Numbers are never reused: the next task gets the next one.
    assert (await make_task(client, user="alice", title="Next"))["number"] == 5

    trash = await _trash(client)
    assert [(t["number"], t["title"], t["steps_total"]) for t in trash["data"]] == [
        (1, "Plan the party", 2)
    ]
    assert trash["data"][0]["deleted_at"] is not None
    assert trash["next_cursor"] is None


async def test_a_restored_task_comes_back_with_its_steps_number_and_events(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    party = await make_task(client, user="alice", title="Plan the party", steps=["cake", "music"])
    await _delete(client, party["id"])
    back = await _restore(client, "task 1")
    assert (back["number"], back["title"], back["steps_total"]) == (1, "Plan the party", 2)
    assert [s["number"] for s in back["steps"]] == [2, 3]
    assert (await _trash(client))["data"] == []
    assert (await _tasks(client))["count"] == 3
    events = await events_of(engine)
    assert [e[0] for e in events].count("task.deleted") == 3
    assert sorted(e for e in events if e[0] == "task.restored") == [
        ("task.restored", "Plan the party"),
        ("task.restored", "cake"),
        ("task.restored", "music"),
    ]
    # Restoring what is not in the trash is a conflict; what does not exist is not found.
    await _restore(client, 1, expect=409)
    await _restore(client, 99, expect=404)


async def test_a_step_deleted_alone_comes_back_alone_and_not_while_its_task_is_trashed(
    client: httpx.AsyncClient,
) -> None:
    plan = await make_task(client, user="alice", title="Move house", steps=["van", "boxes"])
    await _delete(client, 2)  # the step "van", alone
    await _delete(client, plan["number"])  # then the task, with "boxes"
    trash = await _trash(client)
    assert [t["title"] for t in trash["data"]] == ["Move house", "van"]
    refused = await _restore(client, 2, expect=409)
    assert "restore task 1" in refused["detail"]
    back = await _restore(client, 1)
    assert [s["title"] for s in back["steps"]] == ["boxes"]  # van was deleted on its own
    again = await _restore(client, 2)
    assert again["parent_id"] == plan["id"]


async def test_the_trash_pages_most_recently_deleted_first(client: httpx.AsyncClient) -> None:
    for title in ("one", "two", "three"):
        task = await make_task(client, user="alice", title=title)
        await _delete(client, task["number"])
    first = await _trash(client, limit=2)
    assert [t["title"] for t in first["data"]] == ["three", "two"]
    rest = await _trash(client, limit=2, cursor=first["next_cursor"])
    assert ([t["title"] for t in rest["data"]], rest["next_cursor"]) == (["one"], None)
    bad = await client.get("/api/alice/trash?cursor=nope", headers=auth("alice"))
    assert bad.status_code == 422


async def test_purging_one_and_emptying_the_trash_delete_for_good(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    kept = await make_task(client, user="alice", title="kept")
    for title in ("a", "b", "c"):
        await make_task(client, user="alice", title=title)
    for number in (2, 3, 4):
        await _delete(client, number)
    purged = await client.delete("/api/alice/trash/2", headers=auth("alice"))
    assert purged.status_code == 204
    live = await client.delete(f"/api/alice/trash/{kept['id']}", headers=auth("alice"))
    assert live.status_code == 409  # not in the trash
    assert (await client.delete("/api/alice/trash/2", headers=auth("alice"))).status_code == 404
    assert [t["title"] for t in (await _trash(client))["data"]] == ["c", "b"]
    emptied = await client.delete("/api/alice/trash", headers=auth("alice"))
    assert emptied.status_code == 204
    assert (await _trash(client))["data"] == []
    async with engine.connect() as connection:
        left = await connection.execute(text("SELECT title FROM tasks WHERE created_by = 'alice'"))
        assert [row[0] for row in left] == ["kept"]
    # Purging tells nothing new: the task was told deleted when it went to the trash.
    assert [e for e in await events_of(engine) if e[0] == "task.deleted"] == [
        ("task.deleted", "a"),
        ("task.deleted", "b"),
        ("task.deleted", "c"),
    ]


async def test_another_users_trash_is_not_found(client: httpx.AsyncClient) -> None:
    task = await make_task(client, user="alice", title="Alice's")
    await _delete(client, task["id"])
    assert (await _trash(client, user="bob"))["data"] == []
    await _restore(client, task["id"], user="bob", expect=404)
    purge = await client.delete(f"/api/bob/trash/{task['id']}", headers=auth("bob"))
    assert purge.status_code == 404
    assert (await client.delete("/api/bob/trash", headers=auth("bob"))).status_code == 204
    assert len((await _trash(client))["data"]) == 1


async def test_a_trashed_tasks_reminder_does_not_fire_and_a_restored_past_one_is_dropped(
    app: FastAPI, client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    context: AppContext = app.state.context
    # Due in an hour, trashed, then made past in the database: on a loaded machine a
    # reminder a second ahead could fire between its task's creation and its deletion.
    hour = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    task = await make_task(client, user="alice", title="Stretch", remind_at=hour)
    later = await make_task(client, user="alice", title="Later", remind_at=hour)
    await _delete(client, task["number"])
    await _delete(client, later["number"])
    async with engine.begin() as connection:
        await connection.execute(text("UPDATE tasks SET remind_at = now() - interval '1 second'"))
    await context.reminders.fire_due()
    assert [e for e in await events_of(engine) if e[0] == "reminder.due"] == []
    back = await _restore(client, task["number"])
    assert back["remind_at"] is None  # it passed while in the trash: not fired late
    async with engine.begin() as connection:  # the other one's time moves ahead meanwhile
        await connection.execute(
            text("UPDATE tasks SET remind_at = now() + interval '1 hour' WHERE title = 'Later'")
        )
    assert (await _restore(client, later["number"]))["remind_at"] is not None


async def test_the_calendar_feed_leaves_out_the_trash(client: httpx.AsyncClient) -> None:
    await make_task(client, user="alice", title="Dentist", due_at="2031-03-01T10:00:00Z")
    await make_task(client, user="alice", title="Gone", due_at="2031-03-02T10:00:00Z")
    await _delete(client, 2)
    url = (await client.post("/api/alice/calendar", headers=auth("alice"))).json()["url"]
    feed = (await client.get(httpx.URL(url).path)).text
    assert "Dentist" in feed
    assert "Gone" not in feed


async def test_the_trash_is_purged_after_its_retention(
    make_settings: Any, engine: AsyncEngine
) -> None:
    async with serving(make_settings(trash_retention_d=1e-6)) as client:  # 0.09 s
        await make_task(client, user="alice", title="old")
        await _delete(client, 1)
        await asyncio.sleep(0.3)
        app = client._transport.app  # type: ignore[attr-defined]
        await app.state.context.upkeep.once(prune=True)
        assert (await _trash(client))["data"] == []


async def test_an_mcp_delete_goes_to_the_trash(app: FastAPI, client: httpx.AsyncClient) -> None:
    await make_task(client, user="alice", title="Buy milk")
    async with as_alice(app) as alice:
        deleted = structured(await alice.call_tool("delete_todo", {"todo_id": "1"}))
        assert deleted["status"] == "deleted"
        listed = structured(await alice.call_tool("list_todos", {"status": "deleted"}))
        assert [t["title"] for t in listed["todos"]] == ["Buy milk"]
        restored = structured(await alice.call_tool("restore_todo", {"todo_id": "1"}))
        assert (restored["status"], restored["todo"]["number"]) == ("restored", 1)
        await alice.call_tool("delete_todo", {"todo_id": "1"})
        purged = structured(await alice.call_tool("purge_trash", {"todo_id": None}))
        assert (purged["status"], purged["count"]) == ("purged", 1)
    assert (await _trash(client))["data"] == []
