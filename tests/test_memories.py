"""Memories through the REST API: the person's own to list, write, change and erase; held
to them by row-level security; their events on the person's event stream (never another's);
in the export, the import and the erasure."""

# The event stream's server process (tests/test_events.py), started once for this module.
__all__ = ["server"]

import uuid
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.chat_helpers import chat
from tests.conftest import auth
from tests.servers import ServerProcess
from tests.test_events import open_stream, server, streaming


async def remember(client: httpx.AsyncClient, words: str, *, user: str = "alice") -> dict[str, Any]:
    response = await client.post(f"/api/{user}/memories", json={"text": words}, headers=auth(user))
    assert response.status_code == 201, response.text
    memory: dict[str, Any] = response.json()
    return memory


async def memories(client: httpx.AsyncClient, *, user: str = "alice") -> list[dict[str, Any]]:
    response = await client.get(f"/api/{user}/memories", headers=auth(user))
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


async def memory_events(engine: AsyncEngine, user: str) -> list[tuple[str, dict[str, Any]]]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            text("SELECT type, data FROM events WHERE user_id = :user ORDER BY id"),
            {"user": user},
        )
        return [(row[0], row[1]) for row in rows if row[0].startswith("memory.")]


async def test_a_person_writes_reads_changes_and_forgets_their_memories(
    client: httpx.AsyncClient,
) -> None:
    dentist = await remember(client, "  My dentist is Dr. Lee ")
    assert dentist["text"] == "My dentist is Dr. Lee"
    assert dentist["created_by"] == "user"
    assert dentist["source"] is None
    assert dentist["created_at"] == dentist["updated_at"]
    gate = await remember(client, "My gate code is 4711")
    assert [m["text"] for m in await memories(client)] == [gate["text"], dentist["text"]]

    path = f"/api/alice/memories/{gate['id']}"
    changed = await client.patch(path, json={"text": "My gate code is 1234"}, headers=auth("alice"))
    assert changed.status_code == 200, changed.text
    assert changed.json()["text"] == "My gate code is 1234"
    assert changed.json()["updated_at"] > gate["updated_at"]
    assert (await client.delete(path, headers=auth("alice"))).status_code == 204
    assert (await client.delete(path, headers=auth("alice"))).status_code == 404
    assert [m["id"] for m in await memories(client)] == [dentist["id"]]

    await remember(client, "I work Monday to Thursday")
    assert (await client.delete("/api/alice/memories", headers=auth("alice"))).status_code == 204
    assert await memories(client) == []


@pytest.mark.parametrize(
    "body",
    [{}, {"text": ""}, {"text": "   "}, {"text": "x" * 501}, {"text": "a\x00b"}, {"text": 5}],
)
async def test_a_memory_that_cannot_be_kept_is_a_clear_422(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    response = await client.post("/api/alice/memories", json=body, headers=auth("alice"))
    assert response.status_code == 422, response.text
    assert await memories(client) == []


async def test_another_persons_memory_is_not_found_and_never_listed(
    client: httpx.AsyncClient,
) -> None:
    secret = await remember(client, "My PIN is 0000", user="bob")
    mine = await remember(client, "My dentist is Dr. Lee")
    path = f"/api/alice/memories/{secret['id']}"
    patched = await client.patch(path, json={"text": "x"}, headers=auth("alice"))
    assert patched.status_code == 404
    assert (await client.delete(path, headers=auth("alice"))).status_code == 404
    missing = f"/api/alice/memories/{uuid.uuid4()}"
    assert (await client.delete(missing, headers=auth("alice"))).status_code == 404
    assert (await client.get("/api/bob/memories", headers=auth("alice"))).status_code == 403
    assert (await client.delete("/api/alice/memories", headers=auth("alice"))).status_code == 204
    assert [m["id"] for m in await memories(client)] == []
    assert [m["id"] for m in await memories(client, user="bob")] == [secret["id"]]
    assert mine["id"] != secret["id"]


async def test_the_database_holds_memories_to_their_person(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """A query that forgets its filter still sees only the acting person's rows, and cannot
    write one for someone else."""
    await remember(client, "Alice's fact")
    await remember(client, "Bob's fact", user="bob")
    database = app.state.context.database
    async with database.transaction(as_user="bob") as db:
        rows = (await db.exec(text("SELECT text FROM memories"))).all()
        changed = (await db.exec(text("UPDATE memories SET text = 'x' RETURNING id"))).all()
    assert [row[0] for row in rows] == ["Bob's fact"]
    assert len(changed) == 1
    insert = text(
        "INSERT INTO memories (id, user_id, text, created_by)"
        " VALUES (gen_random_uuid(), 'alice', 'planted', 'model')"
    )
    with pytest.raises(Exception, match="row-level security"):
        async with database.transaction(as_user="bob") as db:
            await db.exec(insert)
    assert [m["text"] for m in await memories(client)] == ["Alice's fact"]


async def test_each_change_writes_its_event_for_the_person_alone(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    made = await remember(client, "My dentist is Dr. Lee")
    await remember(client, "Bob's fact", user="bob")
    path = f"/api/alice/memories/{made['id']}"
    await client.patch(path, json={"text": "My dentist is Dr. Ng"}, headers=auth("alice"))
    await client.patch(path, json={"text": "My dentist is Dr. Ng"}, headers=auth("alice"))  # same
    await client.delete(path, headers=auth("alice"))
    expected = [
        ("memory.created", "My dentist is Dr. Lee"),
        ("memory.updated", "My dentist is Dr. Ng"),
        ("memory.deleted", "My dentist is Dr. Ng"),
    ]
    events = await memory_events(engine, "alice")
    assert [(kind, data["text"]) for kind, data in events] == expected
    assert all(
        data == {"user_id": "alice", "memory_id": made["id"], "text": data["text"]}
        for _, data in events
    )
    assert [kind for kind, _ in await memory_events(engine, "bob")] == ["memory.created"]


async def test_memories_are_exported_imported_and_erased(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await remember(client, "My dentist is Dr. Lee", user="ada")
    await remember(client, "My gate code is 4711", user="ada")
    await remember(client, "Bob's fact", user="bob")
    exported = await client.get("/api/ada/export", headers=auth("ada"))
    assert exported.status_code == 200
    document = exported.json()
    assert [m["text"] for m in document["memories"]] == [
        "My gate code is 4711",
        "My dentist is Dr. Lee",
    ]
    assert all(m["created_by"] == "user" and m["source"] is None for m in document["memories"])

    imported = await client.post("/api/cy/import", json=document, headers=auth("cy"))
    assert imported.status_code == 200, imported.text
    assert imported.json()["memories"] == 2
    assert [m["text"] for m in await memories(client, user="cy")] == [
        "My gate code is 4711",
        "My dentist is Dr. Lee",
    ]
    bad = {**document, "memories": [{"text": ""}]}
    refused = await client.post("/api/cy/import", json=bad, headers=auth("cy"))
    assert refused.status_code == 422

    assert (await client.delete("/api/ada", headers=auth("ada"))).status_code == 204
    async with engine.connect() as connection:
        left = await connection.execute(text("SELECT user_id, count(*) FROM memories GROUP BY 1"))
        assert dict(left.all()) == {"bob": 1, "cy": 2}


# -- the stub, without a model -------------------------------------------------------------


async def test_the_stub_saves_answers_from_and_forgets_memories_asking_first(
    client: httpx.AsyncClient,
) -> None:
    saved = await chat(client, "remember that my dentist is Dr. Lee")
    assert saved["using_stub"] is True
    assert 'I\'ll remember: "My dentist is Dr. Lee"' in saved["response"]
    [kept] = await memories(client)
    assert kept["created_by"] == "stub"
    assert kept["source"]["session_id"] == saved["session_id"]
    await chat(client, "my gate code is 4711")
    # Another session: the stub answers from what the turn carries, and says so.
    answer = await chat(client, "what's my gate code?")
    assert answer["response"] == 'From memory (you told me): "My gate code is 4711".'
    assert answer["tool_calls"] == []
    everything = (await chat(client, "what do you remember about me?"))["response"]
    assert everything.splitlines()[1:] == ["- My gate code is 4711", "- My dentist is Dr. Lee"]
    assert "nothing about" in (await chat(client, "who is my dentist?", user="bob"))["response"]

    asked = await chat(client, "forget my gate code")
    assert [p["summary"] for p in asked["pending_approvals"]] == ["Forget “My gate code is 4711”"]
    assert len(await memories(client)) == 2
    done = await chat(client, "yes", session_id=asked["session_id"])
    assert "Forgot: “My gate code is 4711”" in done["response"]
    assert [m["text"] for m in await memories(client)] == ["My dentist is Dr. Lee"]


async def test_the_stub_keeps_remember_to_as_a_task_and_undoes_a_memory(
    client: httpx.AsyncClient,
) -> None:
    assert (
        "Added task 1: Pay the bills"
        in (await chat(client, "Remember to pay the bills"))["response"]
    )
    said = await chat(client, "I need to remember to call mom")
    assert "Added task 2: Call mom" in said["response"]
    assert await memories(client) == []
    saved = await chat(client, "note that I work Monday to Thursday")
    assert [m["text"] for m in await memories(client)] == ["I work Monday to Thursday"]
    undone = await chat(client, "undo", session_id=saved["session_id"])
    assert "forgot “I work Monday to Thursday”" in undone["response"]
    assert await memories(client) == []
    temporary = await chat(client, "remember that I like tea", temporary=True)
    assert "temporary chat" in temporary["response"]
    assert await memories(client) == []


# -- the event stream, from a server process -------------------------------------------------


async def test_the_persons_event_stream_tells_their_memory_changes_and_never_anothers(
    server: ServerProcess,
) -> None:
    alice, bob = f"alice-{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"
    async with streaming(server) as http:
        async for stream in open_stream(http, alice):
            await remember(http, "Bob's fact", user=bob)
            made = await remember(http, "My dentist is Dr. Lee", user=alice)
            created = await stream.next()
            assert created["event"] == "memory.created"
            assert created["data"]["subject"] == made["id"]
            assert created["data"]["data"] == {
                "user_id": alice,
                "memory_id": made["id"],
                "text": "My dentist is Dr. Lee",
            }
            path = f"/api/{alice}/memories/{made['id']}"
            await http.patch(path, json={"text": "My dentist is Dr. Ng"}, headers=auth(alice))
            updated = await stream.next()
            assert (updated["event"], updated["data"]["data"]["text"]) == (
                "memory.updated",
                "My dentist is Dr. Ng",
            )
            await http.delete(f"/api/{alice}/memories", headers=auth(alice))
            assert (await stream.next())["event"] == "memory.deleted"
            break
