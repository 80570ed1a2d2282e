"""Lists, shared with the people you live and work with: the Inbox, invitations, roles,
everyone's own numbers, events to every member, removal cutting a member off at once, and
row-level security holding the same line a second time."""

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.context import AppContext
from tests.chat_helpers import chat
from tests.conftest import auth, server_env, serving, token_for
from tests.factories import make_task
from tests.fake_openai import FakeOpenAI, call, reply, tool_calls
from tests.servers import ServerProcess, until
from tests.test_events import open_stream, streaming
from tests.test_mcp import LOCAL, mcp_session


async def _get(client: httpx.AsyncClient, user: str, path: str, expect: int = 200) -> Any:
    response = await client.get(f"/api/{user}{path}", headers=auth(user))
    assert response.status_code == expect, response.text
    return response.json()


async def _send(
    client: httpx.AsyncClient,
    method: str,
    user: str,
    path: str,
    body: Any = None,
    expect: int = 200,
) -> Any:
    response = await client.request(method, f"/api/{user}{path}", json=body, headers=auth(user))
    assert response.status_code == expect, response.text
    return response.json() if response.content else None


async def _lists(client: httpx.AsyncClient, user: str) -> dict[str, Any]:
    return {shown["name"]: shown for shown in (await _get(client, user, "/lists"))["data"]}


async def _share(
    client: httpx.AsyncClient, owner: str, list_id: str, member: str, role: str
) -> dict[str, Any]:
    invitation = await _send(
        client, "POST", owner, f"/lists/{list_id}/invitations", {"role": role}, expect=201
    )
    joined: dict[str, Any] = await _send(
        client, "POST", member, f"/invitations/{invitation['token']}/accept"
    )
    return joined


async def _groceries(client: httpx.AsyncClient) -> str:
    """Alice's "Groceries", shared with Bob as an editor and Carol as a viewer."""
    made = await _send(client, "POST", "alice", "/lists", {"name": "Groceries"}, expect=201)
    await _share(client, "alice", made["id"], "bob", "editor")
    await _share(client, "alice", made["id"], "carol", "viewer")
    list_id: str = made["id"]
    return list_id


async def _titles(client: httpx.AsyncClient, user: str, **params: Any) -> list[tuple[int, str]]:
    response = await client.get(f"/api/{user}/tasks", params=params, headers=auth(user))
    assert response.status_code == 200, response.text
    return [(task["number"], task["title"]) for task in response.json()["data"]]


# -- lists --------------------------------------------------------------------------------


async def test_everyone_has_an_inbox_that_cannot_be_renamed_shared_or_deleted(
    client: httpx.AsyncClient,
) -> None:
    inbox = (await _lists(client, "alice"))["Inbox"]
    assert (inbox["role"], inbox["inbox"], inbox["shared"], inbox["owner_id"]) == (
        "owner",
        True,
        False,
        "alice",
    )
    task = await make_task(client, user="alice", title="Buy milk")
    assert task["list_id"] == inbox["id"]
    url = f"/lists/{inbox['id']}"
    await _send(client, "PATCH", "alice", url, {"name": "Mine"}, expect=409)
    await _send(client, "DELETE", "alice", url, expect=409)
    await _send(client, "POST", "alice", f"{url}/invitations", {"role": "editor"}, expect=409)
    assert (await _lists(client, "alice"))["Inbox"]["pending_count"] == 1


async def test_lists_are_made_renamed_and_deleted_by_their_owner(
    client: httpx.AsyncClient,
) -> None:
    work = await _send(client, "POST", "alice", "/lists", {"name": "Work"}, expect=201)
    assert (work["role"], work["pending_count"]) == ("owner", 0)
    await _send(client, "POST", "alice", "/lists", {"name": "WORK"}, expect=409)
    await _send(client, "POST", "alice", "/lists", {"name": " "}, expect=422)
    await _send(client, "POST", "bob", "/lists", {"name": "Work"}, expect=201)  # another's
    renamed = await _send(client, "PATCH", "alice", f"/lists/{work['id']}", {"name": "Job"})
    assert renamed["name"] == "Job"
    await _get(client, "bob", f"/lists/{work['id']}", expect=404)
    await make_task(client, user="alice", title="Report", list_id=work["id"])
    await _send(client, "DELETE", "alice", f"/lists/{work['id']}", expect=204)
    assert "Job" not in await _lists(client, "alice")
    # Its tasks went to the owner's trash (restoring one brings it back to the Inbox).
    trash = await _get(client, "alice", "/trash")
    assert [task["title"] for task in trash["data"]] == ["Report"]


# -- sharing ------------------------------------------------------------------------------


async def test_an_invitation_is_good_once_and_the_members_are_listed(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    made = await _send(client, "POST", "alice", "/lists", {"name": "Groceries"}, expect=201)
    url = f"/lists/{made['id']}"
    invitation = await _send(client, "POST", "alice", f"{url}/invitations", {"role": "viewer"},
                             expect=201)  # fmt: skip
    assert (invitation["role"], len(invitation["token"]) > 30) == ("viewer", True)
    async with engine.connect() as connection:  # stored only as its hash
        stored = await connection.scalar(text("SELECT token_hash FROM list_invitations"))
    assert stored != invitation["token"]
    await _send(client, "POST", "alice", f"/invitations/{invitation['token']}/accept", expect=409)
    joined = await _send(client, "POST", "bob", f"/invitations/{invitation['token']}/accept")
    assert (joined["role"], joined["shared"]) == ("viewer", True)
    await _send(client, "POST", "carol", f"/invitations/{invitation['token']}/accept", expect=404)
    members = (await _get(client, "bob", f"{url}/members"))["data"]
    assert [(m["user_id"], m["role"]) for m in members] == [("alice", "owner"), ("bob", "viewer")]
    await _get(client, "carol", f"{url}/members", expect=404)
    # Revoked and expired invitations are gone too.
    revoked = await _send(client, "POST", "alice", f"{url}/invitations", {"role": "editor"},
                          expect=201)  # fmt: skip
    await _send(client, "DELETE", "alice", f"{url}/invitations/{revoked['token']}", expect=204)
    await _send(client, "POST", "carol", f"/invitations/{revoked['token']}/accept", expect=404)
    late = await _send(client, "POST", "alice", f"{url}/invitations", {"role": "editor"},
                       expect=201)  # fmt: skip
    async with engine.begin() as connection:
        await connection.execute(text("UPDATE list_invitations SET expires_at = now()"))
    await _send(client, "POST", "carol", f"/invitations/{late['token']}/accept", expect=404)
    # Only the owner shares, renames or deletes.
    await _send(client, "POST", "bob", f"{url}/invitations", {"role": "editor"}, expect=403)
    await _send(client, "PATCH", "bob", url, {"name": "Mine"}, expect=403)
    await _send(client, "DELETE", "bob", url, expect=403)


async def test_a_viewer_reads_and_an_editor_writes_every_way(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    list_id = await _groceries(client)
    milk = await make_task(client, user="bob", title="Milk", list_id=list_id)
    assert [title for _, title in await _titles(client, "carol")] == ["Milk"]
    task = f"/tasks/{milk['id']}"
    refused = await _send(client, "PATCH", "carol", task, {"title": "Oat milk"}, expect=403)
    assert "viewer of list “Groceries”" in refused["detail"]
    for method, path, body in (
        ("POST", "/tasks", {"title": "Eggs", "list_id": list_id}),
        ("PUT", task, {"priority": "high"}),
        ("PATCH", f"{task}/complete", {"completed": True}),
        ("PATCH", task, {"assignee_id": "carol"}),
        ("DELETE", task, None),
    ):
        await _send(client, method, "carol", path, body, expect=403)
    await _send(client, "DELETE", "bob", task, expect=204)  # an editor deletes...
    await _send(client, "POST", "carol", f"{task}/restore", expect=403)
    await _send(client, "DELETE", "carol", f"/trash/{milk['id']}", expect=403)
    assert [t["title"] for t in (await _get(client, "carol", "/trash"))["data"]] == []
    assert [t["title"] for t in (await _get(client, "bob", "/trash"))["data"]] == ["Milk"]
    await _send(client, "POST", "bob", f"{task}/restore")  # ...and restores
    # Moving it into a list where one is only a viewer is refused as well.
    await _send(client, "PATCH", "bob", task, {"list_id": list_id})
    own = await _send(client, "POST", "carol", "/lists", {"name": "Carol's"}, expect=201)
    await _send(client, "PATCH", "carol", task, {"list_id": own["id"]}, expect=403)
    assert [title for _, title in await _titles(client, "alice")] == ["Milk"]


async def test_a_viewer_cannot_change_a_task_through_the_model_the_stub_or_mcp(
    app: FastAPI, client: httpx.AsyncClient, make_settings: Any, model: FakeOpenAI
) -> None:
    list_id = await _groceries(client)
    milk = await make_task(client, user="alice", title="Milk", list_id=list_id)
    number = next(n for n, title in await _titles(client, "carol") if title == "Milk")
    for said in (f"mark task {number} as done", f"delete task {number}",
                 f"rename task {number} to Soy milk", f"move task {number} to friday"):  # fmt: skip
        answer = await chat(client, said, user="carol")
        assert "viewer" in answer["response"], (said, answer["response"])
    async with mcp_session(f"{LOCAL}/mcp", token_for("carol"), app=app) as carol:
        refused = await carol.call_tool("complete_todo", {"todo_id": str(number)})
        assert refused.is_error
        added = await carol.call_tool("add_todo", {"title": "Eggs", "list": "Groceries"})
        assert added.is_error
    settings = make_settings(openai_api_key="sk-test", openai_base_url=model.base_url)
    async with serving(settings) as agent:
        model.script(
            tool_calls(
                call("update_todo", {"todo_id": str(number), "title": "pwned"}),
                call("delete_todo", {"todo_id": milk["id"]}),
                call("add_todo", {"title": "Eggs", "list": "groceries"}),
            ),
            reply("Done"),
        )
        answer = await chat(agent, "change everything", user="carol")
    assert [r["result"]["status"] for r in answer["tool_results"]] == ["error", "error", "error"]
    assert all("viewer" in r["result"]["error"] for r in answer["tool_results"])
    assert [title for _, title in await _titles(client, "alice")] == ["Milk"]
    assert (await _get(client, "alice", f"/tasks/{milk['id']}"))["completed"] is False


# -- numbers ------------------------------------------------------------------------------


async def test_each_member_sees_a_shared_task_under_their_own_number(
    client: httpx.AsyncClient,
) -> None:
    for title in ("a", "b", "c"):
        await make_task(client, user="alice", title=title)
    await make_task(client, user="bob", title="bob's own")
    list_id = await _groceries(client)
    milk = await make_task(client, user="bob", title="Milk", list_id=list_id)
    assert milk["number"] == 2  # Bob's next
    assert (4, "Milk") in await _titles(client, "alice")  # after her own three
    assert await _titles(client, "carol") == [(1, "Milk")]
    # "complete task 1" is one task for each person: Carol's 1 is the milk, Alice's is "a".
    await _send(client, "PATCH", "bob", "/tasks/2/complete", {"completed": True})
    shown = {title: n for n, title in await _titles(client, "alice", status="completed")}
    assert shown == {"Milk": 4}


async def test_numbers_stay_personal_and_distinct_under_concurrent_creation(
    client: httpx.AsyncClient,
) -> None:
    list_id = await _groceries(client)

    async def create(user: str, n: int, shared: bool) -> None:
        fields = {"list_id": list_id} if shared else {}
        await make_task(client, user=user, title=f"{user} {n}", **fields)

    await asyncio.gather(
        *(create(user, n, n % 2 == 0) for n in range(12) for user in ("alice", "bob"))
    )
    for user in ("alice", "bob", "carol"):
        numbers = [n for n, _ in await _titles(client, user, limit=100)]
        assert len(numbers) == len(set(numbers)), user
    alice = [n for n, _ in await _titles(client, "alice", limit=100)]
    assert sorted(alice) == list(range(1, 19))  # her 12 and Bob's 6 shared: from 1, no gap
    assert len(await _titles(client, "carol", limit=100)) == 12  # the shared ones


# -- events -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(
    database_url: str, engine: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    env = server_env(database_url, EVENTS_KEEPALIVE_S="0.5", REMINDER_POLL_S="0.2")
    with ServerProcess(env, log=tmp_path_factory.mktemp("lists") / "serve.log") as process:
        yield process


async def test_one_event_per_member_with_their_number_and_removal_cuts_the_stream_off(
    server: ServerProcess,
) -> None:
    run = uuid.uuid4().hex[:6]
    alice, bob = f"alice-{run}", f"bob-{run}"
    async with streaming(server) as http:
        await make_task(http, user=alice, title="alice's own")
        made = await _send(http, "POST", alice, "/lists", {"name": "Groceries"}, expect=201)
        await _share(http, alice, made["id"], bob, "editor")
        async for on_bob in open_stream(http, bob):
            async for on_alice in open_stream(http, alice):
                milk = await make_task(http, user=bob, title="Milk", list_id=made["id"])
                for stream, who, number in ((on_alice, alice, 2), (on_bob, bob, 1)):
                    event = await stream.next()
                    assert (event["event"], event["data"]["data"]["user_id"]) == (
                        "task.created",
                        who,
                    )
                    assert event["data"]["data"]["task"]["number"] == number
                await _send(http, "DELETE", alice, f"/lists/{made['id']}/members/{bob}",
                            expect=204)  # fmt: skip
                for stream in (on_alice, on_bob):
                    removed = await stream.next()
                    assert removed["event"] == "list.member_removed"
                    assert removed["data"]["data"]["member"]["user_id"] == bob
                # Cut off at once: the next change reaches Alice, never Bob.
                await _send(http, "PATCH", alice, f"/tasks/{milk['id']}", {"title": "Oat milk"})
                assert (await on_alice.next())["event"] == "task.updated"
                with pytest.raises(TimeoutError):
                    await on_bob.next(timeout_s=1.5)
                await _get(http, bob, f"/tasks/{milk['id']}", expect=404)
                await _send(http, "PATCH", bob, f"/tasks/{milk['id']}", {"title": "x"},
                            expect=404)  # fmt: skip
                break
            break


async def test_a_reminder_goes_to_the_assignee_else_to_the_creator(
    app: FastAPI, client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    list_id = await _groceries(client)
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assigned = await make_task(client, user="alice", title="For Bob", list_id=list_id,
                               remind_at=later)  # fmt: skip
    await _send(client, "PATCH", "alice", f"/tasks/{assigned['id']}", {"assignee_id": "bob"})
    await _send(client, "PATCH", "alice", f"/tasks/{assigned['id']}", {"assignee_id": "dave"},
                expect=422)  # not a member  # fmt: skip
    await make_task(client, user="bob", title="Bob's own", list_id=list_id, remind_at=later)
    async with engine.begin() as connection:
        await connection.execute(text("UPDATE tasks SET remind_at = now() - interval '1 s'"))
    context: AppContext = app.state.context
    # Fired here, or by a clock the move woke first (this app's, or the module's server's).
    await context.reminders.fire_due()

    async def reminded() -> list[tuple[str, str]]:
        async with engine.connect() as connection:
            rows = await connection.execute(
                text(
                    "SELECT user_id, data->'task'->>'title' FROM events WHERE type = 'reminder.due'"
                )
            )
            return sorted((row[0], row[1]) for row in rows)

    async def both() -> bool:
        return len(await reminded()) >= 2

    await until(both, timeout_s=10, message="the reminders did not fire")
    assert await reminded() == [("bob", "Bob's own"), ("bob", "For Bob")]


async def test_the_calendar_feed_has_the_shared_lists_too(client: httpx.AsyncClient) -> None:
    list_id = await _groceries(client)
    await make_task(client, user="alice", title="Party", list_id=list_id,
                    due_at="2031-03-01T10:00:00Z")  # fmt: skip
    url = (await _send(client, "POST", "carol", "/calendar", expect=201))["url"]
    assert "Party" in (await client.get(httpx.URL(url).path)).text


# -- the second wall: row-level security ---------------------------------------------------


async def test_a_query_that_forgets_its_user_filter_still_sees_only_what_the_user_reaches(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    list_id = await _groceries(client)
    await make_task(client, user="alice", title="Alice's secret")
    await make_task(client, user="bob", title="Bob's secret")
    await make_task(client, user="alice", title="Milk", list_id=list_id)
    await chat(client, "add call the plumber", user="alice")
    await chat(client, "add call the vet", user="bob")
    database = app.state.context.database
    unfiltered = "SELECT title FROM tasks ORDER BY title"
    async with database.transaction(as_user="bob") as db:
        titles = [row[0] for row in (await db.exec(text(unfiltered))).all()]
        users = (await db.exec(text("SELECT id FROM users"))).all()
        messages = (await db.exec(text("SELECT DISTINCT user_id FROM agent_messages"))).all()
        lists = (await db.exec(text("SELECT name FROM lists ORDER BY name"))).all()
    assert titles == ["Bob's secret", "Call the vet", "Milk"]
    assert [row[0] for row in users] == ["bob"]
    assert [row[0] for row in messages] == ["bob"]
    assert [row[0] for row in lists] == ["Groceries", "Inbox"]
    # With no acting user at all, nothing; and the role is the policies', not the login's.
    async with database.transaction(as_user="") as db:
        assert (await db.exec(text("SELECT count(*) FROM tasks"))).one()[0] == 0
        assert (await db.exec(text("SELECT current_user"))).one()[0] == "todo_agent_app"
    # Carol, a viewer, changes nothing however she asks the database itself: an update
    # finds no row she may change, an insert into the list is refused.
    async with database.transaction(as_user="carol") as db:
        changed = await db.exec(text("UPDATE tasks SET title = 'x' WHERE true RETURNING id"))
        assert changed.all() == []
    insert = text("INSERT INTO tasks (id, list_id, title) VALUES (gen_random_uuid(), :list, 'x')")
    with pytest.raises(Exception, match="row-level security"):
        async with database.transaction(as_user="carol") as db:
            await db.exec(insert, params={"list": list_id})


async def test_every_table_of_peoples_rows_has_forced_row_level_security_and_policies(
    engine: AsyncEngine,
) -> None:
    """So that a table added later cannot forget it: every table but Alembic's own, with a
    policy for the service's role wherever that role may read it at all (a table only the
    worker touches, such as the identity provider's message ids, has none for it)."""
    async with engine.connect() as connection:
        tables = (
            await connection.execute(
                text(
                    "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,"
                    " (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid"
                    "  AND ('todo_agent_app'::regrole = ANY(p.polroles)"
                    "   OR NOT has_table_privilege('todo_agent_app', c.oid,"
                    "                              'SELECT, INSERT, UPDATE, DELETE')))"
                    " FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace"
                    " AND c.relkind = 'r' AND c.relname <> 'alembic_version' ORDER BY 1"
                )
            )
        ).all()
        bypass = await connection.scalar(
            text("SELECT rolbypassrls OR rolsuper FROM pg_roles WHERE rolname = 'todo_agent_app'")
        )
    assert bypass is False
    assert len(tables) >= 15
    assert {"documents", "passages", "tasks", "memories"} <= {name for name, *_ in tables}
    unprotected = [name for name, enabled, forced, policies in tables
                   if not (enabled and forced and policies)]  # fmt: skip
    assert unprotected == []


# -- the stub ------------------------------------------------------------------------------


async def test_the_stub_reads_lists_in_plain_words(client: httpx.AsyncClient) -> None:
    async def say(message: str, user: str = "alice") -> str:
        return str((await chat(client, message, user=user))["response"])

    assert await say("make a list called Groceries") == "Made the list Groceries."
    assert "Added task 1: Milk" in await say("add milk to groceries")
    assert "Added task 2: Eggs" in await say("add eggs to the groceries list")
    assert "Added task 3: Bread" in await say("add bread #groceries")
    assert "Added task 4: Stamps" in await say("add stamps #errands")  # no such list: a tag
    stamps = await _get(client, "alice", "/tasks/4")
    assert stamps["tags"] == ["errands"]
    listed = await say("what's on the groceries list?")
    assert listed.splitlines() == ["On Groceries:", "- #1 Milk", "- #2 Eggs", "- #3 Bread"]
    assert await say("create a new list named Work") == "Made the list Work."
    assert "Updated task 4: Stamps" in await say("move task 4 to work")
    lists = await _lists(client, "alice")
    assert lists["Work"]["pending_count"] == 1
    assert "Unknown" not in await say("move task 4 to friday")
    said = await say("move task 4 to the moon")
    assert "one of your lists" in said
    groceries = lists["Groceries"]["id"]
    await _share(client, "alice", groceries, "sam", "editor")
    await client.patch("/api/sam/settings", json={"display_name": "Sam"}, headers=auth("sam"))
    assert "Assigned task 1 (Milk) to Sam" in await say("assign the milk to Sam")
    milk = await _get(client, "alice", "/tasks/1")
    assert milk["assignee_id"] == "sam"
    assert "no one's now" in await say("unassign task 1")
