"""Past the window: a long session's older messages fold into its digest, and between two
folds the requests the service sends the model only grow at their end, byte for byte (what
a provider's prompt cache needs). Read from what the scripted model was sent."""

import itertools
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.services.digest.prompt import DIGEST_HEADER
from backend.settings import Settings
from tests.chat_helpers import CLOCK_NOTE, chat, words
from tests.conftest import auth, serving
from tests.fake_openai import FakeOpenAI, RecordedRequest, call, error, reply, tool_calls
from tests.test_export import export_of
from tests.test_import import import_into


def _bytes(message: dict[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False)


def _grows_at_its_end(before: RecordedRequest, after: RecordedRequest) -> bool:
    """Whether `after` sends everything `before` sent, the same bytes in the same order."""
    earlier, later = before.body, after.body
    if json.dumps(earlier["tools"]) != json.dumps(later["tools"]):
        return False
    sent = [_bytes(m) for m in earlier["messages"]]
    return [_bytes(m) for m in later["messages"][: len(sent)]] == sent


async def _digest(client: httpx.AsyncClient, session_id: str | None) -> str | None:
    response = await client.get(f"/api/alice/sessions/{session_id}", headers=auth("alice"))
    assert response.status_code == 200, response.text
    digest: str | None = response.json()["digest"]
    return digest


@pytest.fixture
async def short_window(
    model_settings: Settings, engine: AsyncEngine
) -> AsyncIterator[httpx.AsyncClient]:
    """The app with the scripted model and a window of 6 messages (3 turns)."""
    async with serving(model_settings.model_copy(update={"agent_history_messages": 6})) as client:
        await client.patch("/api/alice/settings", json={"confirm": "never"}, headers=auth("alice"))
        yield client


async def test_between_folds_each_request_is_the_one_before_grown_at_its_end(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    """Tool calls (their arguments as the model wrote them, keys unsorted, parallel calls),
    a turn the stub answered while the model was down, and the time, which goes with each
    message: nothing already sent changes when it is sent again."""
    model.script(
        tool_calls(call("add_todo", '{"title": "Buy milk",  "priority": "high"}')),
        reply("Added task 1."),
        "Hello!",
        tool_calls(
            call("add_todo", {"tags": ["home"], "title": "Call mom"}),
            call("list_todos", {"status": "pending"}),
        ),
        reply("Added and listed."),
        error(401, message="bad key"),  # the stub answers this turn
        tool_calls(call("complete_todo", {"todo_id": "2"})),
        reply("Done."),
        "Anything else?",
    )
    session_id = None
    for text in (
        "Add buy milk, high priority",
        "hi",
        "Add call mom and show my list",
        "Add a task to water the plants",
        "Mark 2 as done",
        "thanks",
    ):
        answer = await chat(agent_client, text, session_id=session_id)
        session_id = answer["session_id"]
    assert answer["response"] == "Anything else?"
    requests = model.requests
    assert len(requests) == 9  # the stub's turn made one request, which failed
    assert all(_grows_at_its_end(before, after) for before, after in itertools.pairwise(requests))
    last = requests[-1].body["messages"]
    # The stub's call is there as the stub made it, its result right after it.
    [stub_call] = [
        m for m in last if m.get("tool_calls") and m["tool_calls"][0]["id"][:5] == "stub_"
    ]
    assert (
        json.loads(stub_call["tool_calls"][0]["function"]["arguments"])["title"]
        == "Water the plants"
    )
    # Each of the person's messages starts with when they sent it; the context does not say
    # the time, so it is the same every turn.
    assert all(CLOCK_NOTE.match(m["content"]) for m in last if m["role"] == "user")
    assert len({json.dumps(r.body["messages"][:2]) for r in requests}) == 1
    assert await _digest(agent_client, session_id) is None  # 12 messages: nothing folded


async def test_past_the_window_the_oldest_messages_fold_into_the_digest_in_steps(
    short_window: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    client = short_window
    turns = [
        ("Add buy milk", tool_calls(call("add_todo", {"title": "Buy milk"})), "Added 1."),
        ("Add call mom", tool_calls(call("add_todo", {"title": "Call mom"})), "Added 2."),
        ("Milk is done", tool_calls(call("complete_todo", {"todo_id": "1"})), "Done."),
        (
            "Call mom tonight, not just whenever",
            tool_calls(call("update_todo", {"todo_id": "2", "title": "Call mom tonight"})),
            "Renamed.",
        ),
        ("thanks", None, "You're welcome."),
        ("Delete the call", tool_calls(call("delete_todo", {"todo_id": "2"})), "Deleted."),
        ("what's left?", None, "Nothing pending."),
    ]
    session_id = None
    digests: list[str | None] = []
    firsts: list[int] = []  # each turn's first request
    for text, calls, answer_text in turns:
        firsts.append(len(model.requests))
        model.script(*([calls] if calls else []), reply(answer_text))
        answer = await chat(client, text, session_id=session_id)
        session_id = answer["session_id"]
        digests.append(await _digest(client, session_id))

    # 2 messages a turn; the fourth turn would send 7, past 6: it folds the first two
    # turns (4 messages, up to the person's next message), the sixth the next two.
    assert [d is not None for d in digests] == [False, False, False, True, True, True, True]
    changed = [i for i in range(1, len(digests)) if digests[i] != digests[i - 1]]
    assert changed == [3, 5]  # never on two turns running
    assert digests[3] == "\n".join(
        [
            'The person asked: "Add buy milk"',
            'Added task 1 "Buy milk".',
            'The person asked: "Add call mom"',
            'Added task 2 "Call mom".',
        ]
    )
    assert digests[5] == "\n".join(
        [
            digests[3] or "",
            'The person asked: "Milk is done"',
            'Completed task 1 "Buy milk".',
            'The person asked: "Call mom tonight, not just whenever"',
            'Changed task 2 "Call mom tonight".',
        ]
    )
    for turn, first in enumerate(firsts):
        messages = model.requests[first].body["messages"]
        recent = messages[3:] if digests[turn] else messages[2:]
        # Never more than AGENT_HISTORY_MESSAGES stored messages: each a person's message,
        # or an answer (its calls and their results, then its words).
        stored = [
            m for m in recent if m["role"] == "user" or (m["role"] == "assistant" and m["content"])
        ]
        assert len(stored) <= 6, turn
        if digest := digests[turn]:  # the digest, as the session has it, after the context
            assert messages[2] == {"role": "system", "content": DIGEST_HEADER + digest}
            assert recent[0]["role"] == "user"
    # Between folds the requests grow at their end; a fold starts a new prefix.
    requests = model.requests
    grows = [_grows_at_its_end(a, b) for a, b in itertools.pairwise(requests)]
    assert [i + 1 for i, grew in enumerate(grows) if not grew] == [firsts[3], firsts[5]]
    # The last request: the digest, then the fifth turn on (what was said, as said).
    last = model.requests[-1].body["messages"]
    assert [words(m) for m in last if m["role"] == "user"] == [
        "thanks",
        "Delete the call",
        "what's left?",
    ]


async def test_the_stub_writes_the_digest_and_goes_on_from_the_tasks_it_names(
    settings: Settings, engine: AsyncEngine
) -> None:
    """Without a model, the service writes the digest from the stored calls; answering
    after a fold, the stub still finds the earlier tasks (through its tools)."""
    async with serving(settings.model_copy(update={"agent_history_messages": 4})) as client:
        session_id = None
        for text in (
            "Add a task to buy groceries",
            "Add a task to call the plumber",
            "Mark task 1 as complete",
            "Show me all my tasks",
        ):
            answer = await chat(client, text, session_id=session_id)
            assert answer["using_stub"] is True
            session_id = answer["session_id"]
        digest = await _digest(client, session_id)
        assert digest is not None
        assert 'Added task 1 "Buy groceries".' in digest
        assert 'Added task 2 "Call the plumber".' in digest
        assert 'The person asked: "Add a task to buy groceries"' in digest
        pending = await chat(client, "What's pending?", session_id=session_id)
        assert "Call the plumber" in pending["response"]
        assert "Buy groceries" not in pending["response"]


async def test_a_short_session_has_no_digest_and_another_users_is_not_found(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    session_id = (await chat(agent_client, "hello"))["session_id"]
    assert await _digest(agent_client, session_id) is None
    foreign = await agent_client.get(f"/api/bob/sessions/{session_id}", headers=auth("bob"))
    assert foreign.status_code == 404


async def test_export_carries_the_digest_and_import_goes_on_after_it(
    short_window: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    client = short_window
    session_id = None
    for number in range(4):  # the fourth turn folds the first two
        model.script(
            tool_calls(call("add_todo", {"title": f"Task {number}"})), reply(f"Added {number}.")
        )
        session_id = (await chat(client, f"add task {number}", session_id=session_id))["session_id"]
    digest = await _digest(client, session_id)
    assert digest is not None
    document = await export_of(client, "alice")
    [exported] = document["sessions"]
    assert exported["digest"] == digest
    # The last message it holds: the second turn's answer.
    assert exported["digest_through"] == exported["messages"][3]["id"]

    imported = await import_into(client, "ann", document)
    assert imported.status_code == 200, imported.text
    listing = await client.get("/api/ann/sessions", headers=auth("ann"))
    [copy] = listing.json()["data"]
    shown = await client.get(f"/api/ann/sessions/{copy['id']}", headers=auth("ann"))
    assert shown.json()["digest"] == digest
    # The next turn there sends the digest and only the messages after it.
    model.script(reply("Hello again."))
    await chat(client, "hello", user="ann", session_id=copy["id"])
    messages = model.last_messages()
    assert messages[2] == {"role": "system", "content": DIGEST_HEADER + digest}
    assert [words(m) for m in messages[3:] if m["role"] == "user"] == [
        "add task 2",
        "add task 3",
        "hello",
    ]

    # A digest naming a message the session does not have is refused, clearly.
    exported["digest_through"] = "00000000-0000-0000-0000-000000000001"
    refused = await import_into(client, "ann", document)
    assert refused.status_code == 422
    assert "digest_through" in refused.text


async def test_a_fold_is_written_once_whoever_finishes_with_it(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """Two attempts at folding the same messages (a turn taken over by another replica,
    both finishing): the first to store its reply writes the fold; the other, which started
    from the old fold position, writes its reply but not its fold."""
    session_id = (await chat(client, "Add a task to buy milk"))["session_id"]
    connection = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        [first, second] = await connection.fetch(
            "SELECT seq FROM agent_messages WHERE session_id = $1 ORDER BY seq",
            uuid.UUID(session_id),
        )
        for attempt, (digest, through) in enumerate(
            [("the first attempt's digest", first["seq"]), ("the second's", second["seq"])]
        ):
            turn = uuid.uuid4()
            await connection.execute(
                "UPDATE agent_sessions SET lease_owner = $2,"
                " lease_expires_at = now() + interval '1 minute' WHERE id = $1",
                uuid.UUID(session_id),
                turn,
            )
            finished = await connection.fetchrow(
                "SELECT * FROM todo_finish_turn('alice', $1, $2, $3, NULL, $4, true, 0, 0, 0, 0,"
                " $5, $6, 0)",
                uuid.UUID(session_id),
                uuid.uuid4(),
                turn,
                f"reply {attempt}",
                digest,
                through,
            )
            assert finished["taken_over"] is False
        stored = await connection.fetchrow(
            "SELECT digest, digest_seq FROM agent_sessions WHERE id = $1", uuid.UUID(session_id)
        )
    finally:
        await connection.close()
    assert (stored["digest"], stored["digest_seq"]) == ("the first attempt's digest", first["seq"])
    assert await _digest(client, session_id) == "the first attempt's digest"
    replies = await client.get(f"/api/alice/sessions/{session_id}/messages", headers=auth("alice"))
    assert [m["content"] for m in replies.json()["data"]][-2:] == ["reply 0", "reply 1"]
