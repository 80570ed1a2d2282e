"""Alembic environment: async (asyncpg), and able to run on a connection it is handed."""

import asyncio
import logging.config

from alembic import context
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlmodel import SQLModel

import backend.models  # noqa: F401  (registers the tables on the metadata)
from backend.migrations import declared
from backend.settings import Settings

config = context.config
if config.config_file_name and not config.attributes.get("connection"):
    logging.config.fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = SQLModel.metadata


def _configure_and_run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        include_name=declared,
    )
    with context.begin_transaction():
        context.run_migrations()


def _offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url") or Settings().database_url,
        target_metadata=target_metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _online() -> None:
    url = config.get_main_option("sqlalchemy.url") or Settings().database_url
    if not url:
        raise SystemExit("Set DATABASE_URL to run migrations.")
    engine = create_async_engine(url)
    async with engine.connect() as connection:
        await connection.run_sync(_configure_and_run)
    await engine.dispose()


if context.is_offline_mode():
    _offline()
elif (connection := config.attributes.get("connection")) is not None:
    # `todo-agent migrate` and the tests hand us a connection (see backend/migrations.py).
    _configure_and_run(connection)
else:
    asyncio.run(_online())
