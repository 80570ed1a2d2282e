"""POST /api/{user_id}/import: an export brought into an account, as new rows in one
transaction; what a person sees after a round trip is what they saw before; a document
that is not one, or only half one, imports nothing."""

import copy
import json
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.context import AppContext
from backend.settings import Settings
from tests.accounts import furnish
from tests.conftest import auth, serving
from tests.test_export import export_of


async def import_into(client: httpx.AsyncClient, user: str, document: Any) -> httpx.Response:
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    return await client.post(
        f"/api/{user}/import",
        content=body,
        headers={**auth(user), "content-type": "application/json"},
    )


async def _get(client: httpx.AsyncClient, user: str, path: str) -> Any:
    response = await client.get(f"/api/{user}{path}", headers=auth(user))
    assert response.status_code == 200, response.text
    return response.json()


_TASK_SEEN = ("title", "description", "completed", "due_at", "priority", "tags", "recurrence",
              "recurrence_text", "remind_at", "steps_done", "steps_total")  # fmt: skip


async def what_a_person_sees(client: httpx.AsyncClient, user: str) -> dict[str, Any]:
    """The account as the page shows it, without ids and numbers: lists, tasks (with the
    list and parent they are in), the trash, the sessions and their messages."""
    lists = (await _get(client, user, "/lists"))["data"]
    list_names = {item["id"]: item["name"] for item in lists}
    tasks = (await _get(client, user, "/tasks?status=all&limit=100"))["data"]
    by_id = {task["id"]: task for task in tasks}
    trash = (await _get(client, user, "/trash?limit=100"))["data"]
    sessions = (await _get(client, user, "/sessions"))["data"]
    conversations = []
    for session in sessions:
        messages = (await _get(client, user, f"/sessions/{session['id']}/messages"))["data"]
        conversations.append(
            (
                session["title"],
                session["usage"],
                [
                    (m["role"], m["content"], m["tool_calls"], _without_ids(m["tool_results"]))
                    for m in messages
                ],
            )
        )
    settings = await _get(client, user, "/settings")
    documents = [
        await _get(client, user, f"/documents/{item['id']}")
        for item in (await _get(client, user, "/documents"))["data"]
    ]
    return {
        "documents": sorted(
            (
                list_names[item["list_id"]],
                item["title"],
                item["media_type"],
                item["text"],
                item["passages"],
                item["created_at"],
            )
            for item in documents
            if item["created_by"] == user
        ),
        "lists": sorted(
            (item["name"], item["inbox"], item["pending_count"])
            for item in lists
            if item["role"] == "owner"
        ),
        "tasks": sorted(
            (
                list_names[task["list_id"]],
                by_id[task["parent_id"]]["title"] if task["parent_id"] else "",
                *(json.dumps(task[key]) for key in _TASK_SEEN),
            )
            for task in tasks
        ),
        "trash": sorted((task["title"], task["deleted_at"]) for task in trash),
        "sessions": conversations,
        "settings": {key: settings[key] for key in ("display_name", "timezone", "instructions")},
    }


def _without_ids(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool results with the ids of held calls left out (an import gives them new ones)."""
    records = copy.deepcopy(records)
    for record in records:
        for key, field in (("result", "approval_id"), ("approval", "id")):
            if isinstance(record.get(key), dict):
                record[key].pop(field, None)
    return records


async def test_a_round_trip_into_a_fresh_account_shows_what_the_person_saw(
    client: httpx.AsyncClient,
) -> None:
    await furnish(client, user="ada", friend="bo")
    document = await export_of(client, "ada")
    response = await import_into(client, "ada2", document)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "lists": 2, "tasks": 8, "documents": 1, "sessions": 1, "messages": 4, "memories": 0
    }  # fmt: skip

    before, after = (
        await what_a_person_sees(client, "ada"),
        await what_a_person_sees(client, "ada2"),
    )
    # What the first account sees of the list shared with it stays there: membership
    # comes by invitation only.
    shared = ("Friend plans",)
    before["tasks"] = [task for task in before["tasks"] if task[0] not in shared]
    before["documents"] = [item for item in before["documents"] if item[0] not in shared]
    assert after == before
    # Its documents are cut into passages again, and found.
    found = await _get(client, "ada2", "/documents/search?q=passport")
    assert [(hit["title"], hit["heading"]) for hit in found["data"]] == [
        ("Packing list", "Packing \u203a Papers")
    ]
    # The same document again, but for the ids and numbers it was given.
    again = await export_of(client, "ada2")
    assert _comparable(again) == _comparable(document, leave_out_shared=True)
    # In the document's order: numbers follow it.
    assert [t["number"] for t in again["tasks"]] == sorted(t["number"] for t in again["tasks"])
    assert [t["title"] for t in again["tasks"]] == [t["title"] for t in document["tasks"]]


def _comparable(document: dict[str, Any], *, leave_out_shared: bool = False) -> Any:
    """The document without what an import renews (ids, numbers, the user's own record)."""
    renewed = {"id", "list_id", "number", "series_id", "previous_id", "message_id", "task_id",
               "exported_at", "approval_id", "joined_at"}  # fmt: skip

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in renewed}
        if isinstance(value, list):
            return [strip(item) for item in value]
        return value

    lists = [
        # The Inbox is the account's own, made when it was.
        {k: v for k, v in item.items() if not (item.get("inbox") and k.endswith("_at"))}
        for item in document["lists"]
        if item["role"] == "owner" or not leave_out_shared
    ]
    sessions = [
        {
            **session,
            "approvals": [
                {**approval, "state": "expired", "expires_at": None}
                for approval in session["approvals"]
            ],
            "changes": [],
        }
        for session in document["sessions"]
    ]
    return strip({**document, "user": None, "lists": lists, "sessions": sessions})


async def test_an_import_adds_to_an_account_beside_what_it_has(
    client: httpx.AsyncClient,
) -> None:
    await furnish(client, user="ada", friend="bo")
    document = await export_of(client, "ada")
    await client.post("/api/cy/lists", json={"name": "groceries"}, headers=auth("cy"))
    await client.post("/api/cy/tasks", json={"title": "Cy's own"}, headers=auth("cy"))
    assert (await import_into(client, "cy", document)).status_code == 200
    assert (await import_into(client, "cy", document)).status_code == 200  # twice: twice
    names = sorted(item["name"] for item in (await _get(client, "cy", "/lists"))["data"])
    assert names == ["Groceries (2)", "Groceries (3)", "Inbox", "groceries"]
    tasks = (await _get(client, "cy", "/tasks?status=all&limit=100"))["data"]
    trash = (await _get(client, "cy", "/trash?limit=100"))["data"]
    assert sorted(task["number"] for task in tasks + trash) == list(range(1, 18))
    assert [task["title"] for task in tasks if task["number"] == 1] == ["Cy's own"]
    sessions = (await _get(client, "cy", "/sessions"))["data"]
    assert len(sessions) == 2


def _message(content: str) -> dict[str, Any]:
    return {
        "id": str(uuid.uuid4()),
        "role": "user",
        "content": content,
        "created_at": "2030-01-01T09:00:00Z",
    }


def _document(**changes: Any) -> dict[str, Any]:
    inbox, work = str(uuid.uuid4()), str(uuid.uuid4())
    document: dict[str, Any] = {
        "format": "todo-agent-export/1",
        "user": {"id": "someone", "timezone": "UTC"},
        "lists": [
            {"id": inbox, "name": "Inbox", "role": "owner", "inbox": True},
            {"id": work, "name": "Work", "role": "owner"},
        ],
        "tasks": [
            {
                "id": str(uuid.uuid4()),
                "list_id": work,
                "title": "Ship it",
                "steps": [{"id": str(uuid.uuid4()), "title": "Test it"}],
            },
        ],
        "sessions": [
            {
                "id": str(uuid.uuid4()),
                "title": "Planning",
                "messages": [_message("Plan my week")],
            }
        ],
    }
    document.update(changes)
    return document


def _half_valid() -> list[tuple[str, dict[str, Any]]]:
    elsewhere = _document()
    elsewhere["tasks"][0]["list_id"] = str(uuid.uuid4())  # a list the document does not hold
    shared = _document()
    shared["lists"][1]["role"] = "editor"  # its tasks are not the user's to bring
    twice = _document()
    twice["tasks"][0]["steps"][0]["id"] = twice["tasks"][0]["id"]
    approval = _document()
    approval["sessions"][0]["approvals"] = [
        {"id": "apr_x", "message_id": str(uuid.uuid4()), "tool_call_id": "c1",
         "name": "delete_todo", "arguments": {}, "summary": "Delete it", "state": "pending",
         "created_at": "2030-01-01T09:00:00Z", "expires_at": "2030-01-02T09:00:00Z"},
    ]  # fmt: skip
    document_elsewhere = _document(documents=[{
        "id": str(uuid.uuid4()), "list_id": str(uuid.uuid4()), "title": "Notes",
        "media_type": "text/markdown", "text": "Hello",
    }])  # fmt: skip
    repeating = _document()
    repeating["tasks"][0]["recurrence"] = "FREQ=DAILY"  # and no due_at
    # Valid to the schema, refused by the database: a NUL in a JSON string.
    stored = _document()
    stored["sessions"][0]["messages"][0]["tool_calls"] = [{"id": "c", "name": "x\u0000"}]
    return [
        ("task in a list it does not hold", elsewhere),
        ("task in a list shared with the user", shared),
        ("an id twice", twice),
        ("a held call of a message it does not hold", approval),
        ("a document in a list it does not hold", document_elsewhere),
        ("a repeating task with no due time", repeating),
        ("what the database cannot store", stored),
    ]


@pytest.mark.parametrize(
    "body",
    [
        b"not json at all",
        b"[]",
        json.dumps({"format": "todo-agent-export/2"}).encode(),
        json.dumps(_document(format="something-else")).encode(),
        json.dumps(_document(tasks=[{"title": "no id, no list"}])).encode(),
        *(json.dumps(document).encode() for _, document in _half_valid()),
    ],
    ids=["not-json", "array", "format-2", "format-other", "task-without-id"]
    + [name for name, _ in _half_valid()],
)
async def test_a_document_that_is_not_one_or_half_one_imports_nothing(
    client: httpx.AsyncClient, engine: AsyncEngine, body: bytes
) -> None:
    assert (await import_into(client, "cy", _document())).status_code == 200  # valid: works
    before = await what_a_person_sees(client, "dee")
    response = await import_into(client, "dee", body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"]
    assert await what_a_person_sees(client, "dee") == before
    async with engine.connect() as connection:
        rows = await connection.execute(
            text(
                "SELECT (SELECT count(*) FROM tasks t JOIN lists l ON l.id = t.list_id"
                " WHERE l.owner_id = 'dee'), (SELECT count(*) FROM lists WHERE owner_id = 'dee'),"
                " (SELECT count(*) FROM agent_sessions WHERE user_id = 'dee'),"
                " (SELECT count(*) FROM events WHERE user_id = 'dee')"
            )
        )
        assert rows.one() == (0, 1, 0, 0)


async def test_the_import_takes_a_body_over_the_chats_cap_up_to_its_own(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    settings = make_settings(max_request_bytes=64 * 1024, import_max_bytes=400_000)
    document = _document()
    words = "All the words of a long conversation. " * 100
    document["sessions"][0]["messages"] = [_message(words) for _ in range(60)]
    body = json.dumps(document).encode()
    assert 64 * 1024 < len(body) < 400_000
    async with serving(settings) as client:
        assert (await import_into(client, "eve", body)).status_code == 200
        chat = await client.post(
            "/api/eve/chat",
            content=json.dumps({"message": words * 20}).encode(),
            headers={**auth("eve"), "content-type": "application/json"},
        )
        assert chat.status_code == 413
        document["sessions"][0]["messages"] *= 2
        too_large = json.dumps(document).encode()
        assert (await import_into(client, "eve", too_large)).status_code == 413

        # Without a Content-Length (chunked), counted as it comes.
        async def pieces() -> AsyncIterator[bytes]:
            yield too_large[:200_000]
            yield too_large[200_000:]

        chunked = await client.post(
            "/api/eve/import",
            content=pieces(),
            headers={**auth("eve"), "content-type": "application/json"},
        )
        assert chunked.status_code == 413
    messages = await _count(engine, "SELECT count(*) FROM agent_messages WHERE user_id = 'eve'")
    assert messages == 60


async def _count(engine: AsyncEngine, sql: str) -> int:
    async with engine.connect() as connection:
        return int((await connection.execute(text(sql))).scalar_one())


async def test_reminders_and_repetition_come_back_and_a_past_reminder_does_not_fire_late(
    app: FastAPI, client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    now = datetime.now(UTC)
    document = _document()
    work = document["lists"][1]["id"]
    # `soon` leaves the import time to finish first, on a loaded machine too.
    past, soon = now - timedelta(hours=2), now + timedelta(seconds=3)
    series = str(uuid.uuid4())
    document["tasks"] = [
        {"id": str(uuid.uuid4()), "list_id": work, "title": "Missed call",
         "remind_at": past.isoformat()},
        {"id": str(uuid.uuid4()), "list_id": work, "title": "Stand up",
         "due_at": (now + timedelta(days=1)).isoformat(), "recurrence": "FREQ=DAILY",
         "series_id": series, "remind_at": soon.isoformat()},
    ]  # fmt: skip
    assert (await import_into(client, "fay", document)).status_code == 200
    tasks = {t["title"]: t for t in (await _get(client, "fay", "/tasks?status=all"))["data"]}
    assert tasks["Missed call"]["reminded_at"] is not None  # handled: it will not fire
    assert tasks["Stand up"]["reminded_at"] is None
    assert tasks["Stand up"]["recurrence_text"] == "every day"
    assert tasks["Stand up"]["series_id"] != series  # a series of its own here
    context: AppContext = app.state.context
    while datetime.now(UTC) < soon + timedelta(milliseconds=100):
        await context.reminders.fire_due()
    await context.reminders.fire_due()
    async with engine.connect() as connection:
        fired = (
            await connection.execute(
                text(
                    "SELECT data->'task'->>'title', data->>'late' FROM events"
                    " WHERE user_id = 'fay' AND type = 'reminder.due'"
                )
            )
        ).all()
    assert fired == [("Stand up", "false")]
    done = await client.patch(
        f"/api/fay/tasks/{tasks['Stand up']['id']}/complete",
        json={"completed": True},
        headers=auth("fay"),
    )
    assert done.json()["next"]["series_id"] == tasks["Stand up"]["series_id"]


async def test_settings_the_account_has_not_chosen_come_from_the_document(
    client: httpx.AsyncClient,
) -> None:
    document = _document(
        user={"display_name": "Gus", "timezone": "Asia/Tokyo", "instructions": "Be terse."}
    )
    await client.patch("/api/gus/settings", json={"display_name": "G."}, headers=auth("gus"))
    assert (await import_into(client, "gus", document)).status_code == 200
    settings = await _get(client, "gus", "/settings")
    assert (settings["display_name"], settings["timezone"], settings["instructions"]) == (
        "G.",
        "Asia/Tokyo",
        "Be terse.",
    )


async def test_documents_past_the_owners_quota_import_nothing(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    inbox = str(uuid.uuid4())
    notes = [
        {"id": str(uuid.uuid4()), "list_id": inbox, "title": f"Notes {n}",
         "media_type": "text/plain", "text": "x" * 1500}
        for n in range(3)
    ]  # fmt: skip
    document = _document(documents=notes)
    document["lists"][0]["id"] = inbox
    async with serving(make_settings(document_quota_bytes=4000)) as client:
        response = await import_into(client, "dee", document)
        assert response.status_code == 413, response.text
        assert "quota" in response.json()["detail"]
        assert (await _get(client, "dee", "/documents"))["data"] == []
        assert (await _get(client, "dee", "/tasks?status=all"))["data"] == []
        document["documents"] = notes[:2]
        assert (await import_into(client, "dee", document)).status_code == 200
        assert len((await _get(client, "dee", "/documents"))["data"]) == 2
