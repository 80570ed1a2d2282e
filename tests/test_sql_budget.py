"""A chat turn's SQL does not grow with the conversation (the benchmark times it; this
counts it, from the engine's statement events)."""

import json
import uuid
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from backend import metrics
from tests.chat_helpers import chat, chat_stream
from tests.conftest import auth
from tests.factories import make_task
from tests.fake_openai import FakeOpenAI, call, reply, tool_calls


def _statements() -> float:
    [family] = metrics.DB_STATEMENTS.collect()
    return sum(sample.value for sample in family.samples if sample.name.endswith("_total"))


async def _statements_per_turn(client: httpx.AsyncClient, session_id: str) -> float:
    before = _statements()
    await chat(client, "one more", session_id=session_id)
    return _statements() - before


async def test_a_no_tool_turn_costs_the_same_few_statements_at_any_history_length(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    short = (await chat(agent_client, "short"))["session_id"]
    long = (await chat(agent_client, "long"))["session_id"]
    for i in range(60):
        await chat(agent_client, f"message {i}", session_id=long)
    counts = {
        await _statements_per_turn(agent_client, short),
        await _statements_per_turn(agent_client, long),
    }
    assert counts == {2}  # the start of the turn, then the reply


async def test_a_streamed_turn_nobody_joins_costs_no_more_than_a_plain_one(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    """Its events stay in the memory of the replica running it until another replica asks
    for them (turn_streams.py): no statement, no notification."""
    session_id = (await chat(agent_client, "first"))["session_id"]
    before = _statements()
    events = await chat_stream(agent_client, "streamed", session_id=session_id)
    assert [event for event, _ in events][-1] == "done"
    assert _statements() - before == 2


def _rows_read(plan: dict[str, Any], table: str) -> float:
    """Rows the plan's scans of `table` returned, over all their loops."""
    own = plan["Actual Rows"] * plan["Actual Loops"] if plan.get("Relation Name") == table else 0
    return own + sum(_rows_read(child, table) for child in plan.get("Plans", ()))


@pytest.mark.parametrize(
    "guess",
    ["measured", "short sessions, many users, slow disks", "sessions of a hundred, many users"],
)
async def test_the_history_read_does_not_grow_with_the_session_whatever_the_planner_guesses(
    engine: AsyncEngine, database_url: str, guess: str
) -> None:
    """The turn's history read (`todo_history`, which `todo_open_turn` calls) is planned
    once and may run on a generic plan, which cannot know which session it reads, nor how
    long that session is: the planner guesses from the table's statistics and costs. Told
    sessions are short (2 messages on average), users many (100 messages each) and random
    reads dear, `ORDER BY seq DESC LIMIT n` read the whole session and sorted it (as a
    generic plan did in the benchmark's database: 5 ms at 10,000 messages); the history is
    read by index probes either way (the newest message too: under row-level security
    a guess of one row read the session and sorted it, 4 ms at 10,000 messages)."""
    session = uuid.uuid4()
    limit = 19
    connection = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    arranged = connection.transaction()  # all of it rolled back: statistics, settings, rows
    await arranged.start()
    try:
        body, settings = await connection.fetchrow(
            "SELECT prosrc, proconfig FROM pg_proc WHERE proname = 'todo_history'"
        )
        await connection.execute("INSERT INTO users (id) VALUES ('hist')")
        await connection.execute(
            "INSERT INTO agent_sessions (id, user_id, title) VALUES ($1, 'hist', 'long')", session
        )
        await connection.execute(
            """INSERT INTO agent_messages (id, session_id, user_id, role, content)
               SELECT gen_random_uuid(), $1, 'hist',
                      CASE WHEN i % 2 = 0 THEN 'assistant' ELSE 'user' END, 'message ' || i
               FROM generate_series(1, 3000) AS i""",
            session,
        )
        if guess != "measured":
            # Sessions of 2 (or 100, as in the benchmark's database) messages, users of 100.
            per_session = -0.5 if guess.startswith("short") else -0.01
            for column, distinct in (("session_id", per_session), ("user_id", -0.01)):
                await connection.execute(
                    f"ALTER TABLE agent_messages ALTER COLUMN {column} "
                    f"SET (n_distinct = {distinct})"
                )
            if guess.startswith("short"):
                await connection.execute("SET LOCAL random_page_cost = 40")
        await connection.execute("ANALYZE agent_messages")
        await connection.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        for setting in settings or ():  # the function's own (`ALTER FUNCTION ... SET`)
            name, _, value = setting.partition("=")
            await connection.execute(f"SET LOCAL {name} = '{value}'")
        # As the service reads it: its role, under row-level security, whose filter on the
        # user makes the planner guess even fewer of the session's rows are read.
        await connection.execute("SET LOCAL ROLE todo_agent_app")
        await connection.execute("SELECT set_config('todo_agent.user_id', 'hist', true)")
        # The function's own query (`BEGIN RETURN (...); END`), its parameters in place of
        # its argument names.
        query = body.strip().removeprefix("BEGIN").strip().removeprefix("RETURN")
        query = query.strip().removesuffix("END").strip().removesuffix(";")
        prepared = query.replace("session", "$1").replace("$1_id", "session_id")
        prepared = prepared.replace("after", "$2").replace("want", "$3")
        await connection.execute(f"PREPARE history(uuid, bigint, integer) AS {prepared}")
        [explained] = json.loads(
            await connection.fetchval(
                f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE history('{session}', 0, {limit})"
            )
        )
    finally:
        await arranged.rollback()
        await connection.close()
    # A probe for each of the `limit` messages, and one for the newest's number.
    assert _rows_read(explained["Plan"], "agent_messages") <= 2 * limit + 1


async def _statements_of(coroutine: Any) -> tuple[float, Any]:
    before = _statements()
    answered = await coroutine
    return _statements() - before, answered


async def test_holding_a_call_costs_one_statement_more_than_running_it(
    agent_client: httpx.AsyncClient, model: FakeOpenAI
) -> None:
    """The same delete, run at once (the setting `never`) and held for a yes (`deletes`):
    the turn that asks costs one statement more than the turn that runs it."""
    for title in ("Buy milk", "Call mom"):
        await make_task(agent_client, user="alice", title=title)
    costs = {}
    for confirm, todo_id in (("never", "1"), ("deletes", "2")):
        settings = {"confirm": confirm}
        await agent_client.patch("/api/alice/settings", json=settings, headers=auth("alice"))
        model.script(
            tool_calls(call("delete_todo", {"todo_id": todo_id}, id="call_del")), reply("Done.")
        )
        costs[confirm], answered = await _statements_of(chat(agent_client, "delete it"))
    assert answered["pending_approvals"], answered  # the second turn asked
    assert costs["deletes"] <= costs["never"] + 1, costs
