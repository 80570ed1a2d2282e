"""GET /api/{user_id}/export and `todo-agent users export`: everything the service holds
about the user, nothing of anyone else's, never a secret, streamed in little memory."""

import asyncio
import json
import time
import tracemalloc
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.types import Message

from tests.accounts import PACKING, digest, furnish, seed_messages
from tests.conftest import auth, token_for
from tests.servers import run_cli


async def export_of(client: httpx.AsyncClient, user: str) -> dict[str, Any]:
    response = await client.get(f"/api/{user}/export", headers=auth(user))
    assert response.status_code == 200, response.text
    document: dict[str, Any] = response.json()
    return document


def titles(document: dict[str, Any]) -> set[str]:
    return {item["title"] for task in document["tasks"] for item in (task, *task["steps"])}


async def test_the_export_holds_the_users_data_and_never_anothers_or_a_secret(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    account = await furnish(client, user="ada", friend="bo")
    response = await client.get("/api/ada/export", headers=auth("ada"))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["content-disposition"].startswith("attachment;")
    raw = response.text
    document = response.json()

    assert document["format"] == "todo-agent-export/1"
    assert document["exported_at"]
    user = document["user"]
    assert (user["id"], user["display_name"], user["timezone"], user["instructions"]) == (
        "ada",
        "Ada",
        "Europe/Berlin",
        "Answer briefly.",
    )
    # Lists: their own whole; the one shared with them as a name and a role only.
    lists = {item["name"]: item for item in document["lists"]}
    assert set(lists) == {"Inbox", "Groceries", "Friend plans"}
    assert lists["Inbox"]["inbox"]
    assert lists["Groceries"]["role"] == "owner"
    assert lists["Friend plans"] == {
        "id": account.friends_list,
        "name": "Friend plans",
        "role": "editor",
        "joined_at": lists["Friend plans"]["joined_at"],
    }
    # Tasks: every task of their lists (the friend's Bread too), steps under their parent,
    # repetition, the reminder, the trash; none of the friend's list.
    assert titles(document) == account.own_titles
    tasks = {task["title"]: task for task in document["tasks"]}
    assert [step["title"] for step in tasks["Move flat"]["steps"]] == ["Pack boxes", "Book van"]
    assert tasks["Weekly review"]["recurrence"] == "FREQ=WEEKLY;BYDAY=FR"
    assert tasks["Weekly review"]["recurrence_text"] == "every Friday"
    assert tasks["Weekly review"]["remind_at"]
    assert tasks["Weekly review"]["series_id"]
    assert tasks["Old idea"]["deleted_at"]
    assert tasks["Old idea"]["description"] == "Not any more"
    assert tasks["Bread"]["list_id"] == account.shared_list
    assert [task["number"] for task in document["tasks"]] == sorted(
        task["number"] for task in document["tasks"]
    )
    # Documents: those of their own lists, as text; none of the friend's list (not even the
    # one the user wrote there).
    [packing] = document["documents"]
    assert packing == {
        "id": packing["id"], "list_id": account.shared_list, "title": "Packing list",
        "media_type": "text/markdown", "text": PACKING, "created_at": packing["created_at"],
    }  # fmt: skip
    # The conversation: every message with its tool calls and results, the held call, the
    # undo record.
    [session] = document["sessions"]
    roles = [message["role"] for message in session["messages"]]
    assert roles == ["user", "assistant", "user", "assistant"]
    calls = [call["name"] for m in session["messages"] for call in m["tool_calls"] or ()]
    assert calls[:1] == ["add_todo"]
    results = [r["result"] for m in session["messages"] for r in m["tool_results"] or ()]
    assert results[0]["status"] == "created"
    [approval] = session["approvals"]
    assert (approval["state"], approval["name"]) == ("pending", "delete_todo")
    assert [change["action"] for change in session["changes"]] == ["created"]

    # Nothing of the friend's: not their id, their words, or any id of their rows (what the
    # user's own conversation showed them of the shared lists is the user's).
    assert "bo" not in _strings(document) - {"Bo"}
    for words in account.friend_words:
        assert words not in raw
    async with engine.connect() as connection:
        theirs = await connection.execute(
            text(
                "SELECT id::text FROM agent_sessions WHERE user_id = 'bo'"
                " UNION ALL SELECT id::text FROM agent_messages WHERE user_id = 'bo'"
                " UNION ALL SELECT id::text FROM lists WHERE owner_id = 'bo' AND inbox"
            )
        )
        foreign = [row[0] for row in theirs]
    assert len(foreign) == 4
    for value in foreign:
        assert value not in raw
    # Never the calendar secret, nor its hash.
    assert account.calendar_secret not in raw
    assert digest(account.calendar_secret) not in raw
    assert "calendar" not in raw


def _strings(value: Any) -> set[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set(value) | {s for item in value.values() for s in _strings(item)}
    if isinstance(value, list):
        return {s for item in value for s in _strings(item)}
    return set()


async def test_the_friends_export_has_only_the_friends(client: httpx.AsyncClient) -> None:
    account = await furnish(client, user="ada", friend="bo")
    document = await export_of(client, "bo")
    assert titles(document) == {
        "Friend secret plan",
        "Ada helps out",
        "Call the plumber about the leak",
    }
    assert {item["name"]: item["role"] for item in document["lists"]} == {
        "Inbox": "owner",
        "Friend plans": "owner",
        "Groceries": "editor",
    }
    assert sorted(item["title"] for item in document["documents"]) == ["Ada's tips", "Friend diary"]
    assert "ada" not in _strings(document)
    assert all("Eggs" not in json.dumps(s) for s in document["sessions"])
    assert account.calendar_secret not in json.dumps(document)


async def test_an_empty_account_exports_a_whole_document(client: httpx.AsyncClient) -> None:
    document = await export_of(client, "newcomer")
    assert document["lists"][0]["name"] == "Inbox"
    assert (document["tasks"], document["sessions"]) == ([], [])


async def test_the_command_line_writes_the_same_document(
    client: httpx.AsyncClient, database_url: str
) -> None:
    await furnish(client, user="ada", friend="bo")
    served = await export_of(client, "ada")
    env = {"DATABASE_URL": database_url}
    done = await asyncio.to_thread(run_cli, "users", "export", "ada", env=env)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert {**printed, "exported_at": None} == {**served, "exported_at": None}
    missing = await asyncio.to_thread(run_cli, "users", "export", "nobody-here", env=env)
    assert missing.returncode == 1
    assert "no user" in missing.stderr
    assert missing.stdout == ""


# ------------------------------------------------------------------ a large account


class Drain:
    """An ASGI client that reads a response and keeps none of it: its size, how it ended,
    and the document's messages, counted on the fly."""

    MARK = b'"using_stub" : '  # a field of messages only

    def __init__(self) -> None:
        self.status = 0
        self.size = 0
        self.messages = 0
        self.tail = b""
        self._done = asyncio.Event()

    async def get(self, app: FastAPI, path: str, token: str) -> None:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"test"), (b"authorization", f"Bearer {token}".encode())],
            "client": ("127.0.0.1", 50000),
            "server": ("test", 80),
        }
        requested = False

        async def receive() -> Message:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await self._done.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                joined = self.tail + body
                self.messages += joined.count(self.MARK) - self.tail.count(self.MARK)
                self.tail = joined[-len(self.MARK) :]
                self.size += len(body)
                if not message.get("more_body", False):
                    self._done.set()

        await app(scope, receive, send)


async def test_a_large_account_is_exported_in_little_memory(
    app: FastAPI, client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """20,000 messages of about 2 KB: the document is some 45 MB; the server's allocations
    at their peak (tracemalloc, over the whole export) stay a small fraction of it."""
    await client.get("/api/big/settings", headers=auth("big"))  # the user, and a warm app
    count = await seed_messages(engine, user="big", sessions=20, per_session=1000, size=2048)
    drain = Drain()
    await drain.get(app, "/api/big/settings", token_for("big"))  # warm the raw path
    drain = Drain()
    tracemalloc.start()
    started = time.perf_counter()
    try:
        await drain.get(app, "/api/big/export", token_for("big"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    elapsed = time.perf_counter() - started
    assert drain.status == 200
    assert drain.messages == count
    assert drain.tail.endswith(b"]}\n")
    assert drain.size > 40_000_000
    print(f"export: {drain.size / 1e6:.1f} MB in {elapsed:.1f} s, peak {peak / 1e6:.2f} MB")
    assert peak < drain.size / 10, (peak, drain.size)
