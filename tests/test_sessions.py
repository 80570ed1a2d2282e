"""The sessions API: listing, reading, renaming, deleting; always the owner's only."""

import asyncio
import base64
import json
import uuid
from pathlib import Path

import httpx

from tests.chat_helpers import chat, stored_messages, words
from tests.conftest import auth, server_env
from tests.fake_openai import FakeOpenAI
from tests.servers import ServerProcess


async def test_sessions_are_listed_most_recently_active_first_with_cursors(
    client: httpx.AsyncClient,
) -> None:
    ids = [(await chat(client, f"session {i}"))["session_id"] for i in range(5)]
    await chat(client, "back to the first", session_id=ids[0])
    seen, cursor = [], None
    while True:
        response = await client.get(
            "/api/alice/sessions",
            params={"limit": 2, **({"cursor": cursor} if cursor else {})},
            headers=auth("alice"),
        )
        page = response.json()
        assert len(page["data"]) <= 2
        seen += [session["id"] for session in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [ids[0], ids[4], ids[3], ids[2], ids[1]]


async def test_messages_page_backwards_in_chronological_pages(client: httpx.AsyncClient) -> None:
    session_id = (await chat(client, "message 0"))["session_id"]
    for i in range(1, 4):
        await chat(client, f"message {i}", session_id=session_id)
    first = await client.get(
        f"/api/alice/sessions/{session_id}/messages", params={"limit": 3}, headers=auth("alice")
    )
    page = first.json()
    assert [m["role"] for m in page["data"]] == ["assistant", "user", "assistant"]
    assert page["data"][1]["content"] == "message 3"
    older = await client.get(
        f"/api/alice/sessions/{session_id}/messages",
        params={"limit": 3, "cursor": page["next_cursor"]},
        headers=auth("alice"),
    )
    assert older.json()["data"][-1]["content"] == "message 2"
    everything = await stored_messages(client, session_id)
    assert [m["content"] for m in everything if m["role"] == "user"] == [
        f"message {i}" for i in range(4)
    ]
    assert all(m["using_stub"] for m in everything if m["role"] == "assistant")


async def test_rename_and_delete_a_session(client: httpx.AsyncClient) -> None:
    session_id = (await chat(client, "Add a task to buy milk"))["session_id"]
    renamed = await client.patch(
        f"/api/alice/sessions/{session_id}", json={"title": "Shopping"}, headers=auth("alice")
    )
    assert renamed.status_code == 200
    assert renamed.json()["title"] == "Shopping"
    bad = await client.patch(
        f"/api/alice/sessions/{session_id}", json={"title": " "}, headers=auth("alice")
    )
    assert bad.status_code == 422
    deleted = await client.delete(f"/api/alice/sessions/{session_id}", headers=auth("alice"))
    assert deleted.status_code == 204
    gone = await client.get(f"/api/alice/sessions/{session_id}/messages", headers=auth("alice"))
    assert gone.status_code == 404
    tasks = await client.get("/api/alice/tasks", headers=auth("alice"))
    assert tasks.json()["count"] == 1  # the tasks a conversation made are the user's to keep


async def test_another_users_session_is_not_found_on_every_route(
    client: httpx.AsyncClient,
) -> None:
    bobs = await chat(client, "Add a task to plan the surprise", user="bob")
    session = f"/api/mallory/sessions/{bobs['session_id']}"
    mallory = auth("mallory")
    attempts = [
        await client.get(session, headers=mallory),
        await client.get(f"{session}/messages", headers=mallory),
        await client.patch(session, json={"title": "pwned"}, headers=mallory),
        await client.delete(session, headers=mallory),
        await client.post(
            "/api/mallory/chat",
            json={"message": "hi", "session_id": bobs["session_id"]},
            headers=mallory,
        ),
        await client.post(
            "/api/mallory/chat/stream",
            json={"message": "hi", "session_id": bobs["session_id"]},
            headers=mallory,
        ),
    ]
    assert [response.status_code for response in attempts] == [404] * 6
    listing = await client.get("/api/mallory/sessions", headers=mallory)
    assert listing.json() == {"data": [], "next_cursor": None}
    assert len(await stored_messages(client, bobs["session_id"], user="bob")) == 2
    own = await client.get(f"/api/bob/sessions/{bobs['session_id']}", headers=auth("bob"))
    assert own.json()["title"] == "Add a task to plan the surprise"


def _cursor(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode()


async def test_bad_ids_and_cursors_are_422(client: httpx.AsyncClient) -> None:
    session_id = (await chat(client, "hi"))["session_id"]
    cases: list[tuple[str, dict[str, str | int]]] = [
        ("/api/alice/sessions/not-a-uuid", {}),
        ("/api/alice/sessions", {"cursor": "%%%"}),
        ("/api/alice/sessions", {"cursor": _cursor([1])}),
        ("/api/alice/sessions", {"cursor": _cursor(["x", 1])}),
        (
            "/api/alice/sessions",
            {"cursor": _cursor(["2026-01-01T00:00:00", str(uuid.UUID(int=0))])},
        ),
        ("/api/alice/sessions", {"limit": 0}),
        (f"/api/alice/sessions/{session_id}/messages", {"cursor": _cursor("seq")}),
        (f"/api/alice/sessions/{session_id}/messages", {"limit": 1000}),
    ]
    for path, params in cases:
        response = await client.get(path, params=params, headers=auth("alice"))
        assert response.status_code == 422, (path, params, response.text)


async def test_sessions_survive_a_restart_and_the_conversation_continues(
    tmp_path: Path, database_url: str, model: FakeOpenAI, engine: object
) -> None:
    env = server_env(database_url, model)
    headers = auth("alice")
    model.script("First answer.")
    with ServerProcess(env, log=tmp_path / "first.log") as server:
        async with httpx.AsyncClient(base_url=server.url, headers=headers) as client:
            first = await chat(client, "Remember: the code word is heron")
    model.script("It was heron.")
    with ServerProcess(env, log=tmp_path / "second.log") as server:
        async with httpx.AsyncClient(base_url=server.url, headers=headers) as client:
            second = await chat(client, "What was the code word?", session_id=first["session_id"])
            listing = (await client.get("/api/alice/sessions")).json()
            stored = await stored_messages(client, first["session_id"])
    assert second["session_id"] == first["session_id"]
    assert [words(m) for m in model.last_messages()[2:]] == [
        "Remember: the code word is heron",
        "First answer.",
        "What was the code word?",
    ]
    assert [s["id"] for s in listing["data"]] == [first["session_id"]]
    assert [m["content"] for m in stored] == [
        "Remember: the code word is heron",
        "First answer.",
        "What was the code word?",
        "It was heron.",
    ]


async def test_a_turn_in_progress_blocks_deleting_its_session(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    from tests.fake_openai import delay, reply

    first = await chat(agent_client, "hello")
    model.script(delay(1.0, then=reply("slow")))
    turn = asyncio.create_task(chat(agent_client, "slow one", session_id=first["session_id"]))
    await asyncio.sleep(0.3)
    busy = await agent_client.delete(
        f"/api/alice/sessions/{first['session_id']}", headers=auth("alice")
    )
    assert busy.status_code == 409
    assert (await turn)["response"] == "slow"
    done = await agent_client.delete(
        f"/api/alice/sessions/{first['session_id']}", headers=auth("alice")
    )
    assert done.status_code == 204
