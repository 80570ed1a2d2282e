"""Apply the Alembic migrations, and tell whether a database is at head."""

from functools import cache
from importlib import import_module
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

# The scripts ship inside the package (the top-level alembic/ links here for developers), so
# an installed wheel migrates with no source tree and no alembic.ini beside it.
SCRIPT_LOCATION = Path(__file__).resolve().parent / "alembic"
# Serializes concurrent `migrate` runs (several replicas starting at once).
_MIGRATION_LOCK_ID = 0x70D0A6E7
# What exists only where the server has pgvector (0012 makes it when it can), so the models
# do not declare it: passages' vectors (with their indexes) and the key they refer to.
_WHERE_PGVECTOR = {("table", "passage_vectors"), ("unique_constraint", "uq_passages_list_id")}


def alembic_config() -> Config:
    """Alembic configured from code: the packaged scripts, no ini file."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    return config


def declared(name: str | None, type_: str, parent_names: object) -> bool:
    """Whether a database object is one the models declare, for Alembic's `include_name`:
    comparing a database with the models (the tests, `alembic revision --autogenerate`)
    leaves out what only pgvector's servers have, rather than proposing to drop it."""
    return (type_, name) not in _WHERE_PGVECTOR


@cache
def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def _upgrade(connection: Connection) -> None:
    connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _MIGRATION_LOCK_ID})
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
    # Passages' vectors exist only where pgvector does (0012); a server that has it now, and
    # did not when 0012 ran, gets them here, with what later revisions changed of them.
    vectors = import_module("backend.alembic.versions.0012_passage_vectors")
    if not vectors.present(connection) and vectors.create(connection):
        import_module("backend.alembic.versions.0016_search_estimates").revise(connection)


async def migrate(engine: AsyncEngine) -> None:
    """Bring the database to the head revision (idempotent, safe to run concurrently)."""
    async with engine.begin() as connection:
        await connection.run_sync(_upgrade)


async def current_revision(connection: AsyncConnection) -> str | None:
    result = await connection.execute(text("SELECT version_num FROM alembic_version"))
    return result.scalar_one_or_none()
