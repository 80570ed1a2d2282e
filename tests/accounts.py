"""An account with a bit of everything, and a friend who shares lists with it, for the tests
of export, import and erasure; and seeding a large account straight into the tables."""

import hashlib
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.conftest import auth
from tests.factories import make_task

PACKING = "# Packing\n\n## Papers\n\n- [ ] passport\n- [x] tickets\n\n## Clothes\n\nWarm socks."
OWN_TITLES = ("Move flat", "Pack boxes", "Book van", "Weekly review", "Old idea", "Milk", "Bread",
              "Buy eggs")  # fmt: skip


@dataclass
class Furnished:
    """What `furnish` made: the user's, and the friend's that must never show as theirs."""

    user: str
    friend: str
    calendar_secret: str
    own_titles: set[str]
    friend_titles: set[str]  # in the friend's own list (some made by the user)
    friend_words: set[str]  # what the friend wrote that the user never saw
    shared_list: str  # the user's list the friend is an editor of
    friends_list: str  # the friend's list the user is an editor of
    task_ids: dict[str, str] = field(default_factory=dict)


async def _post(client: httpx.AsyncClient, user: str, path: str, body: Any = None) -> Any:
    response = await client.post(f"/api/{user}{path}", json=body, headers=auth(user))
    assert response.status_code in (200, 201), response.text
    return response.json()


async def share(client: httpx.AsyncClient, *, owner: str, list_id: str, member: str) -> None:
    invitation = await _post(client, owner, f"/lists/{list_id}/invitations", {"role": "editor"})
    await _post(client, member, f"/invitations/{invitation['token']}/accept")


async def furnish(client: httpx.AsyncClient, *, user: str, friend: str) -> Furnished:
    """Settings, a calendar feed, the Inbox and a list shared with the friend, the friend's
    list shared with the user, documents in both, tasks with steps, repetition, a reminder
    and the trash, a conversation with tool calls, a held call and an undo record; the
    friend's own conversation and tasks."""
    response = await client.patch(
        f"/api/{user}/settings",
        json={
            "display_name": "Ada",
            "timezone": "Europe/Berlin",
            "instructions": "Answer briefly.",
            "confirm": "deletes",
        },
        headers=auth(user),
    )
    assert response.status_code == 200, response.text
    feed = await _post(client, user, "/calendar")
    secret = feed["url"].rsplit("/", 1)[1].removesuffix(".ics")

    groceries = await _post(client, user, "/lists", {"name": "Groceries"})
    plans = await _post(client, friend, "/lists", {"name": "Friend plans"})
    await share(client, owner=user, list_id=groceries["id"], member=friend)
    await share(client, owner=friend, list_id=plans["id"], member=user)

    ids: dict[str, str] = {}
    move = await make_task(client, user=user, title="Move flat", steps=["Pack boxes", "Book van"])
    ids["Move flat"] = move["id"]
    soon = datetime.now(UTC) + timedelta(days=3)
    weekly = await make_task(
        client,
        user=user,
        title="Weekly review",
        due_at=soon.isoformat(),
        recurrence="FREQ=WEEKLY;BYDAY=FR",
        remind_at=(soon - timedelta(hours=1)).isoformat(),
        priority="high",
        tags=["work"],
    )
    ids["Weekly review"] = weekly["id"]
    old = await make_task(client, user=user, title="Old idea", description="Not any more")
    response = await client.delete(f"/api/{user}/tasks/{old['id']}", headers=auth(user))
    assert response.status_code == 204
    ids["Milk"] = (await make_task(client, user=user, title="Milk", list_id=groceries["id"]))["id"]
    # The friend's task in the user's list is the user's list's: exported with it.
    bread = await make_task(client, user=friend, title="Bread", list_id=groceries["id"])
    ids["Bread"] = bread["id"]
    # In the friend's list: theirs, whoever made it.
    await make_task(client, user=friend, title="Friend secret plan", list_id=plans["id"])
    helps = await make_task(client, user=user, title="Ada helps out", list_id=plans["id"])
    ids["Ada helps out"] = helps["id"]
    response = await client.patch(
        f"/api/{friend}/tasks/{helps['id']}", json={"assignee_id": user}, headers=auth(friend)
    )
    assert response.status_code == 200, response.text

    # Documents: the user's in their list, the user's in the friend's list (the friend's),
    # the friend's own.
    await _post(client, user, "/documents", {"title": "Packing list", "list_id": groceries["id"],
                                             "text": PACKING})  # fmt: skip
    await _post(client, user, "/documents", {"title": "Ada's tips", "list_id": plans["id"],
                                             "text": "Bring snacks."})  # fmt: skip
    diary = {
        "title": "Friend diary",
        "list_id": plans["id"],
        "text": "The surprise party is on Friday.",
    }
    await _post(client, friend, "/documents", diary)
    # A conversation (the stub): a tool call with its result and undo record, then a delete
    # held for a yes.
    first = await _post(client, user, "/chat", {"message": "add buy eggs"})
    eggs = first["tool_results"][0]["result"]["todo"]["number"]
    held = await _post(
        client,
        user,
        "/chat",
        {"message": f"delete task {eggs}", "session_id": first["session_id"]},
    )
    assert held["pending_approvals"], held
    await _post(client, friend, "/chat", {"message": "add call the plumber about the leak"})
    return Furnished(
        user=user,
        friend=friend,
        calendar_secret=secret,
        own_titles=set(OWN_TITLES),
        friend_titles={"Friend secret plan", "Ada helps out"},
        friend_words={"Call the plumber about the leak", "plumber", "surprise party"},
        shared_list=groceries["id"],
        friends_list=plans["id"],
        task_ids=ids,
    )


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


async def seed_messages(
    engine: AsyncEngine, *, user: str, sessions: int, per_session: int, size: int
) -> int:
    """`sessions` sessions of `user` with `per_session` messages of about `size` characters
    each (user and assistant in turn, every tenth answer with a tool call and its result),
    written straight into the tables. The user must exist. How many messages."""
    async with engine.begin() as connection:
        ids = [uuid.uuid4() for _ in range(sessions)]
        await connection.execute(
            text(
                "INSERT INTO agent_sessions (id, user_id, title, created_at, updated_at)"
                " SELECT s, :user, 'Seeded ' || n, now() - interval '30 days', now()"
                " - interval '1 day' + n * interval '1 second'"
                " FROM unnest(CAST(:ids AS uuid[])) WITH ORDINALITY AS t(s, n)"
            ),
            {"user": user, "ids": ids},
        )
        await connection.execute(
            text(
                """
                INSERT INTO agent_messages (id, session_id, user_id, role, content,
                                            tool_calls, tool_results, created_at)
                SELECT gen_random_uuid(), s, :user,
                       CASE WHEN n % 2 = 1 THEN 'user' ELSE 'assistant' END,
                       'Message ' || n || ' ' || repeat(md5(n::text), :size / 32),
                       CASE WHEN n % 20 = 0 THEN jsonb_build_array(jsonb_build_object(
                           'id', 'call_' || n, 'name', 'add_todo',
                           'arguments', jsonb_build_object('title', 'Task ' || n))) END,
                       CASE WHEN n % 20 = 0 THEN jsonb_build_array(jsonb_build_object(
                           'tool_call_id', 'call_' || n, 'name', 'add_todo',
                           'result', jsonb_build_object('status', 'created'))) END,
                       now() - interval '30 days' + n * interval '1 millisecond'
                FROM unnest(CAST(:ids AS uuid[])) AS s, generate_series(1, :per_session) AS n
                ORDER BY s, n
                """
            ),
            {"user": user, "ids": ids, "per_session": per_session, "size": size},
        )
    async with engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        await connection.execute(text("ANALYZE agent_messages"))
    return sessions * per_session
