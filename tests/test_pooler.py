"""The service behind a connection pooler in transaction mode (PgBouncer): nothing about a
connection outlives its transaction, so every transaction sets its role and acting user, no
prepared statement is kept, and what needs a connection of its own (LISTEN, migrations)
takes DATABASE_DIRECT_URL.

These tests hold directly as well; `make test` runs them a second time through a real
PgBouncer (TEST_THROUGH_PGBOUNCER=1, tests/conftest.py), with the other files of its list."""

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.settings import Settings
from tests.chat_helpers import chat
from tests.conftest import THROUGH_PGBOUNCER, server_env, serving
from tests.factories import make_task
from tests.servers import run_cli

# Tables a turn and a REST call insert into, on the hot path (the turn's two database
# functions, outside any transaction) and on the ORM's.
_RECORDED = ("users", "tasks", "agent_sessions", "agent_messages")


@pytest.fixture
async def recording_writers(engine: AsyncEngine) -> AsyncIterator[None]:
    """Every row inserted into `_RECORDED` notes the role that inserted it (a column default,
    evaluated as the inserting role), for this test only."""
    async with engine.begin() as connection:
        for table in _RECORDED:
            await connection.execute(
                text(f"ALTER TABLE {table} ADD COLUMN written_by text DEFAULT current_user")
            )
    try:
        yield
    finally:
        async with engine.begin() as connection:
            for table in _RECORDED:
                await connection.execute(text(f"ALTER TABLE {table} DROP COLUMN written_by"))


async def test_the_service_writes_as_the_policies_role_whoever_it_logs_in_as(
    recording_writers: None, settings: Settings, engine: AsyncEngine
) -> None:
    """The tests log in as a superuser, which row-level security would not hold; the rows
    the service writes were written as `todo_agent_app`, on the ORM's path (REST, the
    stub's tool call) and on the turn's own statements."""
    async with serving(settings) as client:
        await make_task(client, user="alice", title="Milk")
        answer = await chat(client, "add call the plumber", user="alice")
        await chat(client, "hello", user="bob")
    assert "plumber" in answer["response"].lower()
    async with engine.connect() as connection:
        writers = {
            table: set(
                (await connection.execute(text(f"SELECT DISTINCT written_by FROM {table}")))
                .scalars()
                .all()
            )
            for table in _RECORDED
        }
    assert writers == {table: {"todo_agent_app"} for table in _RECORDED}


async def test_concurrent_turns_share_few_server_connections(
    client: httpx.AsyncClient,
) -> None:
    """Through PgBouncer the pool's 20 connections share 8 server connections, so each
    transaction may land on another one than the last: a prepared statement kept from one
    would be missing in the next, or another client's of the same name there."""
    users = [f"user-{i}" for i in range(8)]

    async def converse(user: str) -> list[str]:
        first = await chat(client, f"add water the plants of {user}", user=user)
        second = await chat(client, "what are my tasks?", user=user, session_id=first["session_id"])
        return [first["response"], second["response"]]

    answers = await asyncio.gather(*(converse(user) for user in users))
    for user, (_, listed) in zip(users, answers, strict=True):
        assert f"plants of {user}" in listed.lower()
        assert all(other not in listed for other in users if other != user)


def test_migrate_goes_past_the_pooler(database_url: str, engine: AsyncEngine) -> None:
    """`todo-agent migrate` takes DATABASE_DIRECT_URL: DATABASE_URL names a server that is
    not there, and migrating works."""
    env = server_env(database_url) | {
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:9/nowhere",
        "DATABASE_DIRECT_URL": database_url,
    }
    migrated = run_cli("migrate", env=env)
    assert migrated.returncode == 0, migrated.stderr


def test_direct_url_defaults_to_the_database_url_and_says_whether_a_pooler_stands_between(
    make_settings: Callable[..., Settings],
) -> None:
    alone = Settings(_env_file=None, database_url="postgresql://u@db/app")
    assert alone.direct_database_url == "postgresql+asyncpg://u@db/app"
    assert not alone.behind_pooler
    pooled = Settings(
        _env_file=None,
        database_url="postgresql://u@pgbouncer:6432/app",
        database_direct_url="postgres://u@db:5432/app",
    )
    assert pooled.direct_database_url == "postgresql+asyncpg://u@db:5432/app"
    assert pooled.behind_pooler
    assert make_settings().behind_pooler is THROUGH_PGBOUNCER
