"""DELETE /api/{user_id} and `todo-agent users erase`: every row about the person goes, in
every table (a sweep of the whole schema says so), but one `user.deleted` event that the
webhook receives; the lists they shared go from their members, their tasks in others'
lists stay without their name; a new sign-in starts an empty account, in every process;
their reminders never fire; their requests meanwhile resurrect nothing; and other users
are not kept waiting by a large account's erasure."""

import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.context import AppContext
from backend.settings import Settings
from tests.accounts import furnish, seed_messages
from tests.chat_helpers import chat
from tests.conftest import acting_as, auth, server_env, serving
from tests.servers import ServerProcess, run_cli, until
from tests.test_webhooks import SECRET, Receiver

_CHARACTER_COLUMNS = text(
    """
    SELECT c.table_name, c.column_name FROM information_schema.columns c
    JOIN information_schema.tables t USING (table_schema, table_name)
    WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE'
      AND c.data_type IN ('character varying', 'text', 'character')
    ORDER BY 1, 2
    """
)


_JSON_COLUMNS = text(
    """
    SELECT c.table_name, c.column_name FROM information_schema.columns c
    JOIN information_schema.tables t USING (table_schema, table_name)
    WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE' AND c.data_type = 'jsonb'
    ORDER BY 1, 2
    """
)
# What other people keep as they were told or asked it: their conversations (a tool's
# result that named the user) and the calls they asked for. Not rows about the user.
_OTHERS_WORDS = {
    ("agent_messages", "tool_calls"),
    ("agent_messages", "tool_results"),
    ("approvals", "arguments"),
}


async def rows_naming(engine: AsyncEngine, value: str) -> dict[tuple[str, str], int]:
    """Every character column of every table in the schema, tables added later included:
    how many rows hold exactly `value` there; and every JSON column (but others' words):
    how many rows hold it as a value, at any depth."""
    found: dict[tuple[str, str], int] = {}
    async with engine.connect() as connection:
        columns = [
            (table, column, f'"{column}" = :value')
            for table, column in (await connection.execute(_CHARACTER_COLUMNS)).all()
        ]
        columns += [
            (
                table,
                column,
                f"jsonb_path_exists(\"{column}\", '$.** ? (@ == $v)', "
                "jsonb_build_object('v', CAST(:value AS text)))",
            )
            for table, column in (await connection.execute(_JSON_COLUMNS)).all()
            if (table, column) not in _OTHERS_WORDS
        ]
        for table, column, holds in columns:
            count = (
                await connection.execute(
                    text(f'SELECT count(*) FROM "{table}" WHERE {holds}'), {"value": value}
                )
            ).scalar_one()
            if count:
                found[(table, column)] = count
    return found


# The one row left: the `user.deleted` event, to the user's id, about it.
ONLY_USER_DELETED = {("events", "user_id"): 1, ("events", "data"): 1}


async def _everything_else(client: httpx.AsyncClient, engine: AsyncEngine, user: str) -> None:
    """What `furnish` does not make: an idempotency record, an answered MCP question, an
    invitation not taken yet, a memory."""
    memory = await client.post(
        f"/api/{user}/memories", json={"text": f"{user}'s gate code is 4711"}, headers=auth(user)
    )
    assert memory.status_code == 201
    keyed = await client.post(
        f"/api/{user}/chat",
        json={"message": "add water the plants"},
        headers={**auth(user), "Idempotency-Key": "once"},
    )
    assert keyed.status_code == 200
    async with acting_as(engine, user) as db:
        await (await db.connection()).execute(
            text(
                "INSERT INTO mcp_request_states (nonce, user_id, expires_at)"
                " VALUES (:nonce, :user, now() + interval '1 hour')"
            ),
            {"nonce": uuid.uuid4().hex, "user": user},
        )
    lists = (await client.get(f"/api/{user}/lists", headers=auth(user))).json()["data"]
    own = next(item for item in lists if item["name"] == "Groceries")
    invited = await client.post(
        f"/api/{user}/lists/{own['id']}/invitations", json={"role": "viewer"}, headers=auth(user)
    )
    assert invited.status_code == 201


async def test_after_an_erasure_only_the_user_deleted_event_holds_the_id(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    account = await furnish(client, user="ada", friend="bo")
    await _everything_else(client, engine, "ada")
    # The friend takes the task they gave the user back, in a turn they can undo.
    helps = await client.get(
        f"/api/bo/tasks/{account.task_ids['Ada helps out']}", headers=auth("bo")
    )
    unassigned = await chat(client, f"unassign task {helps.json()['number']}", user="bo")
    before = await rows_naming(engine, "ada")
    assert len(before) >= 12, before  # the sweep sees them where they are
    # Others' events (the task made by and given to the user) and undo records name them.
    assert {("events", "data"), ("task_changes", "before")} <= before.keys(), before

    response = await client.delete("/api/ada", headers=auth("ada"))
    assert response.status_code == 204
    assert await rows_naming(engine, "ada") == ONLY_USER_DELETED
    async with engine.connect() as connection:
        [event] = (
            await connection.execute(
                text("SELECT type, subject, data, webhook_due_at FROM events WHERE user_id = 'ada'")
            )
        ).all()
    assert (event.type, event.subject, event.data) == ("user.deleted", None, {"user_id": "ada"})
    # The friend's undo still works: it gives the task back to nobody who is gone.
    undone = await client.post(
        f"/api/bo/sessions/{unassigned['session_id']}/undo", headers=auth("bo")
    )
    assert undone.status_code == 200, undone.text

    # The friend lost the list that was shared with them, and was told; their own list
    # keeps the task the user made there, with nobody's name on it.
    lists = (await client.get("/api/bo/lists", headers=auth("bo"))).json()["data"]
    assert sorted(item["name"] for item in lists) == ["Friend plans", "Inbox"]
    async with engine.connect() as connection:
        told = (
            await connection.execute(
                text("SELECT type FROM events WHERE user_id = 'bo' ORDER BY id DESC LIMIT 3")
            )
        ).all()
        kept = (
            await connection.execute(
                text("SELECT created_by, assignee_id FROM tasks WHERE id = :id"),
                {"id": account.task_ids["Ada helps out"]},
            )
        ).one()
    assert {row.type for row in told} >= {"list.deleted", "list.member_removed"}
    assert tuple(kept) == (None, None)
    # Their documents went with their lists, every passage too; the one they wrote in the
    # friend's list stays the friend's, with nobody's name on it.
    async with engine.connect() as connection:
        documents = (
            await connection.execute(
                text(
                    "SELECT d.title, d.created_by, count(p.id) FROM documents d"
                    " LEFT JOIN passages p ON p.document_id = d.id"
                    " GROUP BY d.id ORDER BY d.title"
                )
            )
        ).all()
        orphans = await connection.scalar(
            text(
                "SELECT count(*) FROM passages WHERE document_id NOT IN (SELECT id FROM documents)"
            )
        )
    assert [tuple(row) for row in documents] == [("Ada's tips", None, 1), ("Friend diary", "bo", 1)]
    assert orphans == 0
    members = await client.get(f"/api/bo/lists/{account.friends_list}/members", headers=auth("bo"))
    assert [member["user_id"] for member in members.json()["data"]] == ["bo"]
    # Erasing again: nothing left, and no second event.
    assert (await client.delete("/api/ada", headers=auth("ada"))).status_code == 204
    assert await rows_naming(engine, "ada") == ONLY_USER_DELETED


async def test_the_user_deleted_event_reaches_the_webhook_signed(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    with Receiver(SECRET) as receiver:
        settings = make_settings(
            webhook_url=receiver.url, webhook_secret=SECRET, webhook_retry_schedule_s=[0.3]
        )
        async with serving(settings) as client:
            await client.post("/api/ada/tasks", json={"title": "Soon gone"}, headers=auth("ada"))
            assert (await client.delete("/api/ada", headers=auth("ada"))).status_code == 204

            def deleted() -> list[Any]:
                return [
                    d
                    for d in receiver.of("ada")
                    if d.payload and d.payload["type"] == "user.deleted"
                ]

            async def arrived() -> bool:
                return bool(deleted())

            await until(arrived, timeout_s=10, message="user.deleted was not delivered")
        [delivery] = deleted()
    assert delivery.error is None  # verified by the standardwebhooks package
    assert delivery.payload["subject"] == "ada"
    assert delivery.payload["data"] == {"user_id": "ada"}
    assert delivery.webhook_id == delivery.payload["id"]
    async with engine.connect() as connection:
        outcome = (
            await connection.execute(
                text(
                    "SELECT webhook_outcome, webhook_due_at FROM events"
                    " WHERE user_id = 'ada' AND type = 'user.deleted'"
                )
            )
        ).one()
    assert tuple(outcome) == ("delivered", None)


async def test_a_new_token_for_an_erased_user_starts_an_empty_account(
    client: httpx.AsyncClient,
) -> None:
    await furnish(client, user="ada", friend="bo")
    inbox = (await client.get("/api/ada/lists", headers=auth("ada"))).json()["data"][0]
    assert (await client.delete("/api/ada", headers=auth("ada"))).status_code == 204

    fresh = auth("ada")  # a new token for the same sub
    assert (await client.get("/api/ada/tasks?status=all", headers=fresh)).json()["count"] == 0
    assert (await client.get("/api/ada/trash", headers=fresh)).json()["data"] == []
    assert (await client.get("/api/ada/sessions", headers=fresh)).json()["data"] == []
    lists = (await client.get("/api/ada/lists", headers=fresh)).json()["data"]
    assert [(item["name"], item["id"] == inbox["id"]) for item in lists] == [("Inbox", False)]
    settings = (await client.get("/api/ada/settings", headers=fresh)).json()
    assert (settings["display_name"], settings["timezone"], settings["instructions"]) == (
        None,
        "UTC",
        None,
    )
    task = await client.post("/api/ada/tasks", json={"title": "Again"}, headers=fresh)
    assert task.json()["number"] == 1


async def test_every_process_forgets_an_erased_user(
    database_url: str, engine: AsyncEngine, tmp_path: Any
) -> None:
    """The server knows the user (it wrote their row); the command line erases them; the
    server's next request for them makes a new account instead of acting for one gone."""
    with ServerProcess(server_env(database_url), log=tmp_path / "serve.log") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            made = await http.post("/api/kim/tasks", json={"title": "First"}, headers=auth("kim"))
            assert made.json()["number"] == 1
            await http.post("/api/kim/tasks", json={"title": "Second"}, headers=auth("kim"))
            done = await asyncio.to_thread(
                run_cli, "users", "erase", "kim", env={"DATABASE_URL": database_url}
            )
            assert done.returncode == 0, done.stderr
            assert "erased" in done.stderr
            again = await http.post("/api/kim/tasks", json={"title": "New"}, headers=auth("kim"))
            assert again.status_code == 201, again.text
            assert again.json()["number"] == 1
            tasks = (await http.get("/api/kim/tasks", headers=auth("kim"))).json()
            assert [task["title"] for task in tasks["data"]] == ["New"]
    nothing = await asyncio.to_thread(
        run_cli, "users", "erase", "nobody-here", env={"DATABASE_URL": database_url}
    )
    assert nothing.returncode == 0
    assert "nothing to erase" in nothing.stderr


async def test_a_process_that_has_not_heard_yet_answers_409_then_starts_anew(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """Between another process's erasure and its notice reaching this one, this process
    still takes the user for known: a write that names them is refused by the database,
    answered 409 with the reason, and the user forgotten here, so their next request makes
    a new account."""
    await client.post("/api/kim/tasks", json={"title": "First"}, headers=auth("kim"))
    async with engine.begin() as connection:  # the other process's erasure, all at once
        await connection.execute(text("DELETE FROM users WHERE id = 'kim'"))
    refused = await client.post("/api/kim/tasks", json={"title": "Lost"}, headers=auth("kim"))
    assert refused.status_code == 409, refused.text
    assert refused.json()["detail"] == (
        "This account was erased while the request ran; send it again to start a new one."
    )
    again = await client.post("/api/kim/tasks", json={"title": "New"}, headers=auth("kim"))
    assert again.status_code == 201, again.text
    assert again.json()["number"] == 1


async def _messages_of(engine: AsyncEngine, user: str) -> int:
    async with engine.connect() as connection:
        found = await connection.execute(
            text("SELECT count(*) FROM agent_messages WHERE user_id = :user"), {"user": user}
        )
        return int(found.scalar_one())


async def _erasing(engine: AsyncEngine, user: str) -> bool:
    async with engine.connect() as connection:
        marked = await connection.execute(
            text("SELECT erasing_at IS NOT NULL FROM users WHERE id = :user"), {"user": user}
        )
        return bool(marked.scalar_one_or_none())


async def test_a_pending_reminder_of_a_user_being_erased_never_fires(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    settings = make_settings()
    async with serving(settings) as client:
        context: AppContext = client._transport.app.state.context  # type: ignore[attr-defined]
        await context.reminders.stop()  # fired here, by hand, as often as asked
        await client.get("/api/ada/settings", headers=auth("ada"))
        await seed_messages(engine, user="ada", sessions=10, per_session=2000, size=256)
        soon = datetime.now(UTC) + timedelta(milliseconds=300)
        await client.post(
            "/api/ada/tasks",
            json={"title": "Call", "remind_at": soon.isoformat()},
            headers=auth("ada"),
        )
        await asyncio.sleep(0.4)  # due now, not fired yet
        erasing = asyncio.create_task(client.delete("/api/ada", headers=auth("ada")))

        async def started() -> bool:
            return await _erasing(engine, "ada")

        await until(started, timeout_s=10, message="the erasure did not begin")
        fired, tries = 0, 0
        while not erasing.done():
            fired += await context.reminders.fire_due()
            tries += 1
            await asyncio.sleep(0.01)
        assert (await erasing).status_code == 204
    assert tries >= 3, "the erasure ended before a reminder could be tried"
    assert fired == 0
    async with engine.connect() as connection:
        due = await connection.execute(
            text("SELECT count(*) FROM events WHERE type = 'reminder.due'")
        )
        assert due.scalar_one() == 0


async def test_the_users_requests_during_the_erasure_resurrect_nothing(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await client.get("/api/ada/settings", headers=auth("ada"))
    await seed_messages(engine, user="ada", sessions=10, per_session=2000, size=256)
    erasing = asyncio.create_task(client.delete("/api/ada", headers=auth("ada")))
    statuses: list[int] = []
    made_during: list[str] = []
    number = 0
    while not erasing.done():
        number += 1
        response = await client.post(
            "/api/ada/tasks", json={"title": f"During {number}"}, headers=auth("ada")
        )
        statuses.append(response.status_code)
        if response.status_code == 201 and not erasing.done():
            made_during.append(response.json()["id"])
        await asyncio.sleep(0.005)
    assert (await erasing).status_code == 204
    assert set(statuses) <= {201, 409}, statuses
    assert 409 in statuses  # signing in again waits for the erasure
    async with engine.connect() as connection:
        left = await connection.execute(
            text("SELECT count(*) FROM tasks WHERE id = ANY(CAST(:ids AS uuid[]))"),
            {"ids": made_during},
        )
        assert left.scalar_one() == 0
    found = await rows_naming(engine, "ada")
    # Only the event, and whatever a request that came after the erasure made anew.
    assert found.get(("events", "user_id"), 0) >= 1
    assert await _messages_of(engine, "ada") == 0


async def test_another_users_chat_answers_during_a_large_erasure(
    app: FastAPI, client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """50,000 messages erased while another user chats: their turns keep answering, each
    quickly, none waiting for the erasure to end."""
    await client.get("/api/ada/settings", headers=auth("ada"))
    await seed_messages(engine, user="ada", sessions=50, per_session=1000, size=256)
    await client.post("/api/bo/chat", json={"message": "hello"}, headers=auth("bo"))  # warm
    started = time.perf_counter()
    erasing = asyncio.create_task(client.delete("/api/ada", headers=auth("ada")))
    latencies: list[float] = []
    while not erasing.done():
        turn = time.perf_counter()
        response = await client.post(
            "/api/bo/chat", json={"message": f"add task {len(latencies)}"}, headers=auth("bo")
        )
        assert response.status_code == 200
        latencies.append(time.perf_counter() - turn)
    assert (await erasing).status_code == 204
    erasure_s = time.perf_counter() - started
    print(
        f"erasure {erasure_s:.2f} s; {len(latencies)} turns meanwhile, median "
        f"{statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
    )
    assert len(latencies) >= 10
    assert max(latencies) < max(1.0, erasure_s / 4)
    assert await _messages_of(engine, "ada") == 0


async def test_an_erasure_that_stopped_midway_is_finished_by_the_upkeep_loop(
    app: FastAPI, client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    context: AppContext = app.state.context
    await client.post("/api/ada/tasks", json={"title": "Half gone"}, headers=auth("ada"))
    # Begun, then the process running it died, 10 minutes ago: this process never knew.
    async with engine.begin() as connection:
        await connection.execute(
            text("UPDATE users SET erasing_at = now() - interval '10 minutes' WHERE id = 'ada'")
        )
    context.known_users.discard("ada")
    waiting = await client.get("/api/ada/tasks", headers=auth("ada"))
    assert waiting.status_code == 409  # neither theirs any more nor gone yet
    assert "being erased" in waiting.json()["detail"]
    await context.upkeep.once(prune=True)
    assert await rows_naming(engine, "ada") == ONLY_USER_DELETED
    fresh = await client.get("/api/ada/tasks", headers=auth("ada"))
    assert fresh.json()["count"] == 0
