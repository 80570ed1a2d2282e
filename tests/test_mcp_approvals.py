"""Ask first, over MCP: a call the user's `confirm` setting holds asks a 2026-07-28 client
that declared elicitation (an `input_required` result with a form elicitation), and runs
only when the answer is `accept`. The requestState is sealed with MCP_STATE_SECRET, bound to
the user and the call, expires, and works once. Other clients get the call run directly.

Driven by the MCP SDK's own `Client` (which answers questions through its elicitation
callback and retries by itself), and by its `ClientSession` where a test plays the client
that replays, tampers or waits.
"""

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI
from mcp import types
from mcp.client import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types.version import LATEST_MODERN_VERSION
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.settings import Settings
from tests.conftest import TEST_MCP_STATE_SECRET, auth, server_env, token_for
from tests.factories import make_task
from tests.servers import ServerProcess
from tests.test_mcp import LOCAL, as_alice, rest, running, structured, tool_error

ACCEPT = types.ElicitResult(action="accept", content={"confirm": True})
DECLINE = types.ElicitResult(action="decline")
CANCEL = types.ElicitResult(action="cancel")


class Person:
    """The user at a client: answers every question with `answer`, and remembers them."""

    def __init__(self, answer: types.ElicitResult = ACCEPT) -> None:
        self.answer = answer
        self.asked: list[types.ElicitRequestFormParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.asked.append(params)
        return self.answer


@asynccontextmanager
async def modern(
    app: FastAPI | None,
    person: Person | None,
    *,
    user: str = "alice",
    url: str = f"{LOCAL}/mcp",
) -> AsyncIterator[Client]:
    """The SDK's client at 2026-07-28 (no handshake); with a `person`, it declares
    elicitation and answers through them."""
    headers = {"Authorization": f"Bearer {token_for(user)}"}
    transport = httpx2.ASGITransport(app=app) if app is not None else None
    async with (
        httpx2.AsyncClient(headers=headers, transport=transport, timeout=30) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=LATEST_MODERN_VERSION,
            elicitation_callback=person,
        ) as client,
    ):
        yield client


async def ask(client: Client, name: str, arguments: dict[str, Any]) -> str:
    """The first round of a call, as a client driving the rounds itself sees it: one form
    elicitation, and the requestState to send back with the answer."""
    asked = await client.session.call_tool(name, arguments, allow_input_required=True)
    assert isinstance(asked, types.InputRequiredResult), asked
    [question] = (asked.input_requests or {}).values()
    assert isinstance(question, types.ElicitRequest)
    assert isinstance(question.params, types.ElicitRequestFormParams)
    assert asked.request_state is not None
    return asked.request_state


async def answer(
    client: Client,
    name: str,
    arguments: dict[str, Any],
    state: str,
    response: types.ElicitResult = ACCEPT,
) -> types.CallToolResult:
    """The retry that brings the answer."""
    result = await client.session.call_tool(
        name,
        arguments,
        input_responses={"confirm": response},
        request_state=state,
        allow_input_required=True,
    )
    assert isinstance(result, types.CallToolResult), result
    return result


def refused(error: MCPError) -> None:
    assert error.code == types.INVALID_PARAMS
    assert error.message == "Invalid or expired requestState"


async def titles(app: FastAPI, where: str = "tasks", user: str = "alice") -> list[str]:
    async with rest(app) as http:
        response = await http.get(f"/api/{user}/{where}", headers=auth(user))
    assert response.status_code == 200, response.text
    return [task["title"] for task in response.json()["data"]]


async def deletions(engine: AsyncEngine, user: str = "alice") -> int:
    async with engine.connect() as connection:
        count = await connection.scalar(
            text("SELECT count(*) FROM events WHERE user_id = :user AND type = 'task.deleted'"),
            {"user": user},
        )
    return int(count or 0)


async def add(app: FastAPI, title: str, user: str = "alice") -> dict[str, Any]:
    async with rest(app) as http:
        return await make_task(http, user=user, title=title)


async def set_confirm(app: FastAPI, confirm: str, user: str = "alice") -> None:
    async with rest(app) as http:
        response = await http.patch(
            f"/api/{user}/settings", json={"confirm": confirm}, headers=auth(user)
        )
    assert response.status_code == 200, response.text


@pytest.fixture
async def app(settings: Settings, engine: AsyncEngine) -> AsyncIterator[FastAPI]:
    async with running(settings) as app:
        yield app


# --------------------------------------------------------------------------- the answers


async def test_a_delete_asks_first_and_accept_moves_it_to_the_trash(
    app: FastAPI, engine: AsyncEngine
) -> None:
    await add(app, "Buy milk")
    person = Person(ACCEPT)
    async with modern(app, person) as alice:
        deleted = structured(await alice.call_tool("delete_todo", {"todo_id": "1"}))
    assert (deleted["status"], deleted["number"], deleted["title"]) == ("deleted", 1, "Buy milk")
    [question] = person.asked
    assert question.message == "Delete task 1 “Buy milk”? It goes to the trash."
    assert question.requested_schema["properties"]["confirm"]["type"] == "boolean"
    assert question.requested_schema["required"] == ["confirm"]
    assert await titles(app) == []
    assert await titles(app, "trash") == ["Buy milk"]
    assert await deletions(engine) == 1


@pytest.mark.parametrize(("response", "status"), [(DECLINE, "declined"), (CANCEL, "cancelled")])
async def test_decline_or_cancel_deletes_nothing_and_says_so(
    app: FastAPI, engine: AsyncEngine, response: types.ElicitResult, status: str
) -> None:
    await add(app, "Buy milk")
    person = Person(response)
    async with modern(app, person) as alice:
        result = await alice.call_tool("delete_todo", {"todo_id": "1"})
    # A result, not an error (and the SDK's client checked it against the output schema).
    assert structured(result) == {
        "status": status,
        "summary": "Delete task 1 “Buy milk”",
        "message": "Nothing was deleted.",
    }
    assert len(person.asked) == 1
    assert await titles(app) == ["Buy milk"]
    assert await deletions(engine) == 0


async def test_accept_with_its_box_unticked_deletes_nothing(app: FastAPI) -> None:
    await add(app, "Buy milk")
    unticked = types.ElicitResult(action="accept", content={"confirm": False})
    async with modern(app, Person(unticked)) as alice:
        result = structured(await alice.call_tool("delete_todo", {"todo_id": "1"}))
    assert (result["status"], result["message"]) == ("declined", "Nothing was deleted.")
    assert await titles(app) == ["Buy milk"]


async def test_emptying_the_trash_asks_too(app: FastAPI) -> None:
    await add(app, "Old")
    person = Person(ACCEPT)
    async with modern(app, person) as alice:
        await alice.call_tool("delete_todo", {"todo_id": "1"})
        purged = structured(await alice.call_tool("purge_trash", {"todo_id": None}))
    assert (purged["status"], purged["count"]) == ("purged", 1)
    assert [q.message for q in person.asked] == [
        "Delete task 1 “Old”? It goes to the trash.",
        "Empty the trash for good (1 tasks)? This cannot be undone.",
    ]
    assert await titles(app, "trash") == []


# --------------------------------------------------------------------------- who is asked


async def test_a_call_that_would_fail_fails_as_usual_unasked(app: FastAPI) -> None:
    person = Person(ACCEPT)
    async with modern(app, person) as alice:
        assert "No task" in tool_error(await alice.call_tool("delete_todo", {"todo_id": "99"}))
        assert "todo_id" in tool_error(await alice.call_tool("delete_todo", {}))
    assert person.asked == []


async def test_reading_and_unheld_calls_are_never_asked_about(app: FastAPI) -> None:
    person = Person(DECLINE)
    async with modern(app, person) as alice:
        structured(await alice.call_tool("add_todo", {"title": "Buy milk"}))
        structured(await alice.call_tool("complete_todo", {"todo_id": "1"}))
        structured(await alice.call_tool("list_todos", {}))
    assert person.asked == []


async def test_older_clients_and_clients_without_elicitation_delete_directly(
    app: FastAPI, engine: AsyncEngine
) -> None:
    for title in ("Handshake", "No elicitation"):
        await add(app, title)
    async with as_alice(app) as handshake:  # 2025-11-25: its host asks, as the spec expects
        first = structured(await handshake.call_tool("delete_todo", {"todo_id": "1"}))
    async with modern(app, None) as silent:
        assert silent.protocol_version == LATEST_MODERN_VERSION
        second = structured(await silent.call_tool("delete_todo", {"todo_id": "2"}))
    assert [first["title"], second["title"]] == ["Handshake", "No elicitation"]
    assert await titles(app) == []
    assert await deletions(engine) == 2


async def test_the_users_confirm_setting_decides_what_asks(app: FastAPI) -> None:
    await add(app, "Keep")
    await set_confirm(app, "never")
    person = Person(DECLINE)
    async with modern(app, person) as alice:
        deleted = structured(await alice.call_tool("delete_todo", {"todo_id": "1"}))
        assert (deleted["status"], person.asked) == ("deleted", [])

        await set_confirm(app, "changes")
        declined = structured(await alice.call_tool("add_todo", {"title": "Buy milk"}))
        assert declined == {
            "status": "declined",
            "summary": "Add task “Buy milk”",
            "message": "Nothing was changed.",
        }
        assert [q.message for q in person.asked] == ["Add task “Buy milk”?"]
        structured(await alice.call_tool("list_todos", {}))  # reading never asks
    assert len(person.asked) == 1
    assert await titles(app) == []


async def test_the_default_is_agent_confirm_default(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    async with running(make_settings(agent_confirm_default="never")) as app:
        await add(app, "Buy milk")
        person = Person(DECLINE)
        async with modern(app, person) as alice:
            structured(await alice.call_tool("delete_todo", {"todo_id": "1"}))
        assert person.asked == []
        assert await titles(app) == []


# --------------------------------------------------------------------------- the state


async def test_a_request_state_works_once(app: FastAPI, engine: AsyncEngine) -> None:
    await add(app, "Buy milk")
    call = ("delete_todo", {"todo_id": "1"})
    async with modern(app, Person()) as alice:
        state = await ask(alice, *call)
        deleted = structured(await answer(alice, *call, state))
        assert deleted["status"] == "deleted"
        async with rest(app) as http:  # back from the trash: a replay must not delete it again
            restored = await http.post("/api/alice/tasks/1/restore", headers=auth("alice"))
            assert restored.status_code == 200
        with pytest.raises(MCPError) as replayed:
            await answer(alice, *call, state)
        refused(replayed.value)

        # A declined question is answered too: it cannot be accepted afterwards.
        state = await ask(alice, *call)
        declined = await answer(alice, *call, state, DECLINE)
        assert structured(declined)["status"] == "declined"
        with pytest.raises(MCPError) as accepted_after:
            await answer(alice, *call, state)
        refused(accepted_after.value)
    assert await titles(app) == ["Buy milk"]
    assert await deletions(engine) == 1


async def test_two_answers_at_once_run_the_call_once(app: FastAPI, engine: AsyncEngine) -> None:
    await add(app, "Buy milk")
    call = ("delete_todo", {"todo_id": "1"})
    async with modern(app, Person()) as alice:
        state = await ask(alice, *call)
        outcomes = await asyncio.gather(
            *(answer(alice, *call, state) for _ in range(4)), return_exceptions=True
        )
    done = [o for o in outcomes if isinstance(o, types.CallToolResult)]
    errors = [o for o in outcomes if isinstance(o, MCPError)]
    assert len(done) == 1, outcomes
    assert structured(done[0])["status"] == "deleted"
    assert len(errors) == 3
    for error in errors:
        refused(error)
    assert await deletions(engine) == 1


async def test_a_tampered_request_state_is_refused(app: FastAPI) -> None:
    await add(app, "Buy milk")
    call = ("delete_todo", {"todo_id": "1"})
    async with modern(app, Person()) as alice:
        state = await ask(alice, *call)
        flipped = state[:-6] + ("A" if state[-6] != "A" else "B") + state[-5:]
        for forged in (flipped, state + "x", "v1.not-a-state", '{"user":"alice","nonce":"n"}'):
            with pytest.raises(MCPError) as tampered:
                await answer(alice, *call, forged)
            refused(tampered.value)
        # Nor does it answer another call: it is bound to the tool and its exact arguments.
        await add(app, "Pay rent")
        for other in (("delete_todo", {"todo_id": "2"}), ("purge_trash", {"todo_id": "1"})):
            with pytest.raises(MCPError) as moved:
                await answer(alice, *other, state)
            refused(moved.value)
        # The genuine one still works (none of the above spent it).
        assert structured(await answer(alice, *call, state))["title"] == "Buy milk"
    assert await titles(app) == ["Pay rent"]


async def test_an_expired_request_state_is_refused(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> None:
    async with running(make_settings(mcp_state_ttl_s=0.5)) as app:
        await add(app, "Buy milk")
        call = ("delete_todo", {"todo_id": "1"})
        async with modern(app, Person()) as alice:
            state = await ask(alice, *call)
            await asyncio.sleep(1.0)
            with pytest.raises(MCPError) as late:
                await answer(alice, *call, state)
        refused(late.value)
        assert await titles(app) == ["Buy milk"]


async def test_another_users_request_state_is_refused(app: FastAPI, engine: AsyncEngine) -> None:
    await add(app, "Alice's milk")
    await add(app, "Bob's milk", user="bob")
    call = ("delete_todo", {"todo_id": "1"})  # the same call: each has a task 1
    async with modern(app, Person()) as alice:
        state = await ask(alice, *call)
    async with modern(app, Person(), user="bob") as bob:
        with pytest.raises(MCPError) as foreign:
            await answer(bob, *call, state)
    refused(foreign.value)
    assert await titles(app) == ["Alice's milk"]
    assert await titles(app, user="bob") == ["Bob's milk"]
    assert await deletions(engine, "alice") + await deletions(engine, "bob") == 0


async def test_answered_states_are_forgotten_once_expired(
    app: FastAPI, engine: AsyncEngine
) -> None:
    await add(app, "Buy milk")
    async with modern(app, Person()) as alice:
        await alice.call_tool("delete_todo", {"todo_id": "1"})

    async def kept() -> int:
        async with engine.connect() as connection:
            return int(await connection.scalar(text("SELECT count(*) FROM mcp_request_states")))

    assert await kept() == 1
    await app.state.context.upkeep.once(prune=True)
    assert await kept() == 1  # still within its time: a replay must find it
    async with engine.begin() as connection:
        await connection.execute(
            text("UPDATE mcp_request_states SET expires_at = now() - interval '1 second'")
        )
    await app.state.context.upkeep.once(prune=True)
    assert await kept() == 0


# --------------------------------------------------------------------------- replicas


async def test_another_server_with_the_same_secret_takes_the_answer(
    make_settings: Callable[..., Settings],
    engine: AsyncEngine,
    database_url: str,
    tmp_path: Path,
) -> None:
    settings = make_settings(mcp_state_secret=TEST_MCP_STATE_SECRET)
    call = ("delete_todo", {"todo_id": "1"})
    with ServerProcess(server_env(database_url), log=tmp_path / "other.log") as other:
        async with running(settings) as app:
            await add(app, "Buy milk")
            async with modern(app, Person()) as here:
                state = await ask(here, *call)
        async with modern(None, Person(), url=f"{other.url}/mcp") as there:
            deleted = structured(await answer(there, *call, state))
            with pytest.raises(MCPError) as again:  # and there too, it works once
                await answer(there, *call, state)
    assert (deleted["status"], deleted["title"]) == ("deleted", "Buy milk")
    refused(again.value)
    assert await deletions(engine) == 1
