"""The schema comes from Alembic only, and the migrations describe the models exactly."""

from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, inspect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import SQLModel

import backend.models  # noqa: F401  (registers the tables)
from backend.migrations import alembic_config, current_revision, head_revision


def _differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, SQLModel.metadata))


async def test_the_migrated_schema_matches_the_models(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        assert await connection.run_sync(_differences) == []
        assert await current_revision(connection) == head_revision()


def _migrate(connection: Connection, direction: str, target: str) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    getattr(command, direction)(config, target)


async def test_the_latest_migrations_go_down_to_0001_and_up_again(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        await connection.run_sync(_migrate, "downgrade", "0001")
        assert await current_revision(connection) == "0001"
        columns = await connection.run_sync(
            lambda sync: {c["name"] for c in inspect(sync).get_columns("tasks")}
        )
        assert "parent_id" not in columns
        await connection.run_sync(_migrate, "upgrade", "head")
    async with engine.connect() as connection:
        assert await connection.run_sync(_differences) == []
        assert await current_revision(connection) == head_revision()
