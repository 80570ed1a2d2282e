"""The tasks REST API: CRUD, numbering, validation, filters, pagination, tenancy."""

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.conftest import auth
from tests.factories import make_task

pytestmark = pytest.mark.asyncio


async def test_create_then_get_list_update_complete_delete(client: httpx.AsyncClient) -> None:
    created = await make_task(
        client, user="alice", title="  Buy groceries ", description="milk", tags=["#Home", "home"]
    )
    assert created["number"] == 1
    assert created["title"] == "Buy groceries"
    assert created["tags"] == ["home"]
    assert created["priority"] == "none"
    assert created["completed"] is False
    assert created["created_at"] == created["updated_at"]

    got = await client.get(f"/api/alice/tasks/{created['id']}", headers=auth("alice"))
    assert got.json() == created
    by_number = await client.get("/api/alice/tasks/1", headers=auth("alice"))
    assert by_number.json()["id"] == created["id"]

    patched = await client.patch(
        "/api/alice/tasks/1", json={"priority": "high", "description": None}, headers=auth("alice")
    )
    assert patched.status_code == 200
    assert patched.json()["priority"] == "high"
    assert patched.json()["description"] is None
    assert patched.json()["title"] == "Buy groceries"

    done = await client.patch(
        "/api/alice/tasks/1/complete", json={"completed": True}, headers=auth("alice")
    )
    assert done.json()["completed"] is True
    assert done.json()["completed_at"] is not None

    deleted = await client.delete(f"/api/alice/tasks/{created['id']}", headers=auth("alice"))
    assert deleted.status_code == 204
    missing = await client.get(f"/api/alice/tasks/{created['id']}", headers=auth("alice"))
    assert missing.status_code == 404
    assert missing.json() == {"detail": "Task not found."}


async def test_complete_without_body_toggles(client: httpx.AsyncClient) -> None:
    await make_task(client, user="alice")
    first = await client.patch("/api/alice/tasks/1/complete", headers=auth("alice"))
    second = await client.patch("/api/alice/tasks/1/complete", headers=auth("alice"))
    assert first.json()["completed"] is True
    assert second.json()["completed"] is False
    assert second.json()["completed_at"] is None


async def test_put_is_accepted_like_patch(client: httpx.AsyncClient) -> None:
    await make_task(client, user="alice", title="Old")
    response = await client.put(
        "/api/alice/tasks/1", json={"title": "New", "completed": True}, headers=auth("alice")
    )
    assert response.status_code == 200
    assert response.json()["title"] == "New"
    assert response.json()["completed"] is True


async def test_numbers_are_per_user_and_never_reused(client: httpx.AsyncClient) -> None:
    first = await make_task(client, user="alice")
    await make_task(client, user="alice")
    await client.delete(f"/api/alice/tasks/{first['id']}", headers=auth("alice"))
    third = await make_task(client, user="alice")
    bobs = await make_task(client, user="bob")
    assert third["number"] == 3
    assert bobs["number"] == 1


async def test_twenty_concurrent_creates_get_distinct_numbers(client: httpx.AsyncClient) -> None:
    await make_task(client, user="alice")  # the user exists; now race on the counter
    created = await asyncio.gather(
        *(make_task(client, user="alice", title=f"t{i}") for i in range(20))
    )
    assert sorted(task["number"] for task in created) == list(range(2, 22))


async def test_twenty_concurrent_creates_by_a_new_user(client: httpx.AsyncClient) -> None:
    created = await asyncio.gather(
        *(make_task(client, user="newcomer", title=f"t{i}") for i in range(20))
    )
    assert sorted(task["number"] for task in created) == list(range(1, 21))


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"title": ""},
        {"title": "   "},
        {"title": "x" * 201},
        {"title": 5},
        {"title": "ok", "description": "x" * 2001},
        {"title": "ok", "priority": "urgent"},
        {"title": "ok", "tags": ["x"] * 11},
        {"title": "ok", "tags": ["x" * 33]},
        {"title": "ok", "tags": [""]},
        {"title": "ok", "tags": "home"},
        {"title": "ok", "due_at": "next tuesday"},
        {"title": "ok", "due_at": "2026-13-01"},
        {"title": "ok", "due_at": "0001-01-01T00:00:00+14:00"},
        {"title": "ok", "due_at": "9999-12-31"},
        {"title": "bad\u0000byte"},
        ["not", "an", "object"],
    ],
)
async def test_invalid_task_is_422(client: httpx.AsyncClient, body: Any) -> None:
    response = await client.post("/api/alice/tasks", json=body, headers=auth("alice"))
    assert response.status_code == 422
    assert response.json()["detail"]


async def test_malformed_json_is_422(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/api/alice/tasks",
        content=b'{"title": ',
        headers={**auth("alice"), "Content-Type": "application/json"},
    )
    assert response.status_code == 422


@pytest.mark.parametrize("body", [{"title": None}, {"completed": None}, {"priority": None}])
async def test_update_cannot_null_required_fields(client: httpx.AsyncClient, body: Any) -> None:
    await make_task(client, user="alice")
    response = await client.patch("/api/alice/tasks/1", json=body, headers=auth("alice"))
    assert response.status_code == 422


@pytest.mark.parametrize("task_id", ["abc", "0", "99", "00000000-0000-0000-0000-000000000000"])
async def test_unknown_task_ids_are_404(client: httpx.AsyncClient, task_id: str) -> None:
    await make_task(client, user="alice")
    response = await client.get(f"/api/alice/tasks/{task_id}", headers=auth("alice"))
    assert response.status_code == 404


async def test_date_only_due_is_end_of_that_day_in_the_users_zone(
    client: httpx.AsyncClient,
) -> None:
    task = await make_task(client, user="alice", due_at="2026-11-22")
    assert task["due_at"] == "2026-11-22T23:59:59Z"
    aware = await make_task(client, user="alice", due_at="2026-11-22T10:00:00+01:00")
    assert aware["due_at"] == "2026-11-22T09:00:00Z"


async def test_filters(client: httpx.AsyncClient) -> None:
    now = datetime.now(UTC)
    await make_task(client, user="alice", title="Pay bills", priority="high", tags=["money"])
    await make_task(
        client, user="alice", title="Overdue report", due_at=(now - timedelta(days=2)).isoformat()
    )
    await make_task(
        client, user="alice", title="Soon", due_at=(now + timedelta(hours=1)).isoformat()
    )
    await make_task(
        client,
        user="alice",
        title="Later",
        description="bills too",
        due_at=(now + timedelta(days=30)).isoformat(),
    )
    await client.patch("/api/alice/tasks/1/complete", headers=auth("alice"))

    async def titles(**params: Any) -> list[str]:
        response = await client.get("/api/alice/tasks", params=params, headers=auth("alice"))
        assert response.status_code == 200, response.text
        return [task["title"] for task in response.json()["data"]]

    assert await titles() == ["Pay bills", "Overdue report", "Soon", "Later"]
    assert await titles(status="completed") == ["Pay bills"]
    assert await titles(status="pending") == ["Overdue report", "Soon", "Later"]
    assert await titles(q="BILLS") == ["Pay bills", "Later"]
    assert await titles(q="%") == []
    assert await titles(priority="high") == ["Pay bills"]
    assert await titles(priority="none") == ["Overdue report", "Soon", "Later"]
    assert await titles(priority="medium") == []
    assert await titles(tag="Money") == ["Pay bills"]
    assert await titles(due="overdue") == ["Overdue report"]
    assert "Later" not in await titles(due="week")
    assert "Soon" in await titles(due="week")


@pytest.mark.parametrize(
    "params",
    [{"status": "done"}, {"due": "soon"}, {"limit": 0}, {"limit": 101}, {"offset": -1}],
)
async def test_bad_filters_are_422(client: httpx.AsyncClient, params: dict[str, Any]) -> None:
    response = await client.get("/api/alice/tasks", params=params, headers=auth("alice"))
    assert response.status_code == 422


async def test_pagination_reports_the_total(client: httpx.AsyncClient) -> None:
    for i in range(7):
        await make_task(client, user="alice", title=f"t{i}")
    pages = []
    for offset in (0, 3, 6, 9):
        response = await client.get(
            "/api/alice/tasks", params={"limit": 3, "offset": offset}, headers=auth("alice")
        )
        pages.append(response.json())
    assert [page["count"] for page in pages] == [7, 7, 7, 7]
    assert [[t["number"] for t in page["data"]] for page in pages] == [
        [1, 2, 3],
        [4, 5, 6],
        [7],
        [],
    ]


async def test_another_users_tasks_are_not_found_and_unchanged(
    client: httpx.AsyncClient,
) -> None:
    bobs = await make_task(client, user="bob", title="Bob's secret")
    mallory = auth("mallory")
    for ref in (bobs["id"], "1"):
        base = f"/api/mallory/tasks/{ref}"
        attempts = [
            await client.get(base, headers=mallory),
            await client.patch(base, json={"title": "pwned"}, headers=mallory),
            await client.put(base, json={"title": "pwned"}, headers=mallory),
            await client.patch(f"{base}/complete", headers=mallory),
            await client.patch(f"{base}/complete", json={"completed": True}, headers=mallory),
            await client.delete(base, headers=mallory),
        ]
        assert [r.status_code for r in attempts] == [404] * 6
        assert all(r.json() == {"detail": "Task not found."} for r in attempts)
    listing = await client.get("/api/mallory/tasks", headers=mallory)
    assert listing.json() == {"data": [], "count": 0}
    unchanged = await client.get(f"/api/bob/tasks/{bobs['id']}", headers=auth("bob"))
    assert unchanged.json() == bobs


async def test_path_user_must_be_the_token_user(client: httpx.AsyncClient) -> None:
    await make_task(client, user="bob")
    for method, path in [
        ("GET", "/api/bob/tasks"),
        ("POST", "/api/bob/tasks"),
        ("GET", "/api/bob/tasks/1"),
        ("DELETE", "/api/bob/tasks/1"),
    ]:
        response = await client.request(method, path, json={"title": "x"}, headers=auth("mallory"))
        assert response.status_code == 403, (method, path)


async def test_user_ids_are_opaque_strings(client: httpx.AsyncClient) -> None:
    user = "usr_01HZX8Q9-better.auth|id"
    response = await client.post(f"/api/{user}/tasks", json={"title": "hello"}, headers=auth(user))
    assert response.status_code == 201
