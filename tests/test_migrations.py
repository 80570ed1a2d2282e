"""The schema comes from Alembic only, and the migrations describe the models exactly.

Passages' vectors exist only where the server has pgvector (0012): the models do not
declare them, so the comparison leaves them out (`declared`), and these tests check instead
that they are there exactly where pgvector is (the embedded PostgreSQL 16; `make test`
runs this module on it too)."""

from importlib import import_module
from typing import Any

import httpx
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import SQLModel

import backend.models  # noqa: F401  (registers the tables)
from backend.migrations import alembic_config, current_revision, declared, head_revision
from tests.conftest import auth
from tests.factories import make_task

_vectors = import_module("backend.alembic.versions.0012_passage_vectors")


def _differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(
        connection, opts={"compare_type": True, "include_name": declared}
    )
    return list(compare_metadata(context, SQLModel.metadata))


def _vectors_where_pgvector_is(connection: Connection) -> tuple[bool, bool]:
    """(whether the server has pgvector, whether passages' vectors are there)."""
    return _vectors.available(connection), _vectors.present(connection)


def _indexes(connection: Connection, table: str) -> set[str]:
    query = text("SELECT indexname FROM pg_indexes WHERE tablename = :table")
    return set(connection.execute(query, {"table": table}).scalars())


async def test_the_migrated_schema_matches_the_models(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        assert await connection.run_sync(_differences) == []
        assert await current_revision(connection) == head_revision()
        available, present = await connection.run_sync(_vectors_where_pgvector_is)
        assert present == available
        if present:
            indexes = await connection.run_sync(_indexes, "passage_vectors")
            sizes = _vectors.INDEXED_DIMENSIONS
            assert {f"ix_passage_vectors_hnsw_{size}" for size in sizes} <= indexes


def _migrate(connection: Connection, direction: str, target: str) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    getattr(command, direction)(config, target)


async def test_the_latest_migrations_go_down_to_0001_and_up_again(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        available, _ = await connection.run_sync(_vectors_where_pgvector_is)
        await connection.run_sync(_migrate, "downgrade", "0001")
        assert await connection.run_sync(_vectors.present) is False
        assert await current_revision(connection) == "0001"
        columns = await connection.run_sync(
            lambda sync: {c["name"] for c in inspect(sync).get_columns("tasks")}
        )
        assert "parent_id" not in columns
        await connection.run_sync(_migrate, "upgrade", "head")
    async with engine.connect() as connection:
        assert await connection.run_sync(_differences) == []
        assert await current_revision(connection) == head_revision()
        assert await connection.run_sync(_vectors_where_pgvector_is) == (available, available)


async def test_0022_gives_none_back_to_the_tasks_caldav_marked_without_priority(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    unset = await make_task(client, user="ada", title="No priority")
    chosen = await make_task(client, user="ada", title="Medium", priority="medium")
    marks = text(
        "SELECT t.title, t.priority || ':' || i.priority_none::text"
        " FROM tasks t JOIN dav_items i ON i.task_id = t.id"
    )
    async with engine.begin() as connection:
        await connection.run_sync(_migrate, "downgrade", "0021")
        assert {title: mark for title, mark in await connection.execute(marks)} == {
            "No priority": "medium:true",
            "Medium": "medium:false",
        }
        await connection.run_sync(_migrate, "upgrade", "head")
    for task, priority in ((unset, "none"), (chosen, "medium")):
        got = await client.get(f"/api/ada/tasks/{task['id']}", headers=auth("ada"))
        assert got.json()["priority"] == priority
