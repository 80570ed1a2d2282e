"""The hot path's bare asyncpg connection (`Database.raw`): counted, pooled, and dropped
only when it is broken."""

import asyncio
import contextlib
from collections.abc import Callable

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy import text

from backend.db import Database, Statement
from backend.errors import DatabaseUnavailable
from backend.settings import Settings

_PID = Statement(text("SELECT pg_backend_pid() AS pid, CAST(:n AS int) + 1 AS next"))
_DIVIDE_BY_ZERO = Statement(text("SELECT 1 / CAST(:n AS int)"))
_SLEEP = Statement(text("SELECT pg_sleep(:s)"))


async def test_raw_statements_are_counted_and_bind_named_parameters(
    make_settings: Callable[..., Settings],
) -> None:
    counted: list[int] = []
    database = Database(make_settings(), on_statement=lambda: counted.append(1))
    try:
        async with database.raw() as db:
            row = await db.fetchrow(_PID, {"n": 41})
            await db.fetchrow(_PID, {"n": 1})
        assert row["next"] == 42
        assert len(counted) == 2
    finally:
        await database.dispose()


async def test_an_error_the_server_answers_keeps_the_connection(
    make_settings: Callable[..., Settings],
) -> None:
    database = Database(make_settings(db_pool_size=1))
    try:
        async with database.raw() as db:
            pid = (await db.fetchrow(_PID, {"n": 0}))["pid"]
        with pytest.raises(asyncpg.DivisionByZeroError):
            async with database.raw() as db:
                await db.fetchrow(_DIVIDE_BY_ZERO, {"n": 0})
        async with database.raw() as db:
            assert (await db.fetchrow(_PID, {"n": 0}))["pid"] == pid
    finally:
        await database.dispose()


async def test_a_statement_cancelled_midway_drops_its_connection(
    make_settings: Callable[..., Settings],
) -> None:
    database = Database(make_settings(db_pool_size=1))
    try:
        async with database.raw() as db:
            pid = (await db.fetchrow(_PID, {"n": 0}))["pid"]

        asking = asyncio.Event()

        async def sleep() -> None:
            async with database.raw() as db:
                asking.set()  # and it runs on into fetchrow until that waits for the server
                await db.fetchrow(_SLEEP, {"s": 5.0})

        sleeping = asyncio.create_task(sleep())
        await asking.wait()
        sleeping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sleeping
        async with database.raw() as db:
            assert (await db.fetchrow(_PID, {"n": 0}))["pid"] != pid
    finally:
        await database.dispose()


async def test_an_error_of_the_caller_inside_the_block_keeps_the_connection(
    make_settings: Callable[..., Settings],
) -> None:
    database = Database(make_settings(db_pool_size=1))
    try:
        pids = []
        with contextlib.suppress(LookupError):
            async with database.raw() as db:
                pids.append((await db.fetchrow(_PID, {"n": 0}))["pid"])
                raise LookupError("no such session")
        async with database.raw() as db:
            assert (await db.fetchrow(_PID, {"n": 0}))["pid"] == pids[0]
    finally:
        await database.dispose()


@pytest.mark.parametrize("pause_s", [0.0, 0.001, 0.05])
async def test_a_connection_the_server_ends_while_idle_is_unavailable_then_replaced(
    make_settings: Callable[..., Settings], database_url: str, pause_s: float
) -> None:
    """A server that shuts down sends "terminating connection" (57P01) to its idle
    connections. Depending on when the next statement starts, asyncpg reports it as that
    error, as a closed connection, or as a protocol that is not idle: each is a 503
    (DatabaseUnavailable), never a 500, and the next statement gets a new connection."""
    database = Database(make_settings(db_pool_size=1))
    try:
        async with database.raw() as db:
            pid = (await db.fetchrow(_PID, {"n": 0}))["pid"]
        terminator = await asyncpg.connect(database_url.replace("+asyncpg", ""))
        try:
            assert await terminator.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await terminator.close()
        await asyncio.sleep(pause_s)
        with pytest.raises(DatabaseUnavailable):
            async with database.raw() as db:
                await db.fetchrow(_PID, {"n": 0})
        async with database.raw() as db:
            assert (await db.fetchrow(_PID, {"n": 0}))["pid"] != pid
    finally:
        await database.dispose()
