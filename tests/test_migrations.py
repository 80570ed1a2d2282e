"""The schema comes from Alembic only, and the migrations describe the models exactly."""

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import SQLModel

import backend.models  # noqa: F401  (registers the tables)
from backend.migrations import current_revision, head_revision


def _differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, SQLModel.metadata))


async def test_the_migrated_schema_matches_the_models(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        assert await connection.run_sync(_differences) == []
        assert await current_revision(connection) == head_revision()
