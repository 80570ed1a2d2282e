"""The hot path's bare asyncpg connection (`Database.raw`): counted, pooled, and dropped
only when it is broken."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from backend.db import Database, Statement, is_database_unavailable
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


@pytest.fixture(params=[1, 10], ids=["pool of 1", "pool of 10, one kept"])
async def one_connection(
    make_settings: Callable[..., Settings], request: pytest.FixtureRequest
) -> AsyncIterator[Database]:
    """A Database whose statements all run on one connection, while it lasts: the pool's
    only one, or the one the bare path keeps checked out (a tenth of a pool of ten). Which
    one a statement ran on (`_pid`) says whether the last one was kept or replaced."""
    database = Database(make_settings(db_pool_size=request.param))
    yield database
    await database.dispose()


async def _pid(database: Database) -> int:
    """The backend process of the connection a statement gets now."""
    async with database.raw() as db:
        pid: int = (await db.fetchrow(_PID, {"n": 0}))["pid"]
    return pid


async def test_an_error_the_server_answers_keeps_the_connection(one_connection: Database) -> None:
    pid = await _pid(one_connection)
    with pytest.raises(asyncpg.DivisionByZeroError):
        async with one_connection.raw() as db:
            await db.fetchrow(_DIVIDE_BY_ZERO, {"n": 0})
    assert await _pid(one_connection) == pid


async def test_a_statement_cancelled_midway_drops_its_connection(
    one_connection: Database,
) -> None:
    pid = await _pid(one_connection)
    asking = asyncio.Event()

    async def sleep() -> None:
        async with one_connection.raw() as db:
            asking.set()  # and it runs on into fetchrow until that waits for the server
            await db.fetchrow(_SLEEP, {"s": 5.0})

    sleeping = asyncio.create_task(sleep())
    await asking.wait()
    sleeping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sleeping
    assert await _pid(one_connection) != pid


async def test_an_error_of_the_caller_inside_the_block_keeps_the_connection(
    one_connection: Database,
) -> None:
    pids = []
    with contextlib.suppress(LookupError):
        async with one_connection.raw() as db:
            pids.append((await db.fetchrow(_PID, {"n": 0}))["pid"])
            raise LookupError("no such session")
    assert await _pid(one_connection) == pids[0]


@pytest.mark.parametrize("pause_s", [0.0, 0.001, 0.05])
async def test_a_connection_the_server_ends_while_idle_is_unavailable_then_replaced(
    one_connection: Database, database_url: str, pause_s: float
) -> None:
    """A server that shuts down sends "terminating connection" (57P01) to its idle
    connections. Depending on when the next statement starts, asyncpg reports it as that
    error, as a closed connection, or as a protocol that is not idle: each is a 503
    (DatabaseUnavailable), never a 500, and the next statement gets a new connection."""
    pid = await _pid(one_connection)
    terminator = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        assert await terminator.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await terminator.close()
    await asyncio.sleep(pause_s)
    with pytest.raises(DatabaseUnavailable):
        async with one_connection.raw() as db:
            await db.fetchrow(_PID, {"n": 0})
    assert await _pid(one_connection) != pid


# The tests of keeping need a connection to keep: `one_connection` with a pool of ten only.
_pool_of_ten = pytest.mark.parametrize(
    "one_connection", [10], ids=["pool of 10, one kept"], indirect=True
)


@_pool_of_ten
async def test_the_bare_path_keeps_a_connection_checked_out_between_statements(
    one_connection: Database,
) -> None:
    pool = one_connection.engine.sync_engine.pool
    pid = await _pid(one_connection)
    assert pool.checkedout() == 1  # type: ignore[attr-defined]
    assert await _pid(one_connection) == pid
    await one_connection.dispose()
    assert pool.checkedout() == 0  # type: ignore[attr-defined]


@_pool_of_ten
async def test_a_kept_connection_goes_back_when_the_pool_has_no_other(
    one_connection: Database,
) -> None:
    """Nine held elsewhere: the tenth, used by the bare path, goes back to the pool at once,
    for whoever waits for it."""
    engine = one_connection.engine
    async with contextlib.AsyncExitStack() as held:
        for _ in range(9):
            await held.enter_async_context(engine.connect())
        await _pid(one_connection)
        assert engine.sync_engine.pool.checkedout() == 9  # type: ignore[attr-defined]
        async with engine.connect() as tenth:
            assert (await tenth.execute(text("SELECT 1"))).scalar() == 1


@_pool_of_ten
async def test_kept_connections_are_replaced_after_a_disconnect_seen_elsewhere(
    one_connection: Database, database_url: str
) -> None:
    """A disconnect seen on another path (here a Core connection whose server process
    ended) makes SQLAlchemy's pool replace every connection opened before it: the one the
    bare path kept too."""
    kept = await _pid(one_connection)
    terminator = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        async with one_connection.engine.connect() as other:
            victim = (await other.execute(text("SELECT pg_backend_pid()"))).scalar()
            assert victim != kept
            assert await terminator.fetchval("SELECT pg_terminate_backend($1)", victim)
            await asyncio.sleep(0.05)
            with pytest.raises(DBAPIError) as failure:
                await other.execute(text("SELECT 1"))
            assert is_database_unavailable(failure.value)
    finally:
        await terminator.close()
    assert await _pid(one_connection) not in (kept, victim)
